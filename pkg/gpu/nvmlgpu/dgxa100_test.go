//go:build cgo

package nvmlgpu

import (
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxa100"
	"github.com/google/go-cmp/cmp"

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
		})
	}
	ctx, logs := logContext()
	got, err := New(server).GPUs(ctx)
	if err != nil {
		t.Fatalf("GPUs: %v", err)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("GPUs (-want +got):\n%s", diff)
	}
	if m := logs.missing([][]string{{`"msg"="Leaving out a value the GPU reports oddly"`, `"field"="pciBusID"`, `"value"=""`, `"index"=7`}}); len(m) > 0 {
		t.Errorf("log lines missing: %q", m)
	}
}
