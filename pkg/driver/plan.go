package driver

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"sort"
	"strings"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	configapi "github.com/tangram-gpu/tangram/api/gpu/v1alpha1"
	"github.com/tangram-gpu/tangram/pkg/cdi"
	"github.com/tangram-gpu/tangram/pkg/device"
	"github.com/tangram-gpu/tangram/pkg/gpu"
)

// plannedDevice is one of our driver's allocation results in a claim, tied
// to the card it names. Computed purely from the claim and the inventory.
type plannedDevice struct {
	Request string
	Pool    string
	Device  string
	GPU     gpu.GPU
	// ShareID is the allocator's share ID on a shareable card, "" otherwise.
	ShareID string
	// Share is true when the result holds part of the card's memory, so it
	// must be isolated; a result that consumed the whole card's memory (no
	// capacity requested, or compute only) is a whole card.
	Share bool
	// MemoryBytes is the consumed memory of a share, the card's memory for
	// a whole card.
	MemoryBytes int64
	// ComputePercent is the consumed compute of a share, 0 when none.
	ComputePercent int64
	// AllocatableMemoryBytes is the most memory one allocation may consume
	// on the card (see cdi.Result); 0 for cards not published as shareable.
	AllocatableMemoryBytes int64
	// AdminAccess results monitor a card without owning it.
	AdminAccess bool
	// ConsumedCapacity is the allocation's consumed capacity, as given.
	ConsumedCapacity map[resourceapi.QualifiedName]resource.Quantity
}

// planClaim picks our driver's results out of the claim's allocation and
// resolves each device name to a card of this node. allocatable holds the
// published per-allocation memory maximum of shareable cards, by device.
func planClaim(claim *resourceapi.ResourceClaim, pool string, cards map[string]gpu.GPU, allocatable map[string]int64) ([]plannedDevice, error) {
	if claim.Status.Allocation == nil {
		return nil, fmt.Errorf("claim %s/%s is not allocated", claim.Namespace, claim.Name)
	}
	var out []plannedDevice
	for _, r := range claim.Status.Allocation.Devices.Results {
		if r.Driver != device.DriverName {
			continue
		}
		if r.Pool != pool {
			return nil, fmt.Errorf("request %q: device %s is in pool %q, but this node's pool is %q; the claim was allocated for another node",
				r.Request, r.Device, r.Pool, pool)
		}
		card, ok := cards[r.Device]
		if !ok {
			return nil, fmt.Errorf("request %q: device %s is not a GPU of this node (it has %s); the node's inventory changed after allocation",
				r.Request, r.Device, knownDevices(cards))
		}
		p := plannedDevice{
			Request:     r.Request,
			Pool:        r.Pool,
			Device:      r.Device,
			GPU:         card,
			MemoryBytes: card.MemoryBytes,
			AdminAccess: r.AdminAccess != nil && *r.AdminAccess,

			AllocatableMemoryBytes: allocatable[r.Device],
			ConsumedCapacity:       r.ConsumedCapacity,
		}
		if r.ShareID != nil {
			p.ShareID = string(*r.ShareID)
		}
		if q, ok := r.ConsumedCapacity[device.CapacityMemory]; ok {
			memory, err := cdi.Int64Value(q)
			if err != nil {
				return nil, fmt.Errorf("request %q: consumed memory %s on %s: %w", r.Request, q.String(), r.Device, err)
			}
			switch {
			case memory == 0 && p.AdminAccess:
				// Monitoring asks for no memory so that it fits beside
				// the card's holders; it sees the card as it is.
			case memory == 0:
				return nil, fmt.Errorf("request %q: consumed no memory on %s; memory 0 is only for admin access (monitoring), ask for at least one memory step (e.g. 256Mi) or no memory for a whole card, then recreate the claim",
					r.Request, r.Device)
			case memory < 0 || memory > card.MemoryBytes:
				return nil, fmt.Errorf("request %q: consumed memory %s on %s is outside 1..%d bytes, the card's memory; the claim was allocated against a different inventory, delete and recreate it",
					r.Request, q.String(), r.Device, card.MemoryBytes)
			}
			if memory > 0 {
				p.MemoryBytes = memory
			}
		}
		if q, ok := r.ConsumedCapacity[device.CapacityCompute]; ok {
			compute, err := cdi.Int64Value(q)
			if err != nil {
				return nil, fmt.Errorf("request %q: consumed compute %s on %s: %w", r.Request, q.String(), r.Device, err)
			}
			if compute < 0 || compute > 100 {
				return nil, fmt.Errorf("request %q: consumed compute %s on %s is outside 0..100 percent; the claim was allocated against a different inventory, delete and recreate it",
					r.Request, q.String(), r.Device)
			}
			p.ComputePercent = compute
		}
		// One definition of "share" for accounting and for the CDI edits.
		p.Share = cdi.IsShare(cdi.Result{GPU: card, ShareID: p.ShareID, ConsumedCapacity: r.ConsumedCapacity,
			AllocatableMemoryBytes: p.AllocatableMemoryBytes, AdminAccess: p.AdminAccess})
		out = append(out, p)
	}
	return out, nil
}

func knownDevices(cards map[string]gpu.GPU) string {
	if len(cards) == 0 {
		return "no GPUs"
	}
	list := make([]string, 0, len(cards))
	for name := range cards {
		list = append(list, name)
	}
	sort.Slice(list, func(i, j int) bool { return cards[list[i]].Index < cards[list[j]].Index })
	return strings.Join(list, ", ")
}

