//go:build cgo

package nvmlgpu

import (
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxa100"
	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/tangram-gpu/tangram/pkg/gpu"
)

// TestStockDGXA100Mock runs the reader on go-nvml's own DGX A100 mock, with
// only the calls it lacks filled in the way a driver without them answers
// (NOT_SUPPORTED). Its PciInfo carries no bus ID, which must be left out.
func TestStockDGXA100Mock(t *testing.T) {
	server := dgxa100.New()
	server.SystemGetCudaDriverVersion_v2Func = func() (int, nvml.Return) {
		return server.CudaDriverVersion, nvml.SUCCESS
	}
	var want []gpu.GPU
	for i, d := range server.Devices {
		dev := d.(*dgxa100.Device)
		dev.GetNumaNodeIdFunc = func() (int, nvml.Return) { return 0, nvml.ERROR_NOT_SUPPORTED }
		dev.GetNvLinkStateFunc = func(int) (nvml.EnableState, nvml.Return) {
			return nvml.FEATURE_DISABLED, nvml.ERROR_NOT_SUPPORTED
		}
		dev.GetGpuFabricInfoFunc = func() (nvml.GpuFabricInfo, nvml.Return) {
			return nvml.GpuFabricInfo{}, nvml.ERROR_NOT_SUPPORTED
		}
		// It serves only the v1 memory call: the total comes from
		// there, reserved memory stays unknown.
		dev.GetMemoryInfo_v2Func = func() (nvml.Memory_v2, nvml.Return) {
			return nvml.Memory_v2{}, nvml.ERROR_NOT_SUPPORTED
		}
		want = append(want, gpu.GPU{
			Index:                 i,
			Minor:                 i,
			UUID:                  dev.UUID,
			ProductName:           "Mock NVIDIA A100-SXM4-40GB",
			Brand:                 "Nvidia",
			Architecture:          "ampere",
			CUDAComputeCapability: "8.0",
			DriverVersion:         "550.54.15",
			CUDADriverVersion:     "12.4",
			MemoryBytes:           40 << 30,
			// go-nvml's A100 is MIG-capable, its mode off; its
			// profiles are read all the same (checked below).
			MIG: &gpu.MIG{},
		})
	}
	ctx, logs := logContext()
	got, err := New(server).GPUs(ctx)
	if err != nil {
		t.Fatalf("GPUs: %v", err)
	}
	if diff := cmp.Diff(want, got, cmpopts.IgnoreFields(gpu.MIG{}, "Profiles")); diff != "" {
		t.Errorf("GPUs (-want +got):\n%s", diff)
	}
	for _, g := range got {
		if g.MIG == nil || len(g.MIG.Profiles) != 7 {
			t.Errorf("card %d: MIG %+v, want the A100's 7 profiles read with MIG mode off", g.Index, g.MIG)
		}
	}
	if m := logs.missing([][]string{{`"msg"="Leaving out a value the GPU reports oddly"`, `"field"="pciBusID"`, `"value"=""`, `"index"=7`}}); len(m) > 0 {
		t.Errorf("log lines missing: %q", m)
	}
}

// TestStockDGXA100MockMIG reads MIG through go-nvml's own DGX A100 mock
// (NVIDIA's model of an A100-SXM4-40GB's profiles) with MIG mode on: the
// names Tangram derives from NVML's numbers are the MIG user guide's A100
// 40GB names, and each profile keeps the placements the mock reports.
func TestStockDGXA100MockMIG(t *testing.T) {
	server := dgxa100.New()
	server.SystemGetCudaDriverVersion_v2Func = func() (int, nvml.Return) {
		return server.CudaDriverVersion, nvml.SUCCESS
	}
	for _, d := range server.Devices {
		dev := d.(*dgxa100.Device)
		dev.GetNumaNodeIdFunc = func() (int, nvml.Return) { return 0, nvml.ERROR_NOT_SUPPORTED }
		dev.GetNvLinkStateFunc = func(int) (nvml.EnableState, nvml.Return) {
			return nvml.FEATURE_DISABLED, nvml.ERROR_NOT_SUPPORTED
		}
		dev.GetGpuFabricInfoFunc = func() (nvml.GpuFabricInfo, nvml.Return) {
			return nvml.GpuFabricInfo{}, nvml.ERROR_NOT_SUPPORTED
		}
		dev.GetMemoryInfo_v2Func = func() (nvml.Memory_v2, nvml.Return) {
			return nvml.Memory_v2{}, nvml.ERROR_NOT_SUPPORTED
		}
	}
	if _, ret := server.Devices[0].SetMigMode(nvml.DEVICE_MIG_ENABLE); ret != nvml.SUCCESS {
		t.Fatalf("SetMigMode: %v", ret)
	}
	ctx, _ := logContext()
	got, err := New(server).GPUs(ctx)
	if err != nil {
		t.Fatalf("GPUs: %v", err)
	}
	m := got[0].MIG
	if m == nil || !m.Enabled {
		t.Fatalf("card 0 MIG = %+v, want enabled", m)
	}
	names := map[string]int{}
	for _, p := range m.Profiles {
		names[p.Name] = len(p.Placements)
	}
	want := map[string]int{"1g.5gb": 7, "1g.5gb+me": 7, "1g.10gb": 4, "2g.10gb": 3, "3g.20gb": 2, "4g.20gb": 1, "7g.40gb": 1}
	if diff := cmp.Diff(want, names); diff != "" {
		t.Errorf("profile names and placement counts (-want +got):\n%s", diff)
	}
	if got[1].MIG == nil || got[1].MIG.Enabled {
		t.Errorf("card 1 MIG = %+v, want capable and off", got[1].MIG)
	}
}
