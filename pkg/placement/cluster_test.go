package placement

import (
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/tangram-gpu/tangram/pkg/device"
	"github.com/tangram-gpu/tangram/pkg/dra"
	"github.com/tangram-gpu/tangram/pkg/gpu"
	"github.com/tangram-gpu/tangram/pkg/resourceslices"
)

func TestNodeFromCluster(t *testing.T) {
	spec := testNodeSpec{name: "a", cpuMilli: 32000, memMiB: 65536, model: "T4", cards: 3}
	nodeName := spec.name
	slice := &resourceapi.ResourceSlice{Spec: resourceapi.ResourceSliceSpec{
		Driver: "gpu.tangram.dev", NodeName: &nodeName, Devices: testDevices(t, spec),
		Pool: resourceapi.ResourcePool{Name: spec.name, ResourceSliceCount: 1},
	}}
	slice.Name = "a-gpu"
	harness := &dra.Node{Name: spec.name, Slices: []*resourceapi.ResourceSlice{slice}, Classes: device.DeviceClasses()}
	var claims []*resourceapi.ResourceClaim
	for _, c := range []*resourceapi.ResourceClaim{
		dra.Claim("whole", nil, dra.WholeGPUs("gpu", 1)),
		dra.Claim("half", nil, dra.SharedGPU("gpu", resource.MustParse("8Gi"), resource.MustParse("50"))),
		dra.Claim("quarter", nil, dra.SharedGPU("gpu", resource.MustParse("4Gi"), resource.MustParse("25"))),
	} {
		allocated, err := harness.Allocate(t.Context(), c)
		if err != nil {
			t.Fatalf("allocating %s: %v", c.Name, err)
		}
		claims = append(claims, allocated)
	}
	n, err := NodeFromCluster("a", 32000, 65536, 4000, 8192, []*resourceapi.ResourceSlice{slice}, claims)
	if err != nil {
		t.Fatal(err)
	}
	// First fit: the whole card is gpu-0, both shares land on gpu-1.
	for i, want := range []int64{0, 250, 1000} {
		if got := n.Cards[i].FreeMilli(); got != want {
			t.Errorf("gpu-%d free = %d milli, want %d", i, got, want)
		}
	}
	if n.FreeCPUMilli() != 28000 || n.FreeMemoryMiB() != 57344 {
		t.Errorf("free cpu/memory = %d/%d, want 28000/57344", n.FreeCPUMilli(), n.FreeMemoryMiB())
	}
	if got := n.AllocatedMilli(); got != 1750 {
		t.Errorf("allocated = %d milli, want 1750", got)
	}

	// Kept NodeCards give the same model, and models built from them never
	// share state: consumption applied to one does not show in the next.
	cards, err := CardsFromSlices("a", []*resourceapi.ResourceSlice{slice})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name     string
		claims   []*resourceapi.ResourceClaim
		wantFree []int64
	}{
		{name: "all claims", claims: claims, wantFree: []int64{0, 250, 1000}},
		{name: "no claim", wantFree: []int64{1000, 1000, 1000}},
		{name: "only the whole card", claims: claims[:1], wantFree: []int64{0, 1000, 1000}},
		{name: "all claims again", claims: claims, wantFree: []int64{0, 250, 1000}},
	} {
		m, err := cards.Node(32000, 65536, 4000, 8192, AllocationsOf(tc.claims))
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		for i, want := range tc.wantFree {
			if got := m.Cards[i].FreeMilli(); got != want {
				t.Errorf("%s: gpu-%d free = %d milli, want %d", tc.name, i, got, want)
			}
		}
	}

	sample := WorkloadSample(AllocationsOf(claims), map[string]*Node{"a": n})
	if len(sample) != 3 || sample[0].WholeCards != 1 || sample[1].ShareMilli != 500 || sample[2].ShareMilli != 250 {
		t.Errorf("workload sample = %+v, want a whole card, a 500 and a 250 share", sample)
	}

	// The pending claim of the next pod becomes a request.
	pending := dra.Claim("next", nil, dra.SharedGPU("gpu", resource.MustParse("4Gi"), resource.MustParse("20")))
	r, ok := RequestFromClaims("next", 1000, 1024, append(claims, pending), testCardMemory)
	if !ok || r.ShareMilli != 200 || r.WholeCards != 0 {
		t.Errorf("request = %+v (ok=%v), want a 200-milli share", r, ok)
	}
	memOnly := dra.Claim("mem", nil, resourceapi.DeviceRequest{Name: "gpu", Exactly: &resourceapi.ExactDeviceRequest{
		DeviceClassName: "shared-gpu.tangram.dev", AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: 1,
		Capacity: &resourceapi.CapacityRequirements{Requests: map[resourceapi.QualifiedName]resource.Quantity{"memory": resource.MustParse("4Gi")}},
	}})
	if r, ok := RequestFromClaims("mem", 0, 0, []*resourceapi.ResourceClaim{memOnly}, testCardMemory); !ok || r.ShareMilli != 250 {
		t.Errorf("memory-only share = %+v, want 250 milli (4Gi of 16Gi)", r)
	}
	if r, ok := RequestFromClaims("two", 0, 0, []*resourceapi.ResourceClaim{dra.Claim("two", nil, dra.WholeGPUs("gpu", 2))}, 0); !ok || r.WholeCards != 2 {
		t.Errorf("whole cards = %+v, want 2", r)
	}
	if _, ok := RequestFromClaims("none", 0, 0, claims, testCardMemory); ok {
		t.Error("only allocated claims: want no GPU request")
	}
}

