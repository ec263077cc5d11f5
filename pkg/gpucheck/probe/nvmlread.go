//go:build cgo

package probe

import (
	"fmt"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/tangram-gpu/tangram/pkg/gpu"
	"github.com/tangram-gpu/tangram/pkg/gpu/nvmlgpu"
	"github.com/tangram-gpu/tangram/pkg/gpucheck"
)

// The read-only NVML calls of the reserved-memory and MPS-processes rows,
// which the plugin's Source does not make. Only cgo builds read NVML
// (nvmlread_nocgo.go says so otherwise). Every call is a query.

// symbolMissing is the Return recorded for a call the loaded library
// lacks: calling it would kill the process, so it is looked up first.
const symbolMissing = "symbol missing"

// retName spells a return as nvml.h does (the one spelling of
// nvmlgpu), so the judgments compare names, not numbers.
var retName = nvmlgpu.ReturnName

// nvmlMemory reads every card's memory through the library under src.
func nvmlMemory(src gpu.Source) ([]gpucheck.CardMemory, error) {
	lib, err := nvmlgpu.Library(src)
	if err != nil {
		return nil, err
	}
	return readMemory(lib)
}

// readMemory asks each card nvmlDeviceGetMemoryInfo_v2 (when the library
// has it) and nvmlDeviceGetMemoryInfo; the published figures are the
// caller's to fill in.
func readMemory(lib nvml.Interface) ([]gpucheck.CardMemory, error) {
	count, ret := lib.DeviceGetCount()
	if ret != nvml.SUCCESS {
		return nil, fmt.Errorf("counting the cards: %s", retName(ret))
	}
	hasV2 := lib.Extensions().LookupSymbol("nvmlDeviceGetMemoryInfo_v2") == nil
	var out []gpucheck.CardMemory
	for i := 0; i < count; i++ {
		dev, ret := lib.DeviceGetHandleByIndex(i)
		if ret != nvml.SUCCESS {
			return nil, fmt.Errorf("card %d's handle: %s", i, retName(ret))
		}
		c := gpucheck.CardMemory{Index: i, V2Return: symbolMissing}
		c.UUID, _ = dev.GetUUID()
		if hasV2 {
			m, ret := dev.GetMemoryInfo_v2()
			c.V2Return = retName(ret)
			if ret == nvml.SUCCESS {
				c.Total, c.Reserved, c.Free, c.Used = m.Total, m.Reserved, m.Free, m.Used
			}
		}
		m, ret := dev.GetMemoryInfo()
		c.V1Return = retName(ret)
		if ret == nvml.SUCCESS {
			c.V1Total, c.V1Free, c.V1Used = m.Total, m.Free, m.Used
		}
		out = append(out, c)
	}
	return out, nil
}

// nvmlProcesses reads the card's two process lists through the library
// under src.
func nvmlProcesses(src gpu.Source, uuid string) (compute, mps gpucheck.ProcessList, err error) {
	lib, err := nvmlgpu.Library(src)
	if err != nil {
		return compute, mps, err
	}
	return readProcesses(lib, uuid)
}

// newestSymbol is the newest of NVML's versions of a call the library
// has, as go-nvml picks it (v3, v2, then the unversioned one), "" when
// it has none.
func newestSymbol(lib nvml.Interface, name string) string {
	for _, s := range []string{name + "_v3", name + "_v2", name} {
		if lib.Extensions().LookupSymbol(s) == nil {
			return s
		}
	}
	return ""
}

// readProcesses asks the card nvmlDeviceGetComputeRunningProcesses and
// nvmlDeviceGetMPSComputeRunningProcesses (v3 where the driver has it;
// Call names the version asked).
func readProcesses(lib nvml.Interface, uuid string) (compute, mps gpucheck.ProcessList, err error) {
	dev, ret := lib.DeviceGetHandleByUUID(uuid)
	if ret != nvml.SUCCESS {
		return compute, mps, fmt.Errorf("card %s's handle: %s", uuid, retName(ret))
	}
	list := func(name string, call func() ([]nvml.ProcessInfo, nvml.Return)) gpucheck.ProcessList {
		l := gpucheck.ProcessList{Call: newestSymbol(lib, name)}
		if l.Call == "" {
			l.Call, l.Return = name, symbolMissing
			return l
		}
		procs, ret := call()
		l.Return = retName(ret)
		for _, p := range procs {
			l.Processes = append(l.Processes, gpucheck.NVMLProcess{PID: p.Pid, UsedBytes: p.UsedGpuMemory,
				GPUInstanceID: p.GpuInstanceId, ComputeInstanceID: p.ComputeInstanceId})
		}
		return l
	}
	compute = list("nvmlDeviceGetComputeRunningProcesses", dev.GetComputeRunningProcesses)
	mps = list("nvmlDeviceGetMPSComputeRunningProcesses", dev.GetMPSComputeRunningProcesses)
	return compute, mps, nil
}
