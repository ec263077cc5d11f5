//go:build cgo

package nvmlgpu

import (
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/google/go-cmp/cmp"

	"github.com/tangram-gpu/tangram/pkg/gpu"
)

// h100MIG is an H100 80GB in MIG mode with two of its profiles (numbers as
// NVML's fields carry them; the memory sizes are illustrative).
func h100MIG() *mockMIG {
	return &mockMIG{
		current: nvml.DEVICE_MIG_ENABLE, pending: nvml.DEVICE_MIG_ENABLE,
		profiles: map[int]nvml.GpuInstanceProfileInfo{
			nvml.GPU_INSTANCE_PROFILE_1_SLICE: {Id: 19, SliceCount: 1, InstanceCount: 7, MultiprocessorCount: 16,
				CopyEngineCount: 1, DecoderCount: 1, JpegCount: 1, MemorySizeMB: 9856},
			nvml.GPU_INSTANCE_PROFILE_3_SLICE: {Id: 9, SliceCount: 3, InstanceCount: 2, MultiprocessorCount: 60,
				CopyEngineCount: 3, DecoderCount: 3, JpegCount: 3, MemorySizeMB: 40192},
			nvml.GPU_INSTANCE_PROFILE_1_SLICE_REV1: {Id: 20, SliceCount: 1, InstanceCount: 1, MultiprocessorCount: 16,
				CopyEngineCount: 1, DecoderCount: 1, JpegCount: 1, OfaCount: 1, MemorySizeMB: 9856},
		},
		placements: map[uint32][]nvml.GpuInstancePlacement{
			19: {{Start: 0, Size: 1}, {Start: 1, Size: 1}, {Start: 2, Size: 1}, {Start: 3, Size: 1}, {Start: 4, Size: 1}, {Start: 5, Size: 1}, {Start: 6, Size: 1}},
			9:  {{Start: 0, Size: 4}, {Start: 4, Size: 4}},
			20: {{Start: 0, Size: 1}},
		},
	}
}

