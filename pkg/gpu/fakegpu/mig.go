package fakegpu

import (
	"slices"
	"strings"

	"github.com/tangram-gpu/tangram/pkg/gpu"
)

// MIG modes a profile card may declare (migMode, migPendingMode).
const (
	MIGModeEnabled  = "enabled"
	MIGModeDisabled = "disabled"
)

// MIGProfileSpec is one GPU instance profile of a fake MIG-capable card, as
// NVIDIA's MIG user guide documents it: what the fake source reports and
// what the mock libnvidia-ml serves. This is the fake hardware, like a
// profile's memory: production code reads profiles through NVML.
type MIGProfileSpec struct {
	// NVMLProfile is the NVML_GPU_INSTANCE_PROFILE_* value the profile is
	// queried by (nvmlDeviceGetGpuInstanceProfileInfoV's profile).
	NVMLProfile int
	// ID is the profile ID NVML and nvidia-smi report (19 for 1g.10gb).
	ID   int
	Name string
	// ComputeSlices is sevenths of the card's compute (NVML's sliceCount).
	ComputeSlices int
	// MemorySlices is eighths of the card's memory (a placement's size).
	MemorySlices int
	// MemoryMiB is the profile's memory as NVML reports it
	// (memorySizeMB): not MemorySlices eighths of the card, a little less
	// (see migTables for where each figure comes from).
	MemoryMiB       int64
	Instances       int
	Multiprocessors int
	CopyEngines     int
	Decoders        int
	JPEGs           int
	OFAs            int
	// Starts are the placements' first memory slices.
	Starts []int
}

// NVML_GPU_INSTANCE_PROFILE_* (nvml.h).
const (
	nvmlProfile1Slice     = 0x0
	nvmlProfile2Slice     = 0x1
	nvmlProfile3Slice     = 0x2
	nvmlProfile4Slice     = 0x3
	nvmlProfile7Slice     = 0x4
	nvmlProfile1SliceRev1 = 0x7 // 1g with media extensions (+me)
	nvmlProfile1SliceRev2 = 0x9 // 1g with two memory slices
)

// migTables are the profiles of the MIG user guide's "Supported MIG
// Profiles" tables (https://docs.nvidia.com/datacenter/tesla/mig-user-guide/supported-mig-profiles.html,
// sections "A100 MIG Profiles", "H100 MIG Profiles", "H200 MIG Profiles"):
// fraction of memory (eighths) and of SMs (sevenths), NVDEC/JPEG/OFA, copy
// engines, instances; placements as nvidia-smi mig -lgipp prints them in
// the guide ("Getting Started with MIG"); SM counts as nvidia-smi mig -lgip
// prints them. NVML profile order (nvmlDeviceGetGpuInstanceProfileInfoV
// from 0 up).
//
// Memory (MemoryMiB), as NVML reports it, which is not an eighth of the
// card per memory slice:
//   - h200-141gb: exactly what NVML (r580.159.04) reported on an H200
//     (docs/gpu-reports/h200-580.159.04-nvml-mig.json);
//   - a100-40gb: the guide's own nvidia-smi mig -lgip example
//     (https://docs.nvidia.com/datacenter/tesla/mig-user-guide/getting-started-with-mig.html,
//     "List GPU Instance Profiles", an A100-SXM4-40GB: 4.75, 9.62, 19.50
//     and 39.25 GiB), in MiB (9.62 GiB is printed for 9856 MiB, 9.625 GiB:
//     the driver's sizes are whole multiples of 128 MiB);
//   - a100-80gb and h100-80gb: the guide prints no -lgip for these cards.
//     The figures are what nvidia-smi mig -lgip printed on real cards in
//     public reports (A100 80GB: 9.50, 19.50, 39.25, 79.00 GiB; H100 80GB
//     SXM: 9.75, 19.62, 39.50, 79.25 GiB), not NVIDIA's documentation:
//     unverified by us on hardware.
var migTables = map[string][]MIGProfileSpec{
	"a100-40gb": {
		{nvmlProfile1Slice, 19, "1g.5gb", 1, 1, 4864, 7, 14, 1, 0, 0, 0, []int{0, 1, 2, 3, 4, 5, 6}},
		{nvmlProfile2Slice, 14, "2g.10gb", 2, 2, 9856, 3, 28, 2, 1, 0, 0, []int{0, 2, 4}},
		{nvmlProfile3Slice, 9, "3g.20gb", 3, 4, 19968, 2, 42, 3, 2, 0, 0, []int{0, 4}},
		{nvmlProfile4Slice, 5, "4g.20gb", 4, 4, 19968, 1, 56, 4, 2, 0, 0, []int{0}},
		{nvmlProfile7Slice, 0, "7g.40gb", 7, 8, 40192, 1, 98, 7, 5, 1, 1, []int{0}},
		{nvmlProfile1SliceRev1, 20, "1g.5gb+me", 1, 1, 4864, 1, 14, 1, 1, 1, 1, []int{0, 1, 2, 3, 4, 5, 6}},
		{nvmlProfile1SliceRev2, 15, "1g.10gb", 1, 2, 9856, 4, 14, 1, 1, 0, 0, []int{0, 2, 4, 6}},
	},
	"a100-80gb": {
		{nvmlProfile1Slice, 19, "1g.10gb", 1, 1, 9728, 7, 14, 1, 0, 0, 0, []int{0, 1, 2, 3, 4, 5, 6}},
		{nvmlProfile2Slice, 14, "2g.20gb", 2, 2, 19968, 3, 28, 2, 1, 0, 0, []int{0, 2, 4}},
		{nvmlProfile3Slice, 9, "3g.40gb", 3, 4, 40192, 2, 42, 3, 2, 0, 0, []int{0, 4}},
		{nvmlProfile4Slice, 5, "4g.40gb", 4, 4, 40192, 1, 56, 4, 2, 0, 0, []int{0}},
		{nvmlProfile7Slice, 0, "7g.80gb", 7, 8, 80896, 1, 98, 7, 5, 1, 1, []int{0}},
		{nvmlProfile1SliceRev1, 20, "1g.10gb+me", 1, 1, 9728, 1, 14, 1, 1, 1, 1, []int{0, 1, 2, 3, 4, 5, 6}},
		{nvmlProfile1SliceRev2, 15, "1g.20gb", 1, 2, 19968, 4, 14, 1, 1, 0, 0, []int{0, 2, 4, 6}},
	},
	"h100-80gb": {
		{nvmlProfile1Slice, 19, "1g.10gb", 1, 1, 9984, 7, 16, 1, 1, 1, 0, []int{0, 1, 2, 3, 4, 5, 6}},
		{nvmlProfile2Slice, 14, "2g.20gb", 2, 2, 20096, 3, 32, 2, 2, 2, 0, []int{0, 2, 4}},
		{nvmlProfile3Slice, 9, "3g.40gb", 3, 4, 40448, 2, 60, 3, 3, 3, 0, []int{0, 4}},
		{nvmlProfile4Slice, 5, "4g.40gb", 4, 4, 40448, 1, 64, 4, 4, 4, 0, []int{0}},
		{nvmlProfile7Slice, 0, "7g.80gb", 7, 8, 81152, 1, 132, 8, 7, 7, 1, []int{0}},
		{nvmlProfile1SliceRev1, 20, "1g.10gb+me", 1, 1, 9984, 1, 16, 1, 1, 1, 1, []int{0, 1, 2, 3, 4, 5, 6}},
		{nvmlProfile1SliceRev2, 15, "1g.20gb", 1, 2, 20096, 4, 26, 1, 1, 1, 0, []int{0, 2, 4, 6}},
	},
	"h200-141gb": {
		{nvmlProfile1Slice, 19, "1g.18gb", 1, 1, 16384, 7, 16, 1, 1, 1, 0, []int{0, 1, 2, 3, 4, 5, 6}},
		{nvmlProfile2Slice, 14, "2g.35gb", 2, 2, 33280, 3, 32, 2, 2, 2, 0, []int{0, 2, 4}},
		{nvmlProfile3Slice, 9, "3g.71gb", 3, 4, 71424, 2, 60, 3, 3, 3, 0, []int{0, 4}},
		{nvmlProfile4Slice, 5, "4g.71gb", 4, 4, 71424, 1, 64, 4, 4, 4, 0, []int{0}},
		{nvmlProfile7Slice, 0, "7g.141gb", 7, 8, 143360, 1, 132, 8, 7, 7, 1, []int{0}},
		{nvmlProfile1SliceRev1, 20, "1g.18gb+me", 1, 1, 16384, 1, 16, 1, 1, 1, 1, []int{0, 1, 2, 3, 4, 5, 6}},
		{nvmlProfile1SliceRev2, 15, "1g.35gb", 1, 2, 33280, 4, 26, 1, 1, 1, 0, []int{0, 2, 4, 6}},
	},
}