// Holding is how a prepared (or half-prepared) claim holds one card.
type Holding struct {
	ClaimUID string
	// Claim is "namespace/name", for error messages.
	Claim string
	UUID  string
	Share bool
	// MPS: the share is enforced with the mps backend (else none).
	MPS bool
}

// overlapAdvice ends an overlap refusal. The usual cause is benign: a pod
// deleted with a grace period of 0 (or force-deleted) leaves the API server
// at once, its claim is deallocated and the card given to the next claim
// while the kubelet has yet to unprepare the old one (the soak sees this in
// every wave). The kubelet retries the prepare, so the refusal clears by
// itself; only a lasting one means a stale or wrong allocation.
const overlapAdvice = "the kubelet retries, and this clears once that claim is unprepared (e.g. its pod was just force-deleted); if it lasts, the allocation is stale or wrong: delete and recreate the claim"

// checkOverlap is the last line of defence against a scheduler mistake or a
// stale allocation: a whole card may not be held by any other claim, and a
// share may not go onto a card another claim holds whole. Admin-access
// results observe cards and are exempt.
func checkOverlap(claimUID, claim string, plan []plannedDevice, held []Holding) error {
	for _, p := range plan {
		if p.AdminAccess {
			continue
		}
		for _, h := range held {
			if h.ClaimUID == claimUID || h.UUID != p.GPU.UUID {
				continue
			}
			switch {
			case !p.Share && h.Share:
				return fmt.Errorf("refusing to give %s (%s) whole to claim %s: claim %s holds a share of it; %s",
					p.Device, p.GPU.UUID, claim, h.Claim, overlapAdvice)
			case !p.Share:
				return fmt.Errorf("refusing to give %s (%s) whole to claim %s: claim %s already holds it whole; %s",
					p.Device, p.GPU.UUID, claim, h.Claim, overlapAdvice)
			case !h.Share:
				return fmt.Errorf("refusing a share of %s (%s) to claim %s: claim %s holds the card whole; %s",
					p.Device, p.GPU.UUID, claim, h.Claim, overlapAdvice)
			}
		}
	}
	return nil
}

// checkBackends refuses a share whose sharing backend differs from that of
// another claim's share of the same card. The webhook can only see one
// claim, and the card is chosen after admission, so only here can a mix
// across claims be seen: an mps share switches the card to
// EXCLUSIVE_PROCESS, where a process of a none share (not an MPS client)
// cannot create a context, and a none share beside MPS clients would run
// outside every MPS limit.
func checkBackends(claimUID, claim string, devices []PreparedDevice, held []Holding) error {
	for _, dev := range devices {
		if !dev.Share || dev.AdminAccess {
			continue
		}
		for _, h := range held {
			if h.UUID != dev.UUID || !h.Share || h.ClaimUID == claimUID || h.MPS == dev.MPS {
				continue
			}
			return fmt.Errorf("refusing a %s share of %s (%s) to claim %s: claim %s holds a %s share of the same card, and one card's shares must all use one sharing backend; "+
				"give both claims the same sharing.backend in their GpuConfig (or DeviceClass), or wait until claim %s is gone",
				backendName(dev.MPS), dev.Device, dev.UUID, claim, h.Claim, backendName(h.MPS), h.Claim)
		}
	}
	return nil
}

func backendName(mps bool) configapi.SharingBackend {
	if mps {
		return configapi.BackendMPS
	}
	return configapi.BackendNone
}

// usesMPS reports whether a share is enforced with MPS: the default
// backend, unless the effective config says "none".
func usesMPS(dev SpecDevice) bool {
	if dev.Config == nil || dev.Config.Sharing == nil || dev.Config.Sharing.Backend == "" {
		return configapi.DefaultBackend == configapi.BackendMPS
	}
	return dev.Config.Sharing.Backend == configapi.BackendMPS
}

// allocationDigest fingerprints what of the claim's allocation concerns
// this driver: its results (device, share, consumed capacity, admin access)
// and the opaque configs for it. Prepare is idempotent for a claim UID and
// this digest together: a claim deallocated and allocated again keeps its
// UID, and must not be answered with what was prepared for the old
// allocation.
func allocationDigest(claim *resourceapi.ResourceClaim) string {
	if claim.Status.Allocation == nil {
		return ""
	}
	type config struct {
		Source     resourceapi.AllocationConfigSource
		Requests   []string
		Parameters json.RawMessage
	}
	var in struct {
		Results []resourceapi.DeviceRequestAllocationResult
		Configs []config
	}
	for _, r := range claim.Status.Allocation.Devices.Results {
		if r.Driver == device.DriverName {
			in.Results = append(in.Results, r)
		}
	}
	for _, c := range claim.Status.Allocation.Devices.Config {
		if c.Opaque != nil && c.Opaque.Driver == device.DriverName {
			in.Configs = append(in.Configs, config{Source: c.Source, Requests: c.Requests, Parameters: c.Opaque.Parameters.Raw})
		}
	}
	// Quantities marshal canonically and map keys sorted, so equal
	// allocations give equal bytes.
	raw, err := json.Marshal(in)
	if err != nil {
		// Not reachable with these types; an empty digest compares the
		// recorded devices instead.
		return ""
	}
	sum := sha256.Sum256(raw)
	return "sha256:" + hex.EncodeToString(sum[:])
}
