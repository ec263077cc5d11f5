package clusterview

import (
	"fmt"
	"sort"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/utils/ptr"

	"github.com/tangram-gpu/tangram/pkg/device"
)

// Disagreements compares a view (typically decoded from
// `kubectl tangram status -o json`) with the claims' status, both ways:
// every allocation result of our driver must appear on its card with the
// consumed memory and compute, and every allocation the view shows must
// come from a claim result. It returns one line per mismatch, none when
// they agree. The e2e suite calls it on a live cluster.
//
// Results on devices the view does not list (another node was filtered
// out, or the device is not published) are skipped; the view reports the
// latter in Warnings.
func Disagreements(v *View, claims []*resourceapi.ResourceClaim) []string {
	type key struct{ pool, device, claimUID, request, shareID string }
	inView := map[key]AllocationView{}
	cards := map[[2]string]CardView{}
	for _, n := range v.Nodes {
		for _, c := range n.Cards {
			cards[[2]string{c.Pool, c.Device}] = c
			for _, a := range c.Allocations {
				inView[key{c.Pool, c.Device, a.Claim.UID, a.Request, a.ShareID}] = a
			}
		}
	}
	var out []string
	seen := map[key]bool{}
	for _, claim := range claims {
		if claim.Status.Allocation == nil {
			continue
		}
		for _, r := range claim.Status.Allocation.Devices.Results {
			if r.Driver != device.DriverName {
				continue
			}
			card, ok := cards[[2]string{r.Pool, r.Device}]
			if !ok {
				continue
			}
			k := key{r.Pool, r.Device, string(claim.UID), r.Request, string(ptr.Deref(r.ShareID, ""))}
			seen[k] = true
			a, ok := inView[k]
			if !ok {
				out = append(out, fmt.Sprintf("claim %s/%s holds %s/%s (request %s) but the view does not show it there",
					claim.Namespace, claim.Name, r.Pool, r.Device, r.Request))
				continue
			}
			out = append(out, compareAmounts(claim, r, card, a)...)
		}
	}
	for k, a := range inView {
		if !seen[k] {
			out = append(out, fmt.Sprintf("the view shows claim %s on %s/%s (request %s), but no claim result says so",
				a.Claim, k.pool, k.device, k.request))
		}
	}
	sort.Strings(out)
	return out
}

// compareAmounts checks one result's consumed capacity against the view: a
// share shows exactly what it consumed, a whole card its full capacity.
func compareAmounts(claim *resourceapi.ResourceClaim, r resourceapi.DeviceRequestAllocationResult, card CardView, a AllocationView) []string {
	var out []string
	where := fmt.Sprintf("claim %s/%s on %s/%s", claim.Namespace, claim.Name, r.Pool, r.Device)
	if a.Whole {
		if a.MemoryBytes != card.MemoryBytes || a.ComputePercent != card.ComputePercent {
			out = append(out, fmt.Sprintf("%s: whole card shown with %d bytes and %d%%, the card has %d bytes and %d%%",
				where, a.MemoryBytes, a.ComputePercent, card.MemoryBytes, card.ComputePercent))
		}
		return out
	}
	if r.ShareID == nil || r.ConsumedCapacity == nil {
		return append(out, where+": the view shows a share, but the result holds the card whole")
	}
	if mem := r.ConsumedCapacity[device.CapacityMemory]; mem.Value() != a.MemoryBytes {
		out = append(out, fmt.Sprintf("%s: memory %d bytes in the view, %d consumed", where, a.MemoryBytes, mem.Value()))
	}
	if comp := r.ConsumedCapacity[device.CapacityCompute]; comp.Value() != a.ComputePercent {
		out = append(out, fmt.Sprintf("%s: compute %d%% in the view, %d%% consumed", where, a.ComputePercent, comp.Value()))
	}
	return out
}