// TestMIGCardInTheModel: on a node whose card 0 is in MIG mode
// (published as its partitions), the model holds card 0 as one card in MIG
// mode with the allocated partition taken, never a candidate for whole
// cards or shares, and card 1 as before.
func TestMIGCardInTheModel(t *testing.T) {
	gpus := []gpu.GPU{
		{Index: 0, UUID: "GPU-0", ProductName: "NVIDIA H100 80GB HBM3", MemoryBytes: 80 << 30,
			MIG: &gpu.MIG{Enabled: true, Profiles: []gpu.MIGProfile{{ID: 19, Name: "1g.10gb", ComputeSlices: 1, Instances: 7, MemoryBytes: 9984 << 20,
				Placements: []gpu.MIGPlacement{{Start: 0, Size: 1}, {Start: 1, Size: 1}}}, {ID: 0, Name: "7g.80gb", ComputeSlices: 7, Instances: 1,
				MemoryBytes: 81152 << 20, Placements: []gpu.MIGPlacement{{Start: 0, Size: 8}}}}}},
		{Index: 1, UUID: "GPU-1", ProductName: "NVIDIA H100 80GB HBM3", MemoryBytes: 80 << 30},
	}
	res, err := resourceslices.DriverResources(gpus, resourceslices.Options{NodeName: "a", Sharing: true})
	if err != nil {
		t.Fatal(err)
	}
	slices := resourceslices.ResourceSlices("a", res)
	harness := &dra.Node{Name: "a", Slices: slices, Classes: device.DeviceClasses()}
	mig, err := harness.Allocate(t.Context(), dra.Claim("mig", nil, dra.MIGPartition("p", "1g.10gb")))
	if err != nil {
		t.Fatal(err)
	}
	n, err := NodeFromCluster("a", 32000, 65536, 0, 0, slices, []*resourceapi.ResourceClaim{mig})
	if err != nil {
		t.Fatal(err)
	}
	if len(n.Cards) != 2 || !n.Cards[0].IsMIG() || n.Cards[0].Device != "gpu-0" || n.Cards[1].IsMIG() || n.Cards[1].FreeMilli() != 1000 {
		t.Fatalf("cards %+v, want gpu-0 in MIG mode and gpu-1 free", n.Cards)
	}
	if got := n.Cards[0].FreeMilli(); got != 857 {
		t.Errorf("gpu-0 free %d milli, want 6/7 of it (857) after a 1g", got)
	}
	for _, tc := range []struct {
		r    Request
		want []int
	}{
		{whole("w", 1000, 1), []int{1}},
		{share("s", 1000, 500), []int{1}},
		{Request{Name: "m", MIGProfile: "1g.10gb"}, []int{0}},
		{Request{Name: "m7", MIGProfile: "7g.80gb"}, nil},
	} {
		got, _ := n.Candidates(tc.r, nil)
		if len(got) != len(tc.want) || (len(got) > 0 && got[0] != tc.want[0]) {
			t.Errorf("%s: candidates %v, want %v", tc.r.Name, got, tc.want)
		}
	}
}
