package gpu

import (
	"context"
	"errors"
	"fmt"
)

// MIGInstance is one GPU instance of a card in MIG mode and the compute
// instance in it, as NVML lists them (nvmlGpuInstanceInfo_t,
// nvmlComputeInstanceInfo_t). Tangram creates one compute instance
// spanning the whole GPU instance, which is what a MIG device is.
type MIGInstance struct {
	// ProfileID is NVML's GPU instance profile ID (19 for 1g.10gb).
	ProfileID int
	// Placement is where the GPU instance sits, in memory slices.
	Placement MIGPlacement
	// GPUInstanceID is NVML's GPU instance ID on the card.
	GPUInstanceID int
	// ComputeInstanceID is the GPU instance's compute instance, -1 while
	// it has none (a create interrupted between its two steps). A GPU
	// instance with several compute instances (made by an admin) reports
	// the lowest.
	ComputeInstanceID int
	// UUID is the MIG device's UUID, "MIG-<uuid>"; empty without a
	// compute instance.
	UUID string
}

// String names the instance in messages.
func (m MIGInstance) String() string {
	return fmt.Sprintf("GPU instance %d (profile %d at memory slices %d..%d, compute instance %d)",
		m.GPUInstanceID, m.ProfileID, m.Placement.Start, m.Placement.Start+m.Placement.Size-1, m.ComputeInstanceID)
}

// MIGPartitions creates, lists and destroys the MIG instances of a node's
// cards: NVML on a real node (nvmlgpu.Partitions), a file on a node of
// fake cards (fakegpu.NewPartitions). Nothing here decides which instances
// may be touched: the plugin's records do (docs/prepare.md, "MIG").
type MIGPartitions interface {
	// Create creates a GPU instance of profileID at exactly the placement
	// starting at memory slice start on card, then one compute instance
	// spanning it, and returns both. If the compute instance cannot be
	// made the GPU instance is destroyed again. An error wraps
	// ErrMIGPlacementTaken when the placement (or part of it) is used,
	// ErrMIGOutOfResources when the card has no room for another instance
	// of the profile, ErrMIGNotEnabled when the card is not in MIG mode.
	Create(ctx context.Context, card GPU, profileID, start int) (MIGInstance, error)
	// CompleteComputeInstance creates the compute instance of a GPU
	// instance that has none (a create interrupted between its steps).
	CompleteComputeInstance(ctx context.Context, card GPU, gpuInstanceID int) (MIGInstance, error)
	// Destroy destroys every compute instance of GPU instance
	// gpuInstanceID on card, then the GPU instance. A GPU instance that
	// does not exist is not an error.
	Destroy(ctx context.Context, card GPU, gpuInstanceID int) error
	// List returns the card's GPU instances, sorted by placement.
	List(ctx context.Context, card GPU) ([]MIGInstance, error)
}

// Errors a MIGPartitions wraps, so that callers can say what to do.
var (
	ErrMIGPlacementTaken = errors.New("the placement is taken by another MIG instance")
	ErrMIGOutOfResources = errors.New("the card has no room for another instance of this MIG profile")
	ErrMIGNotEnabled     = errors.New("the card is not in MIG mode")
)

// Overlaps reports whether two placements share a memory slice. Pure.
func (p MIGPlacement) Overlaps(q MIGPlacement) bool {
	return p.Start < q.Start+q.Size && q.Start < p.Start+p.Size
}

// Profile returns the card's MIG profile with NVML profile ID id.
func (m *MIG) Profile(id int) (MIGProfile, bool) {
	if m == nil {
		return MIGProfile{}, false
	}
	for _, p := range m.Profiles {
		if p.ID == id {
			return p, true
		}
	}
	return MIGProfile{}, false
}

// PlacementAt returns the profile's placement starting at memory slice
// start.
func (p MIGProfile) PlacementAt(start int) (MIGPlacement, bool) {
	for _, pl := range p.Placements {
		if pl.Start == start {
			return pl, true
		}
	}
	return MIGPlacement{}, false
}
