package fakegpu

import (
	"context"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/tangram-gpu/tangram/pkg/gpu"
)

// TestMIGProfileFields: migType/migMode/migPendingMode are read from a card
// or from defaults:, the pending mode defaults to the current one, and the
// fake source reports the mode and, in either mode (as NVML does), the
// card type's profiles with their placements.
func TestMIGProfileFields(t *testing.T) {
	p, err := ParseProfile([]byte(`
defaults: {productName: NVIDIA H100 80GB HBM3, memory: 80Gi, migType: h100-80gb}
gpus:
- {index: 0, migMode: enabled}
- {index: 1, migMode: disabled, migPendingMode: enabled}
- {index: 2}
- {index: 3, migType: a100-40gb, migMode: enabled, memory: 40Gi, productName: NVIDIA A100-SXM4-40GB}
`))
	if err != nil {
		t.Fatal(err)
	}
	gpus, err := NewFakeSource("n", p).GPUs(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	type mode struct {
		enabled, pending bool
		profiles         int
	}
	want := []mode{{true, true, 7}, {false, true, 7}, {false, false, 7}, {true, true, 7}}
	for i, g := range gpus {
		if g.MIG == nil {
			t.Fatalf("card %d: no MIG, want a MIG-capable card", i)
		}
		if got := (mode{g.MIG.Enabled, g.MIG.PendingEnabled, len(g.MIG.Profiles)}); got != want[i] {
			t.Errorf("card %d: %+v, want %+v", i, got, want[i])
		}
	}
	// The 3g.20gb of the A100 40GB (the MIG user guide, "A100 MIG
	// Profiles": 4/8 of the memory, 3/7 of the SMs, 3 copy engines, 2
	// instances at memory slices 0 and 4; 19.50 GiB in the guide's
	// nvidia-smi mig -lgip, "Getting Started with MIG").
	var got *gpu.MIGProfile
	for i, q := range gpus[3].MIG.Profiles {
		if q.Name == "3g.20gb" {
			got = &gpus[3].MIG.Profiles[i]
		}
	}
	want3g := &gpu.MIGProfile{ID: 9, Name: "3g.20gb", ComputeSlices: 3, Instances: 2, Multiprocessors: 42, CopyEngines: 3,
		Decoders: 2, MemoryBytes: 19968 << 20, Placements: []gpu.MIGPlacement{{Start: 0, Size: 4}, {Start: 4, Size: 4}}}
	if diff := cmp.Diff(want3g, got); diff != "" {
		t.Errorf("3g.20gb (-want +got):\n%s", diff)
	}
	// A card without migType cannot do MIG.
	plain, err := ParseProfile([]byte("gpus:\n- {index: 0, productName: NVIDIA L4, memory: 24Gi}\n"))
	if err != nil {
		t.Fatal(err)
	}
	gpus, err = NewFakeSource("n", plain).GPUs(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if gpus[0].MIG != nil {
		t.Errorf("card without migType: MIG %+v, want nil", gpus[0].MIG)
	}
}
