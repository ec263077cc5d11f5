//go:build cgo

package nvmlgpu

import (
	"context"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"

	mocknvml "github.com/tangram-gpu/tangram/hack/mock-nvml"
	"github.com/tangram-gpu/tangram/pkg/device"
	"github.com/tangram-gpu/tangram/pkg/gpu"
	"github.com/tangram-gpu/tangram/pkg/gpu/fakegpu"
	"github.com/tangram-gpu/tangram/pkg/resourceslices"
)

var (
	mockLibraryOnce sync.Once
	mockLibrary     string
	mockLibraryErr  error
)

// mockLibraryPath builds the C mock libnvidia-ml.so.1 once per test binary
// (cached across runs by its build script).
func mockLibraryPath(t *testing.T) string {
	t.Helper()
	mockLibraryOnce.Do(func() { mockLibrary, mockLibraryErr = mocknvml.Build("") })
	if mockLibraryErr != nil {
		t.Fatal(mockLibraryErr)
	}
	return mockLibrary
}

// fabricProfile has what the built-in profiles lack: fabric cliques, a card
// without NUMA node, a card whose minor differs from its index, no NVLink.
const fabricProfile = `
name: fabric
defaults: {productName: NVIDIA GB200, memory: 186Gi, architecture: blackwell, cudaComputeCapability: "10.0"}
gpus:
- {index: 0, pciBusID: "0008:01:00.0", numaNode: 0, fabricCliqueID: "11111111-2222-3333-4444-555555555555/7"}
- {index: 1, minor: 4, pciBusID: "0009:01:00.0", fabricCliqueID: "11111111-2222-3333-4444-555555555555/7"}
`

// migProfile has a card of each MIG card type the mock models, in MIG
// mode or not, one with a mode change waiting for a reset, and a card that
// cannot do MIG.
const migProfile = `
name: mig
defaults: {architecture: ampere, cudaComputeCapability: "8.0"}
gpus:
- {index: 0, productName: NVIDIA A100-SXM4-40GB, memory: 40Gi, pciBusID: "0000:07:00.0", migType: a100-40gb, migMode: enabled}
- {index: 1, productName: NVIDIA A100-SXM4-80GB, memory: 80Gi, pciBusID: "0000:0f:00.0", migType: a100-80gb, migMode: disabled, migPendingMode: enabled}
- {index: 2, productName: NVIDIA H100 80GB HBM3, memory: 80Gi, pciBusID: "0000:47:00.0", migType: h100-80gb, migMode: enabled, architecture: hopper, cudaComputeCapability: "9.0"}
- {index: 3, productName: NVIDIA H200, memory: 141Gi, pciBusID: "0000:4e:00.0", migType: h200-141gb, migMode: enabled, migPendingMode: disabled, architecture: hopper, cudaComputeCapability: "9.0"}
- {index: 4, productName: NVIDIA L4, memory: 24Gi, pciBusID: "0000:87:00.0", architecture: ada-lovelace, cudaComputeCapability: "8.9"}
`

// TestSourceOverMockLibraryMatchesFakeProfile reads each profile through
// the real path (go-nvml loading the C mock, then this package's Source)
// and through the fake source, and wants the same cards and the same
// ResourceSlice devices: attributes, capacities, NVLink domains, NUMA, MIG
// modes and MIG profiles (names derived from NVML's numbers, placements).
func TestSourceOverMockLibraryMatchesFakeProfile(t *testing.T) {
	const node = "gpu-node-1"
	fabric, err := fakegpu.ParseProfile([]byte(fabricProfile))
	if err != nil {
		t.Fatal(err)
	}
	mig, err := fakegpu.ParseProfile([]byte(migProfile))
	if err != nil {
		t.Fatal(err)
	}
	profiles := map[string]*fakegpu.Profile{"fabric": fabric, "mig": mig}
	for _, name := range []string{"dgx-h100", "pcie-a100-pairs", "pcie-l4"} {
		p, err := fakegpu.BuiltinProfile(name)
		if err != nil {
			t.Fatal(err)
		}
		profiles[name] = p
	}
	lib := mockLibraryPath(t)
	for name, p := range profiles {
		t.Run(name, func(t *testing.T) {
			mocknvml.UseProfile(t, p, node)

			ctx := context.Background()
			src, done, err := Open(ctx, lib)
			if err != nil {
				t.Fatal(err)
			}
			defer done()
			got, err := src.GPUs(ctx)
			if err != nil {
				t.Fatal(err)
			}
			want, err := fakegpu.NewFakeSource(node, p).GPUs(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Fatalf("cards through NVML differ from the fake profile (-fake +nvml):\n%s", diff)
			}
			for _, sharing := range []bool{false, true} {
				opts := resourceslices.Options{NodeName: node, Sharing: sharing}
				gotRes, err := resourceslices.DriverResources(got, opts)
				if err != nil {
					t.Fatal(err)
				}
				wantRes, err := resourceslices.DriverResources(want, opts)
				if err != nil {
					t.Fatal(err)
				}
				if diff := cmp.Diff(wantRes, gotRes); diff != "" {
					t.Errorf("sharing=%v: ResourceSlices differ (-fake +nvml):\n%s", sharing, diff)
				}
			}
		})
	}
}

