package gpu

import "k8s.io/klog/v2"

// MIG is what a MIG-capable card reports of Multi-Instance GPU: its mode
// and the GPU instance profiles it offers with their placements, as NVML's
// profile and placement queries answer them
// (nvmlDeviceGetGpuInstanceProfileInfo, ...PossiblePlacements_v2). NVML
// answers those queries whatever the mode (an H200 on r580 did with MIG
// off, docs/gpu-reports/2026-11-27-h200-r580-experiments.md), so Profiles
// is filled in both modes; Tangram publishes the partitions only while
// Enabled. A card that cannot do MIG has a nil *MIG.
type MIG struct {
	// Enabled is the current MIG mode.
	Enabled bool
	// PendingEnabled is the mode the card takes at its next reset; it
	// differs from Enabled after an admin changed the mode without a reset.
	PendingEnabled bool
	// Profiles are the GPU instance profiles, in NVML's profile order, in
	// either mode.
	Profiles []MIGProfile
}

// MIGProfile is one GPU instance profile of a card ("3g.40gb").
type MIGProfile struct {
	// ID is NVML's profile ID (nvmlGpuInstanceProfileInfo_t.id), the one
	// nvmlDeviceCreateGpuInstanceWithPlacement takes.
	ID int
	// Name is the profile name without NVML's "MIG " prefix, e.g. "1g.10gb"
	// or "1g.10gb+me".
	Name string
	// ComputeSlices is NVML's sliceCount: sevenths of the card's compute.
	ComputeSlices int
	// Instances is how many instances of this profile fit on the card.
	Instances       int
	Multiprocessors int
	CopyEngines     int
	Decoders        int
	Encoders        int
	JPEGs           int
	OFAs            int
	// MemoryBytes is the instance's memory (NVML reports it in MiB).
	MemoryBytes int64
	// Placements are where an instance can start, in memory slices; two
	// placements of a card that share a slice cannot both exist.
	Placements []MIGPlacement
}

// MIGPlacement is a range of memory slices, NVML's
// nvmlGpuInstancePlacement_t.
type MIGPlacement struct {
	Start int
	Size  int
}

// Clone returns a deep copy, nil for nil.
func (m *MIG) Clone() *MIG {
	if m == nil {
		return nil
	}
	out := *m
	out.Profiles = nil
	for _, p := range m.Profiles {
		q := p
		q.Placements = append([]MIGPlacement(nil), p.Placements...)
		out.Profiles = append(out.Profiles, q)
	}
	return &out
}

// MIGPartitionsMessage is logged at start-up for each card in MIG mode.
const MIGPartitionsMessage = "MIG mode is on: the card is published as its MIG partitions (one device per profile and placement), not whole"

// MIGPendingMessage is logged at start-up for each card whose MIG mode
// changes at its next reset.
const MIGPendingMessage = "MIG mode change is pending: Tangram publishes the current mode; the new one takes effect when the card is reset, and Tangram reads it when the plugin restarts"

// LogMIG logs, once per card at start-up, the cards in MIG mode (published
// as partitions, docs/resourceslices.md "MIG partitions") and the cards
// whose MIG mode change waits for a reset. Cards without MIG log nothing.
func LogMIG(logger klog.Logger, gpus []GPU) {
	for _, g := range gpus {
		if g.MIG == nil {
			continue
		}
		l := klog.LoggerWithValues(logger, "index", g.Index, "uuid", g.UUID)
		if g.MIG.Enabled {
			names := make([]string, len(g.MIG.Profiles))
			for i, p := range g.MIG.Profiles {
				names[i] = p.Name
			}
			l.Info(MIGPartitionsMessage, "migProfiles", names)
		}
		if g.MIG.PendingEnabled != g.MIG.Enabled {
			l.Info(MIGPendingMessage, "migEnabled", g.MIG.Enabled, "migPendingEnabled", g.MIG.PendingEnabled)
		}
	}
}
