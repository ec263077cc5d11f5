package plugin

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"sort"
	"strings"

	resourceapi "k8s.io/api/resource/v1"

	configapi "github.com/tangram-gpu/tangram/api/gpu/v1alpha1"
	"github.com/tangram-gpu/tangram/pkg/config"
	"github.com/tangram-gpu/tangram/pkg/device"
	"github.com/tangram-gpu/tangram/pkg/gpu"
	"github.com/tangram-gpu/tangram/pkg/plugin/prepared"
)

// planClaim picks our driver's results out of the claim's allocation,
// resolves each device name to a card of this node and decides, once, which
// results are shares. It returns the claim's record, PrepareStarted, without
// configs (see withConfigs) and CDI device IDs; no devices when the claim
// has no result of ours. allocatable holds the published per-allocation
// memory maximum of shareable cards, by device. Pure.
func planClaim(claim *resourceapi.ResourceClaim, pool string, cards map[string]gpu.GPU, allocatable map[string]int64) (prepared.Claim, error) {
	rec := prepared.Claim{UID: string(claim.UID), Namespace: claim.Namespace, Name: claim.Name, State: prepared.PrepareStarted}
	if claim.Status.Allocation == nil {
		return rec, fmt.Errorf("claim %s/%s is not allocated", claim.Namespace, claim.Name)
	}
	rec.Allocation = allocationDigest(claim)
	for _, r := range claim.Status.Allocation.Devices.Results {
		if r.Driver != device.DriverName {
			continue
		}
		if r.Pool != pool {
			return rec, fmt.Errorf("request %q: device %s is in pool %q, but this node's pool is %q; the claim was allocated for another node",
				r.Request, r.Device, r.Pool, pool)
		}
		card, mig, err := resolveDevice(cards, r.Device)
		if err != nil {
			return rec, fmt.Errorf("request %q: %w", r.Request, err)
		}
		p := prepared.Device{
			Request:     r.Request,
			Device:      r.Device,
			GPUUUID:     card.UUID,
			MemoryBytes: card.MemoryBytes,
			AdminAccess: r.AdminAccess != nil && *r.AdminAccess,
		}
		if mig != nil {
			// A MIG partition is isolated in hardware: never a share,
			// never MPS; its memory is its profile's.
			if p.AdminAccess {
				return rec, fmt.Errorf("request %q: admin access to MIG partition %s is not supported; monitor the card's partitions with admin access to a card not in MIG mode, or with nvidia-smi on the node", r.Request, r.Device)
			}
			p.MIG = mig
			profile, _ := card.MIG.Profile(mig.ProfileID)
			p.MemoryBytes = profile.MemoryBytes
			rec.Devices = append(rec.Devices, p)
			continue
		}
		if r.ShareID != nil {
			p.ShareID = string(*r.ShareID)
		}
		if q, ok := r.ConsumedCapacity[device.CapacityMemory]; ok {
			memory, err := device.ExactInt64(q)
			if err != nil {
				return rec, fmt.Errorf("request %q: consumed memory %s on %s: %w", r.Request, q.String(), r.Device, err)
			}
			switch {
			case memory == 0 && p.AdminAccess:
				// Monitoring asks for no memory so that it fits beside
				// the card's holders; it sees the card as it is.
			case memory == 0:
				return rec, fmt.Errorf("request %q: consumed no memory on %s; memory 0 is only for admin access (monitoring), ask for at least one memory step (e.g. 256Mi) or no memory for a whole card, then recreate the claim",
					r.Request, r.Device)
			case memory < 0 || memory > card.MemoryBytes:
				return rec, fmt.Errorf("request %q: consumed memory %s on %s is outside 1..%d bytes, the card's memory; the claim was allocated against a different inventory, delete and recreate it",
					r.Request, q.String(), r.Device, card.MemoryBytes)
			}
			if memory > 0 {
				p.MemoryBytes = memory
			}
		}
		if q, ok := r.ConsumedCapacity[device.CapacityCompute]; ok {
			compute, err := device.ExactInt64(q)
			if err != nil {
				return rec, fmt.Errorf("request %q: consumed compute %s on %s: %w", r.Request, q.String(), r.Device, err)
			}
			if compute < 0 || compute > 100 {
				return rec, fmt.Errorf("request %q: consumed compute %s on %s is outside 0..100 percent; the claim was allocated against a different inventory, delete and recreate it",
					r.Request, q.String(), r.Device)
			}
			p.ComputePercent = compute
		}
		// The one definition of "share" for accounting, the CDI edits and
		// the checkpoint.
		p.Share = isShare(r, card, allocatable[r.Device])
		rec.Devices = append(rec.Devices, p)
	}
	return rec, nil
}