func TestSourceReadsMIG(t *testing.T) {
	profile1g := gpu.MIGProfile{ID: 19, Name: "1g.10gb", ComputeSlices: 1, Instances: 7, Multiprocessors: 16,
		CopyEngines: 1, Decoders: 1, JPEGs: 1, MemoryBytes: 9856 << 20,
		Placements: []gpu.MIGPlacement{{Start: 0, Size: 1}, {Start: 1, Size: 1}, {Start: 2, Size: 1}, {Start: 3, Size: 1}, {Start: 4, Size: 1}, {Start: 5, Size: 1}, {Start: 6, Size: 1}}}
	profile3g := gpu.MIGProfile{ID: 9, Name: "3g.40gb", ComputeSlices: 3, Instances: 2, Multiprocessors: 60,
		CopyEngines: 3, Decoders: 3, JPEGs: 3, MemoryBytes: 40192 << 20, Placements: []gpu.MIGPlacement{{Start: 0, Size: 4}, {Start: 4, Size: 4}}}
	profileMe := gpu.MIGProfile{ID: 20, Name: "1g.10gb+me", ComputeSlices: 1, Instances: 1, Multiprocessors: 16,
		CopyEngines: 1, Decoders: 1, JPEGs: 1, OFAs: 1, MemoryBytes: 9856 << 20, Placements: []gpu.MIGPlacement{{Start: 0, Size: 1}}}
	tests := []struct {
		name     string
		mig      func() *mockMIG
		want     *gpu.MIG
		wantLogs [][]string
	}{
		{name: "no MIG", mig: func() *mockMIG { return nil }, want: nil},
		{
			name: "mode unreadable: left out, logged",
			mig:  func() *mockMIG { return &mockMIG{modeRet: nvml.ERROR_UNKNOWN} },
			want: nil, wantLogs: [][]string{{"Leaving out a value the GPU cannot report", "migMode"}},
		},
		{
			name: "off, pending on: profiles read all the same (NVML answers them in either mode)",
			mig: func() *mockMIG {
				m := h100MIG()
				m.current = nvml.DEVICE_MIG_DISABLE
				return m
			},
			want: &gpu.MIG{Enabled: false, PendingEnabled: true, Profiles: []gpu.MIGProfile{profile1g, profile3g, profileMe}},
		},
		{
			name: "on: every profile in NVML's order, with its placements",
			mig:  h100MIG,
			want: &gpu.MIG{Enabled: true, PendingEnabled: true, Profiles: []gpu.MIGProfile{profile1g, profile3g, profileMe}},
		},
		{
			name: "a profile or its placements unreadable: that profile left out, logged",
			mig: func() *mockMIG {
				m := h100MIG()
				m.profileRet = map[int]nvml.Return{nvml.GPU_INSTANCE_PROFILE_3_SLICE: nvml.ERROR_UNKNOWN}
				m.placementRet = map[uint32]nvml.Return{20: nvml.ERROR_NO_PERMISSION}
				return m
			},
			want: &gpu.MIG{Enabled: true, PendingEnabled: true, Profiles: []gpu.MIGProfile{profile1g}},
			wantLogs: [][]string{
				{"Leaving out a MIG profile NVML cannot report", `"profile"=2`},
				{"Leaving out a MIG profile whose placements NVML cannot report", "1g.10gb+me"},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newDGXH100()
			s.cards = s.cards[:1]
			s.cards[0].mig = tt.mig()
			ctx, logs := logContext()
			gpus, err := New(s.server()).GPUs(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if len(gpus) != 1 {
				t.Fatalf("%d cards, want the card listed whatever its MIG state", len(gpus))
			}
			if diff := cmp.Diff(tt.want, gpus[0].MIG); diff != "" {
				t.Errorf("MIG (-want +got):\n%s", diff)
			}
			if m := logs.missing(tt.wantLogs); len(m) > 0 {
				t.Errorf("missing log lines %v; got %v", m, logs.lines)
			}
		})
	}
}

// TestMIGProfileName: names as NVIDIA's go-nvlib derives them give the
// MIG user guide's names from NVML's numbers, on the cards' real memory
// sizes (H100 81559 MiB, H200 143771 MiB, A100 40960 MiB).
func TestMIGProfileName(t *testing.T) {
	for _, tt := range []struct {
		profile  int
		memMiB   uint64
		cardMiB  int64
		want     string
		wantFail bool
	}{
		{nvml.GPU_INSTANCE_PROFILE_1_SLICE, 9856, 81559, "1g.10gb", false},
		{nvml.GPU_INSTANCE_PROFILE_1_SLICE_REV2, 19968, 81559, "1g.20gb", false},
		{nvml.GPU_INSTANCE_PROFILE_1_SLICE_REV1, 9856, 81559, "1g.10gb+me", false},
		{nvml.GPU_INSTANCE_PROFILE_7_SLICE, 80384, 81559, "7g.80gb", false},
		{nvml.GPU_INSTANCE_PROFILE_2_SLICE, 35456, 143771, "2g.35gb", false},
		{nvml.GPU_INSTANCE_PROFILE_3_SLICE, 71424, 143771, "3g.71gb", false},
		{nvml.GPU_INSTANCE_PROFILE_1_SLICE, 4864, 40960, "1g.5gb", false},
		{nvml.GPU_INSTANCE_PROFILE_COUNT, 4864, 40960, "", true},
		{nvml.GPU_INSTANCE_PROFILE_1_SLICE, 0, 40960, "", true},
	} {
		got, err := migProfileName(tt.profile, nvml.GpuInstanceProfileInfo{MemorySizeMB: tt.memMiB}, tt.cardMiB<<20)
		if (err != nil) != tt.wantFail || got != tt.want {
			t.Errorf("profile %d, %d of %d MiB: %q %v, want %q (failure %v)", tt.profile, tt.memMiB, tt.cardMiB, got, err, tt.want, tt.wantFail)
		}
	}
}
