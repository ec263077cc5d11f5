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
	MemorySlices    int
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
var migTables = map[string][]MIGProfileSpec{
	"a100-40gb": {
		{nvmlProfile1Slice, 19, "1g.5gb", 1, 1, 7, 14, 1, 0, 0, 0, []int{0, 1, 2, 3, 4, 5, 6}},
		{nvmlProfile2Slice, 14, "2g.10gb", 2, 2, 3, 28, 2, 1, 0, 0, []int{0, 2, 4}},
		{nvmlProfile3Slice, 9, "3g.20gb", 3, 4, 2, 42, 3, 2, 0, 0, []int{0, 4}},
		{nvmlProfile4Slice, 5, "4g.20gb", 4, 4, 1, 56, 4, 2, 0, 0, []int{0}},
		{nvmlProfile7Slice, 0, "7g.40gb", 7, 8, 1, 98, 7, 5, 1, 1, []int{0}},
		{nvmlProfile1SliceRev1, 20, "1g.5gb+me", 1, 1, 1, 14, 1, 1, 1, 1, []int{0, 1, 2, 3, 4, 5, 6}},
		{nvmlProfile1SliceRev2, 15, "1g.10gb", 1, 2, 4, 14, 1, 1, 0, 0, []int{0, 2, 4, 6}},
	},
	"a100-80gb": {
		{nvmlProfile1Slice, 19, "1g.10gb", 1, 1, 7, 14, 1, 0, 0, 0, []int{0, 1, 2, 3, 4, 5, 6}},
		{nvmlProfile2Slice, 14, "2g.20gb", 2, 2, 3, 28, 2, 1, 0, 0, []int{0, 2, 4}},
		{nvmlProfile3Slice, 9, "3g.40gb", 3, 4, 2, 42, 3, 2, 0, 0, []int{0, 4}},
		{nvmlProfile4Slice, 5, "4g.40gb", 4, 4, 1, 56, 4, 2, 0, 0, []int{0}},
		{nvmlProfile7Slice, 0, "7g.80gb", 7, 8, 1, 98, 7, 5, 1, 1, []int{0}},
		{nvmlProfile1SliceRev1, 20, "1g.10gb+me", 1, 1, 1, 14, 1, 1, 1, 1, []int{0, 1, 2, 3, 4, 5, 6}},
		{nvmlProfile1SliceRev2, 15, "1g.20gb", 1, 2, 4, 14, 1, 1, 0, 0, []int{0, 2, 4, 6}},
	},
	"h100-80gb": {
		{nvmlProfile1Slice, 19, "1g.10gb", 1, 1, 7, 16, 1, 1, 1, 0, []int{0, 1, 2, 3, 4, 5, 6}},
		{nvmlProfile2Slice, 14, "2g.20gb", 2, 2, 3, 32, 2, 2, 2, 0, []int{0, 2, 4}},
		{nvmlProfile3Slice, 9, "3g.40gb", 3, 4, 2, 60, 3, 3, 3, 0, []int{0, 4}},
		{nvmlProfile4Slice, 5, "4g.40gb", 4, 4, 1, 64, 4, 4, 4, 0, []int{0}},
		{nvmlProfile7Slice, 0, "7g.80gb", 7, 8, 1, 132, 8, 7, 7, 1, []int{0}},
		{nvmlProfile1SliceRev1, 20, "1g.10gb+me", 1, 1, 1, 16, 1, 1, 1, 1, []int{0, 1, 2, 3, 4, 5, 6}},
		{nvmlProfile1SliceRev2, 15, "1g.20gb", 1, 2, 4, 26, 1, 1, 1, 0, []int{0, 2, 4, 6}},
	},
	"h200-141gb": {
		{nvmlProfile1Slice, 19, "1g.18gb", 1, 1, 7, 16, 1, 1, 1, 0, []int{0, 1, 2, 3, 4, 5, 6}},
		{nvmlProfile2Slice, 14, "2g.35gb", 2, 2, 3, 32, 2, 2, 2, 0, []int{0, 2, 4}},
		{nvmlProfile3Slice, 9, "3g.71gb", 3, 4, 2, 60, 3, 3, 3, 0, []int{0, 4}},
		{nvmlProfile4Slice, 5, "4g.71gb", 4, 4, 1, 64, 4, 4, 4, 0, []int{0}},
		{nvmlProfile7Slice, 0, "7g.141gb", 7, 8, 1, 132, 8, 7, 7, 1, []int{0}},
		{nvmlProfile1SliceRev1, 20, "1g.18gb+me", 1, 1, 1, 16, 1, 1, 1, 1, []int{0, 1, 2, 3, 4, 5, 6}},
		{nvmlProfile1SliceRev2, 15, "1g.35gb", 1, 2, 4, 26, 1, 1, 1, 0, []int{0, 2, 4, 6}},
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

// MIGMemoryMiB is a profile's memory on a card of cardBytes: its memory
// slices' share of the card, in MiB. NVML reports a little less (memory the
// driver keeps); the guide gives no exact figure.
func MIGMemoryMiB(cardBytes int64, memorySlices int) int64 {
	return cardBytes / (1 << 20) * int64(memorySlices) / 8
}

// migInfo is what the fake source reports for a card of the profile.
func migInfo(g ProfileGPU, cardBytes int64) *gpu.MIG {
	if g.MIGType == "" {
		return nil
	}
	m := &gpu.MIG{Enabled: g.MIGMode == MIGModeEnabled, PendingEnabled: g.pendingMIG()}
	if !m.Enabled {
		return m
	}
	for _, p := range MIGTable(g.MIGType) {
		q := gpu.MIGProfile{
			ID: p.ID, Name: p.Name, ComputeSlices: p.ComputeSlices, Instances: p.Instances,
			Multiprocessors: p.Multiprocessors, CopyEngines: p.CopyEngines, Decoders: p.Decoders,
			JPEGs: p.JPEGs, OFAs: p.OFAs, MemoryBytes: MIGMemoryMiB(cardBytes, p.MemorySlices) << 20,
		}
		for _, s := range p.Starts {
			q.Placements = append(q.Placements, gpu.MIGPlacement{Start: s, Size: p.MemorySlices})
		}
		m.Profiles = append(m.Profiles, q)
	}
	return m
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