// isShare reports whether a result is a share that needs isolation: it
// does not hold the whole card (device.HoldsWholeCard). A whole card gets
// no MPS, so whole-card work is never slowed by a daemon. The bound is the
// card's allocatable memory (the published memory request policy's
// maximum, 0 for none), not its memory: a card whose memory is not a whole
// number of share steps publishes less as the default and maximum. Admin
// access (monitoring) is never a share: it consumes nothing and must see
// the card as it is, not through an MPS client limit.
func isShare(r resourceapi.DeviceRequestAllocationResult, card gpu.GPU, allocatableMemory int64) bool {
	if r.AdminAccess != nil && *r.AdminAccess {
		return false
	}
	bound := card.MemoryBytes
	if allocatableMemory > 0 && allocatableMemory < bound {
		bound = allocatableMemory
	}
	return !device.HoldsWholeCard(r.ShareID != nil, device.ConsumedMemory(r.ConsumedCapacity), bound)
}

// withConfigs completes a planned record with the effective config of each
// device (in order) and records, on the shares enforced by MPS, the node's
// MPS pipe directory, which is how the record says it uses MPS. A node
// with a sharing backend (nodeBackend, --share-backend) gives it to every
// share; without one, the configs decide. Pure.
func withConfigs(rec prepared.Claim, configs []*configapi.GpuConfig, mpsPipeDir, nodeBackend string) prepared.Claim {
	devices := make([]prepared.Device, len(rec.Devices))
	for i, dev := range rec.Devices {
		dev.Config = configs[i]
		if dev.Share && nodeBackend != "" && dev.Config != nil {
			// The node's backend applies to every share of its cards
			// (config.CheckAllocationBackends refused any other).
			dev.Config = dev.Config.DeepCopy()
			if dev.Config.Sharing == nil {
				dev.Config.Sharing = &configapi.Sharing{}
			}
			dev.Config.Sharing.Backend = configapi.SharingBackend(nodeBackend)
			if nodeBackend != device.ShareBackendMPS {
				dev.Config.Sharing.MPS = nil
			}
		}
		if dev.Share && usesMPS(dev.Config) {
			dev.MPSPipeDir = mpsPipeDir
		}
		devices[i] = dev
	}
	rec.Devices = devices
	return rec
}

// ResolveConfigs is the ConfigResolver backed by pkg/config.
func ResolveConfigs(claim *resourceapi.ResourceClaim, devices []prepared.Device) ([]*configapi.GpuConfig, error) {
	resolved, err := config.Resolve(claim.Status.Allocation.Devices.Config, config.RequestNames(claim))
	if err != nil {
		return nil, err
	}
	out := make([]*configapi.GpuConfig, len(devices))
	for i, p := range devices {
		out[i] = resolved.For(p.Request)
	}
	return out, nil
}

