package fakegpu

import (
	"context"
	"fmt"
	"regexp"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/tangram-gpu/tangram/pkg/gpu"
)

func TestBuiltinProfileNames(t *testing.T) {
	want := []string{"dgx-h100", "mig-h100", "pcie-a100-pairs", "pcie-l4"}
	if diff := cmp.Diff(want, BuiltinProfileNames()); diff != "" {
		t.Errorf("BuiltinProfileNames (-want +got):\n%s", diff)
	}
}

func TestBuiltinProfileUnknown(t *testing.T) {
	for _, name := range []string{"dgx-a100", "", "../profiles/dgx-h100", "dgx-h100.yaml"} {
		_, err := BuiltinProfile(name)
		want := fmt.Sprintf("unknown built-in GPU profile %q (valid: dgx-h100, mig-h100, pcie-a100-pairs, pcie-l4)", name)
		if err == nil || err.Error() != want {
			t.Errorf("BuiltinProfile(%q) error = %v, want %q", name, err, want)
		}
	}
}

// builtinCard is what every card of a built-in profile shares.
type builtinCard struct {
	product, arch, cc string
	memoryBytes       int64
}

func TestBuiltinProfileTopology(t *testing.T) {
	const gi = int64(1) << 30
	allBut := func(self int) []int {
		var peers []int
		for i := 0; i < 8; i++ {
			if i != self {
				peers = append(peers, i)
			}
		}
		return peers
	}
	tests := []struct {
		profile  string
		card     builtinCard
		busIDs   []string
		numa     []int
		nvlinks  [][]int
		wantSize int
	}{
		{
			profile: "dgx-h100",
			card:    builtinCard{"NVIDIA H100 80GB HBM3", "hopper", "9.0", 80 * gi},
			busIDs: []string{"0000:1b:00.0", "0000:43:00.0", "0000:52:00.0", "0000:61:00.0",
				"0000:9d:00.0", "0000:c3:00.0", "0000:d1:00.0", "0000:df:00.0"},
			numa:    []int{0, 0, 0, 0, 1, 1, 1, 1},
			nvlinks: [][]int{allBut(0), allBut(1), allBut(2), allBut(3), allBut(4), allBut(5), allBut(6), allBut(7)},
		},
		{
			profile: "pcie-l4",
			card:    builtinCard{"NVIDIA L4", "ada-lovelace", "8.9", 24 * gi},
			busIDs:  []string{"0000:01:00.0", "0000:21:00.0", "0000:81:00.0", "0000:a1:00.0"},
			numa:    []int{0, 0, 1, 1},
			nvlinks: [][]int{nil, nil, nil, nil},
		},
		{
			profile: "pcie-a100-pairs",
			card:    builtinCard{"NVIDIA A100-PCIE-40GB", "ampere", "8.0", 40 * gi},
			busIDs: []string{"0000:17:00.0", "0000:31:00.0", "0000:4b:00.0", "0000:65:00.0",
				"0000:98:00.0", "0000:b1:00.0", "0000:ca:00.0", "0000:e3:00.0"},
			numa:    []int{0, 0, 0, 0, 1, 1, 1, 1},
			nvlinks: [][]int{{1}, {0}, {3}, {2}, {5}, {4}, {7}, {6}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.profile, func(t *testing.T) {
			p, err := BuiltinProfile(tt.profile)
			if err != nil {
				t.Fatalf("BuiltinProfile: %v", err)
			}
			if p.Name != tt.profile {
				t.Errorf("Name = %q, want %q", p.Name, tt.profile)
			}
			gpus, err := NewFakeSource("node-1", p).GPUs(context.Background())
			if err != nil {
				t.Fatalf("GPUs: %v", err)
			}
			var want []gpu.GPU
			for i := range tt.busIDs {
				want = append(want, gpu.GPU{
					Index:                 i,
					Minor:                 i,
					UUID:                  FakeGPUUUID("node-1", i),
					ProductName:           tt.card.product,
					Brand:                 "Nvidia",
					Architecture:          tt.card.arch,
					CUDAComputeCapability: tt.card.cc,
					DriverVersion:         "580.95.05",
					CUDADriverVersion:     "13.0",
					MemoryBytes:           tt.card.memoryBytes,
					PCIBusID:              tt.busIDs[i],
					NUMANode:              intPtr(tt.numa[i]),
					NVLinkPeers:           tt.nvlinks[i],
				})
			}
			if diff := cmp.Diff(want, gpus); diff != "" {
				t.Errorf("GPUs (-want +got):\n%s", diff)
			}
		})
	}
}

var uuidForm = regexp.MustCompile(`^GPU-[0-9a-f]{8}-[0-9a-f]{4}-5[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)

func TestFakeGPUUUID(t *testing.T) {
	// A fixed value: fake UUIDs end up in checkpoints and CDI specs, so a
	// change here would orphan them after an upgrade.
	if got, want := FakeGPUUUID("node-a", 0), "GPU-6664495a-63e1-5695-868a-3a1717211e7f"; got != want {
		t.Errorf("FakeGPUUUID(node-a, 0) = %q, want %q (fake UUIDs must never change)", got, want)
	}
	seen := map[string]string{}
	for _, node := range []string{"node-a", "node-b", "node-a1", "node"} {
		for i := 0; i < 16; i++ {
			u := FakeGPUUUID(node, i)
			if !uuidForm.MatchString(u) {
				t.Errorf("FakeGPUUUID(%s, %d) = %q, not a GPU-<version 5 uuid>", node, i, u)
			}
			key := fmt.Sprintf("%s/%d", node, i)
			if other, dup := seen[u]; dup {
				t.Errorf("FakeGPUUUID(%s) = FakeGPUUUID(%s) = %s", key, other, u)
			}
			seen[u] = key
			if again := FakeGPUUUID(node, i); again != u {
				t.Errorf("FakeGPUUUID(%s) not stable: %s then %s", key, u, again)
			}
		}
	}
}

func TestFakeSourceCustomProfile(t *testing.T) {
	p := &Profile{Name: "custom", GPUs: []ProfileGPU{
		{Index: 2, Minor: intPtr(5), ProductName: "B", Memory: "1Gi", PCIBusID: "00000000:C3:00.0", NVLinks: []int{0}, FabricCliqueID: "c/1"},
		{Index: 0, ProductName: "A", Memory: "512Mi"},
	}}
	src := NewFakeSource("n", p)
	got, err := src.GPUs(context.Background())
	if err != nil {
		t.Fatalf("GPUs: %v", err)
	}
	want := []gpu.GPU{
		{Index: 0, Minor: 0, UUID: FakeGPUUUID("n", 0), ProductName: "A", MemoryBytes: 512 << 20, NVLinkPeers: []int{2}},
		{Index: 2, Minor: 5, UUID: FakeGPUUUID("n", 2), ProductName: "B", MemoryBytes: 1 << 30, PCIBusID: "0000:c3:00.0", NVLinkPeers: []int{0}, FabricCliqueID: "c/1"},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("GPUs (-want +got):\n%s", diff)
	}
	// The source copied the profile and hands out copies.
	if p.GPUs[1].NVLinks != nil {
		t.Errorf("NewFakeSource changed the caller's profile: %+v", p.GPUs[1])
	}
	p.GPUs[0].ProductName = "changed"
	got[0].NVLinkPeers[0] = 99
	again, _ := src.GPUs(context.Background())
	if diff := cmp.Diff(want, again); diff != "" {
		t.Errorf("GPUs after mutating inputs and outputs (-want +got):\n%s", diff)
	}
}

func TestFakeSourceErrors(t *testing.T) {
	good, err := BuiltinProfile("pcie-l4")
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		node    string
		profile *Profile
		want    string
	}{
		{name: "no node name", node: "", profile: good, want: "fake GPUs: the node name is empty; it is needed to derive the cards' UUIDs"},
		{name: "nil profile", node: "n", profile: nil, want: "fake GPUs: no profile given"},
		{
			name: "invalid profile", node: "n",
			profile: &Profile{Name: "x", GPUs: []ProfileGPU{{Index: 0, ProductName: "A", Memory: "lots"}}},
			want:    `fake GPUs: profile x: gpus[0].memory: "lots" is not a quantity (use e.g. 80Gi)`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			gpus, err := NewFakeSource(tt.node, tt.profile).GPUs(context.Background())
			if err == nil || err.Error() != tt.want {
				t.Errorf("GPUs() = %v, %v; want error %q", gpus, err, tt.want)
			}
		})
	}
}

func BenchmarkParseProfileDGXH100(b *testing.B) {
	data, err := builtinProfiles.ReadFile("profiles/dgx-h100.yaml")
	if err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if _, err := ParseProfile(data); err != nil {
			b.Fatal(err)
		}
	}
}