// TestReservedMemoryOverMockLibrary follows the memory the driver keeps
// from NVML to the ResourceSlice: the C mock serves a reserved amount
// (nvmlDeviceGetMemoryInfo_v2), the source records it beside the total,
// and the published memory capacity is the total less it, with the share
// policy's default and maximum rounded down to the step (80Gi less 462Mi is
// 81458Mi, 81408Mi in 256Mi steps). A card without reserved memory is
// published as before.
func TestReservedMemoryOverMockLibrary(t *testing.T) {
	const node, reserved = "gpu-node-1", 462 << 20
	p, err := fakegpu.BuiltinProfile("dgx-h100")
	if err != nil {
		t.Fatal(err)
	}
	devices, err := mocknvml.Flatten(p, node)
	if err != nil {
		t.Fatal(err)
	}
	if devices, err = mocknvml.WithReservedMemory(devices, map[int]int64{2: reserved}); err != nil {
		t.Fatal(err)
	}
	mocknvml.UseDevices(t, devices)
	ctx := context.Background()
	src, done, err := Open(ctx, mockLibraryPath(t))
	if err != nil {
		t.Fatal(err)
	}
	defer done()
	gpus, err := src.GPUs(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if g := gpus[2]; g.MemoryBytes != 80<<30 || g.ReservedMemoryBytes != reserved {
		t.Fatalf("card 2: memory %d reserved %d, want %d and %d", g.MemoryBytes, g.ReservedMemoryBytes, int64(80<<30), int64(reserved))
	}
	devs, err := resourceslices.Devices(gpus, resourceslices.Options{NodeName: node, Sharing: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		index               int
		capacity, allocated int64
	}{{2, 80<<30 - reserved, 81408 << 20}, {3, 80 << 30, 80 << 30}} {
		d := devs[tt.index]
		m := d.Capacity[device.CapacityMemory]
		if m.Value.Value() != tt.capacity || m.RequestPolicy.Default.Value() != tt.allocated || device.AllocatableMemory(&d) != tt.allocated {
			t.Errorf("%s: memory capacity %s, default %s, allocatable %d; want %d, %d, %d", d.Name, &m.Value, m.RequestPolicy.Default,
				device.AllocatableMemory(&d), tt.capacity, tt.allocated, tt.allocated)
		}
		if !device.HoldsWholeCard(true, m.RequestPolicy.Default.Value(), device.AllocatableMemory(&d)) {
			t.Errorf("%s: a claim naming no memory does not hold the whole card", d.Name)
		}
	}
}

// TestGPUProcessesOverMockLibrary lists processes through the real path:
// go-nvml loading the C mock, which serves what the test "runs".
func TestGPUProcessesOverMockLibrary(t *testing.T) {
	const node = "gpu-node-1"
	p, err := fakegpu.BuiltinProfile("dgx-h100")
	if err != nil {
		t.Fatal(err)
	}
	state := mocknvml.UseProfile(t, p, node)
	card0, card2 := fakegpu.FakeGPUUUID(node, 0), fakegpu.FakeGPUUUID(node, 2)
	if err := state.RunProcesses([]mocknvml.Process{
		{Card: card0, PID: 100, UsedBytes: 2 << 30, GPUInstance: -1},
		{Card: card2, PID: 300, UsedBytes: -1, GPUInstance: -1},
		{Card: card2, PID: 300, UsedBytes: 3 << 30, GPUInstance: -1, MPSClient: true},
	}); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	src, done, err := Open(ctx, mockLibraryPath(t))
	if err != nil {
		t.Fatal(err)
	}
	defer done()
	got, err := src.(gpu.ProcessLister).GPUProcesses(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// No samples written: the mock says NOT_SUPPORTED, SM not known.
	want := []gpu.Process{
		{Card: card0, GPUInstance: gpu.NoGPUInstance, PID: 100, UsedBytes: 2 << 30},
		{Card: card2, GPUInstance: gpu.NoGPUInstance, PID: 300, UsedBytes: 3 << 30, MPSClient: true},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("processes through NVML (-want +got):\n%s", diff)
	}

	// PID 300 keeps 40% of card 2's SMs busy; PID 100 has no sample (NVML
	// gives none for a process with no utilisation): 0.
	if err := state.SetUtilization([]mocknvml.Sample{{Card: card2, PID: 300, SM: 40, Mem: 10}}); err != nil {
		t.Fatal(err)
	}
	for range 2 { // the second read asks for the samples after the first's
		if got, err = src.(gpu.ProcessLister).GPUProcesses(ctx); err != nil {
			t.Fatal(err)
		}
		want[0].SMKnown, want[1].SMPercent, want[1].SMKnown = true, 40, true
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("processes while PID 300 runs at 40%% (-want +got):\n%s", diff)
		}
	}
	// It goes idle: no sample at all (NVML_ERROR_NOT_FOUND): PID 100, a
	// compute process, used none; PID 300, an MPS client, is not known
	// (NVML may sample the MPS server instead of its clients).
	if err := state.SetUtilization([]mocknvml.Sample{{Card: card2, PID: 300}}); err != nil {
		t.Fatal(err)
	}
	if got, err = src.(gpu.ProcessLister).GPUProcesses(ctx); err != nil {
		t.Fatal(err)
	}
	want[1].SMPercent, want[1].SMKnown = 0, false
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("processes gone idle (-want +got):\n%s", diff)
	}
}