// migCardGiB is each MIG card type's memory, about.
var migCardGiB = map[string]int64{"a100-40gb": 40, "a100-80gb": 80, "h100-80gb": 80, "h200-141gb": 141}

// MIGTypes lists the MIG card types a profile's migType may name, sorted.
func MIGTypes() []string {
	var out []string
	for k := range migTables {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// MIGTable returns the profiles of a MIG card type, nil for an unknown one.
func MIGTable(migType string) []MIGProfileSpec {
	t, ok := migTables[migType]
	if !ok {
		return nil
	}
	out := make([]MIGProfileSpec, len(t))
	for i, p := range t {
		out[i] = p
		out[i].Starts = slices.Clone(p.Starts)
	}
	return out
}

// migInfo is what the fake source reports for a card of the profile: the
// mode and, in either mode (NVML answers the profile and placement
// queries with MIG off too), the card type's profiles.
func migInfo(g ProfileGPU) *gpu.MIG {
	if g.MIGType == "" {
		return nil
	}
	return &gpu.MIG{Enabled: g.MIGMode == MIGModeEnabled, PendingEnabled: g.pendingMIG(), Profiles: MIGProfiles(g.MIGType)}
}

// MIGProfiles are a MIG card type's profiles as NVML reports them (what the
// fake source serves and what gpu-check compares a real card with); nil for
// an unknown type.
func MIGProfiles(migType string) []gpu.MIGProfile {
	var out []gpu.MIGProfile
	for _, p := range MIGTable(migType) {
		q := gpu.MIGProfile{
			ID: p.ID, Name: p.Name, ComputeSlices: p.ComputeSlices, Instances: p.Instances,
			Multiprocessors: p.Multiprocessors, CopyEngines: p.CopyEngines, Decoders: p.Decoders,
			JPEGs: p.JPEGs, OFAs: p.OFAs, MemoryBytes: p.MemoryMiB << 20,
		}
		for _, s := range p.Starts {
			q.Placements = append(q.Placements, gpu.MIGPlacement{Start: s, Size: p.MemorySlices})
		}
		out = append(out, q)
	}
	return out
}

// pendingMIG is the pending mode: migPendingMode, else migMode.
func (g ProfileGPU) pendingMIG() bool {
	if g.MIGPendingMode != "" {
		return g.MIGPendingMode == MIGModeEnabled
	}
	return g.MIGMode == MIGModeEnabled
}

func validMIGMode(s string) bool { return s == "" || s == MIGModeEnabled || s == MIGModeDisabled }

func migTypeList() string { return strings.Join(MIGTypes(), ", ") }