// resolveDevice finds the card a device name of this node names and, for a
// MIG partition (gpu-<i>-mig-<profileID>-<start>), the partition to create:
// the card must be in MIG mode and offer that profile at that placement.
// Pure.
func resolveDevice(cards map[string]gpu.GPU, name string) (gpu.GPU, *prepared.MIG, error) {
	if card, ok := cards[name]; ok {
		return card, nil, nil
	}
	unknown := fmt.Errorf("device %s is not a GPU of this node (it has %s); the node's inventory changed after allocation",
		name, knownDevices(cards))
	ref, err := device.ParseDeviceName(name)
	if err != nil || ref.MIG == nil {
		return gpu.GPU{}, nil, unknown
	}
	card, ok := cards[device.CardDeviceName(ref.Index)]
	if !ok {
		return gpu.GPU{}, nil, unknown
	}
	if card.MIG == nil || !card.MIG.Enabled {
		return gpu.GPU{}, nil, fmt.Errorf("device %s is a MIG partition of card %d (%s), which is not in MIG mode now; the card's MIG mode changed after allocation: delete and recreate the claim",
			name, card.Index, card.UUID)
	}
	profile, ok := card.MIG.Profile(ref.MIG.ProfileID)
	if !ok {
		return gpu.GPU{}, nil, fmt.Errorf("device %s: card %d (%s) has no MIG profile %d; the card's inventory changed after allocation: delete and recreate the claim",
			name, card.Index, card.UUID, ref.MIG.ProfileID)
	}
	placement, ok := profile.PlacementAt(ref.MIG.Start)
	if !ok {
		return gpu.GPU{}, nil, fmt.Errorf("device %s: MIG profile %s of card %d (%s) has no placement at memory slice %d (it has %v); delete and recreate the claim",
			name, profile.Name, card.Index, card.UUID, ref.MIG.Start, profile.Placements)
	}
	return card, &prepared.MIG{ParentIndex: card.Index, ProfileID: profile.ID, Profile: profile.Name, Start: placement.Start, Size: placement.Size}, nil
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
	// MIG is the placement of a MIG partition of the card; nil for the
	// card itself or a share of it.
	MIG *gpu.MIGPlacement
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
func checkOverlap(claimUID, claim string, devices []prepared.Device, held []Holding) error {
	for _, p := range devices {
		if p.AdminAccess {
			continue
		}
		for _, h := range held {
			if h.ClaimUID == claimUID || h.UUID != p.GPUUUID {
				continue
			}
			if p.MIG != nil || h.MIG != nil {
				if err := checkMIGOverlap(p, claim, h); err != nil {
					return err
				}
				continue
			}
			switch {
			case !p.Share && h.Share:
				return fmt.Errorf("refusing to give %s (%s) whole to claim %s: claim %s holds a share of it; %s",
					p.Device, p.GPUUUID, claim, h.Claim, overlapAdvice)
			case !p.Share:
				return fmt.Errorf("refusing to give %s (%s) whole to claim %s: claim %s already holds it whole; %s",
					p.Device, p.GPUUUID, claim, h.Claim, overlapAdvice)
			case !h.Share:
				return fmt.Errorf("refusing a share of %s (%s) to claim %s: claim %s holds the card whole; %s",
					p.Device, p.GPUUUID, claim, h.Claim, overlapAdvice)
			}
		}
	}
	return nil
}

// checkMIGOverlap: a MIG partition may sit beside partitions of its card
// whose memory slices it does not share, never beside the card held whole
// or shared.
func checkMIGOverlap(p prepared.Device, claim string, h Holding) error {
	switch {
	case p.MIG != nil && h.MIG != nil:
		mine := gpu.MIGPlacement{Start: p.MIG.Start, Size: p.MIG.Size}
		if !mine.Overlaps(*h.MIG) {
			return nil
		}
		return fmt.Errorf("refusing MIG partition %s (card %s, profile %s at memory slices %d..%d) to claim %s: claim %s holds a partition of the same card at slices %d..%d; %s",
			p.Device, p.GPUUUID, p.MIG.Profile, mine.Start, mine.Start+mine.Size-1, claim, h.Claim, h.MIG.Start, h.MIG.Start+h.MIG.Size-1, overlapAdvice)
	case p.MIG != nil:
		return fmt.Errorf("refusing MIG partition %s (card %s, profile %s at %d) to claim %s: claim %s holds the card itself; %s",
			p.Device, p.GPUUUID, p.MIG.Profile, p.MIG.Start, claim, h.Claim, overlapAdvice)
	default:
		return fmt.Errorf("refusing %s (%s) to claim %s: claim %s holds a MIG partition of it; %s",
			p.Device, p.GPUUUID, claim, h.Claim, overlapAdvice)
	}
}

// checkBackends refuses a share whose sharing backend differs from that of
// another claim's share of the same card. The webhook can only see one
// claim, and the card is chosen after admission, so only here can a mix
// across claims be seen: an mps share switches the card to
// EXCLUSIVE_PROCESS, where a process of a none share (not an MPS client)
// cannot create a context, and a none share beside MPS clients would run
// outside every MPS limit.
func checkBackends(claimUID, claim string, devices []prepared.Device, held []Holding) error {
	for _, dev := range devices {
		if !dev.Share || dev.AdminAccess {
			continue
		}
		for _, h := range held {
			if h.UUID != dev.GPUUUID || !h.Share || h.ClaimUID == claimUID || h.MPS == dev.UsesMPS() {
				continue
			}
			return fmt.Errorf("refusing a %s share of %s (%s) to claim %s: claim %s holds a %s share of the same card, and one card's shares must all use one sharing backend; "+
				"the backend is the node's (--share-backend) or its DeviceClasses': give them the same sharing.backend and select on the shareBackend attribute, or wait until claim %s is gone",
				backendName(dev.UsesMPS()), dev.Device, dev.GPUUUID, claim, h.Claim, backendName(h.MPS), h.Claim)
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

// usesMPS reports whether a share with this effective config is enforced
// with MPS: the default backend, unless the config says "none".
func usesMPS(cfg *configapi.GpuConfig) bool {
	if cfg == nil || cfg.Sharing == nil || cfg.Sharing.Backend == "" {
		return configapi.DefaultBackend == configapi.BackendMPS
	}
	return cfg.Sharing.Backend == configapi.BackendMPS
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
