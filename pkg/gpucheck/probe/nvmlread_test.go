//go:build cgo

package probe

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"

	"github.com/tangram-gpu/tangram/pkg/gpucheck"
)

// lookup answers LookupSymbol for the symbols in has.
func lookup(has ...string) *mock.ExtendedInterface {
	return &mock.ExtendedInterface{LookupSymbolFunc: func(s string) error {
		for _, h := range has {
			if h == s {
				return nil
			}
		}
		return errors.New("undefined symbol " + s)
	}}
}

// TestReadMemory: both memory calls are recorded per card, v2 only when
// the library has the symbol (calling a missing one would kill the
// process), errors by their nvml.h names.
func TestReadMemory(t *testing.T) {
	const mi = 1 << 20
	cards := []*mock.Device{
		{
			GetUUIDFunc: func() (string, nvml.Return) { return "GPU-a", nvml.SUCCESS },
			GetMemoryInfo_v2Func: func() (nvml.Memory_v2, nvml.Return) {
				return nvml.Memory_v2{Total: 143771 * mi, Reserved: 617 * mi, Free: 143150 * mi, Used: 4 * mi}, nvml.SUCCESS
			},
			GetMemoryInfoFunc: func() (nvml.Memory, nvml.Return) {
				return nvml.Memory{Total: 143771 * mi, Free: 143150 * mi, Used: 621 * mi}, nvml.SUCCESS
			},
		},
		{
			GetUUIDFunc:          func() (string, nvml.Return) { return "GPU-b", nvml.SUCCESS },
			GetMemoryInfo_v2Func: func() (nvml.Memory_v2, nvml.Return) { return nvml.Memory_v2{}, nvml.ERROR_NOT_SUPPORTED },
			GetMemoryInfoFunc:    func() (nvml.Memory, nvml.Return) { return nvml.Memory{}, nvml.ERROR_GPU_IS_LOST },
		},
	}
	lib := func(ext *mock.ExtendedInterface) *mock.Interface {
		return &mock.Interface{
			DeviceGetCountFunc:         func() (int, nvml.Return) { return len(cards), nvml.SUCCESS },
			DeviceGetHandleByIndexFunc: func(i int) (nvml.Device, nvml.Return) { return cards[i], nvml.SUCCESS },
			ExtensionsFunc:             func() nvml.ExtendedInterface { return ext },
		}
	}
	got, err := readMemory(lib(lookup("nvmlDeviceGetMemoryInfo_v2")))
	if err != nil {
		t.Fatal(err)
	}
	want := []gpucheck.CardMemory{
		{Index: 0, UUID: "GPU-a", V2Return: "SUCCESS", Total: 143771 * mi, Reserved: 617 * mi, Free: 143150 * mi, Used: 4 * mi,
			V1Return: "SUCCESS", V1Total: 143771 * mi, V1Free: 143150 * mi, V1Used: 621 * mi},
		{Index: 1, UUID: "GPU-b", V2Return: "ERROR_NOT_SUPPORTED", V1Return: "ERROR_GPU_IS_LOST"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got  %+v\nwant %+v", got, want)
	}

	calls := len(cards[0].GetMemoryInfo_v2Calls())
	got, err = readMemory(lib(lookup()))
	if err != nil {
		t.Fatal(err)
	}
	if n := len(cards[0].GetMemoryInfo_v2Calls()); n != calls {
		t.Errorf("v2 called %d more time(s) on a library without the symbol", n-calls)
	}
	if got[0].V2Return != symbolMissing || got[0].V1Total != 143771*mi {
		t.Errorf("without the v2 symbol: %+v", got[0])
	}

	_, err = readMemory(&mock.Interface{DeviceGetCountFunc: func() (int, nvml.Return) { return 0, nvml.ERROR_UNINITIALIZED },
		ExtensionsFunc: func() nvml.ExtendedInterface { return lookup() }})
	if err == nil || err.Error() != "counting the cards: ERROR_UNINITIALIZED" {
		t.Errorf("error %v", err)
	}
}

// TestReadProcesses: the two lists are read as NVML gives them, "not
// available" memory (NVML_VALUE_NOT_AVAILABLE) passed on as is, each
// named by the newest version the library has; a list the library lacks
// is not called.
func TestReadProcesses(t *testing.T) {
	const mi = 1 << 20
	na := gpucheck.NVMLValueNotAvailable
	dev := &mock.Device{
		GetComputeRunningProcessesFunc: func() ([]nvml.ProcessInfo, nvml.Return) {
			return []nvml.ProcessInfo{
				{Pid: 90, UsedGpuMemory: 1900 * mi, GpuInstanceId: 0xFFFFFFFF, ComputeInstanceId: 0xFFFFFFFF},
				{Pid: 101, UsedGpuMemory: na, GpuInstanceId: 0xFFFFFFFF, ComputeInstanceId: 0xFFFFFFFF},
			}, nvml.SUCCESS
		},
		GetMPSComputeRunningProcessesFunc: func() ([]nvml.ProcessInfo, nvml.Return) { return nil, nvml.ERROR_NOT_SUPPORTED },
	}
	lib := &mock.Interface{
		DeviceGetHandleByUUIDFunc: func(uuid string) (nvml.Device, nvml.Return) {
			if uuid != "GPU-a" {
				return nil, nvml.ERROR_NOT_FOUND
			}
			return dev, nvml.SUCCESS
		},
		ExtensionsFunc: func() nvml.ExtendedInterface {
			return lookup("nvmlDeviceGetComputeRunningProcesses_v3", "nvmlDeviceGetComputeRunningProcesses", "nvmlDeviceGetMPSComputeRunningProcesses_v2")
		},
	}
	compute, mpsList, err := readProcesses(lib, "GPU-a")
	if err != nil {
		t.Fatal(err)
	}
	wantCompute := gpucheck.ProcessList{Call: "nvmlDeviceGetComputeRunningProcesses_v3", Return: "SUCCESS", Processes: []gpucheck.NVMLProcess{
		{PID: 90, UsedBytes: 1900 * mi, GPUInstanceID: 0xFFFFFFFF, ComputeInstanceID: 0xFFFFFFFF},
		{PID: 101, UsedBytes: na, GPUInstanceID: 0xFFFFFFFF, ComputeInstanceID: 0xFFFFFFFF},
	}}
	if !reflect.DeepEqual(compute, wantCompute) {
		t.Errorf("compute %+v\nwant    %+v", compute, wantCompute)
	}
	if want := (gpucheck.ProcessList{Call: "nvmlDeviceGetMPSComputeRunningProcesses_v2", Return: "ERROR_NOT_SUPPORTED"}); !reflect.DeepEqual(mpsList, want) {
		t.Errorf("MPS %+v, want %+v", mpsList, want)
	}

	// A library without the MPS list: not called, recorded as missing.
	lib.ExtensionsFunc = func() nvml.ExtendedInterface { return lookup("nvmlDeviceGetComputeRunningProcesses_v3") }
	calls := len(dev.GetMPSComputeRunningProcessesCalls())
	_, mpsList, err = readProcesses(lib, "GPU-a")
	if err != nil {
		t.Fatal(err)
	}
	if mpsList.Return != symbolMissing || len(dev.GetMPSComputeRunningProcessesCalls()) != calls {
		t.Errorf("MPS list without its symbol: %+v (called %d more)", mpsList, len(dev.GetMPSComputeRunningProcessesCalls())-calls)
	}

	if _, _, err := readProcesses(lib, "GPU-z"); err == nil || err.Error() != "card GPU-z's handle: ERROR_NOT_FOUND" {
		t.Errorf("unknown card: %v", err)
	}
}

// TestProcessesReadingJudged: what readProcesses gives, with a PID that
// vanished (markGone over a proc root where it has no directory), makes
// the outcome the report shows.
func TestProcessesReadingJudged(t *testing.T) {
	const mi = 1 << 20
	proc := t.TempDir()
	for _, pid := range []string{"90", "101", "102"} {
		if err := mkdir(proc, pid); err != nil {
			t.Fatal(err)
		}
	}
	dev := &mock.Device{
		GetComputeRunningProcessesFunc: func() ([]nvml.ProcessInfo, nvml.Return) {
			return []nvml.ProcessInfo{{Pid: 90, UsedGpuMemory: 1900 * mi}, {Pid: 101, UsedGpuMemory: gpucheck.NVMLValueNotAvailable}, {Pid: 4711, UsedGpuMemory: 3 * mi}}, nvml.SUCCESS
		},
		GetMPSComputeRunningProcessesFunc: func() ([]nvml.ProcessInfo, nvml.Return) {
			return []nvml.ProcessInfo{{Pid: 101, UsedGpuMemory: 300 * mi}, {Pid: 102, UsedGpuMemory: 560 * mi}}, nvml.SUCCESS
		},
	}
	lib := &mock.Interface{
		DeviceGetHandleByUUIDFunc: func(string) (nvml.Device, nvml.Return) { return dev, nvml.SUCCESS },
		ExtensionsFunc: func() nvml.ExtendedInterface {
			return lookup("nvmlDeviceGetComputeRunningProcesses_v3", "nvmlDeviceGetMPSComputeRunningProcesses_v3")
		},
	}
	compute, mpsList, err := readProcesses(lib, "GPU-a")
	if err != nil {
		t.Fatal(err)
	}
	s := &state{cfg: Config{ProcRoot: proc}}
	r := gpucheck.MPSProcessReading{Card: "GPU-a", ServerPIDs: []int{90}, Compute: s.markGone(compute), MPS: s.markGone(mpsList),
		Clients: []gpucheck.MPSClient{{Name: "a", PID: 101, AllocatedMiB: 256, Running: true}, {Name: "b", PID: 102, AllocatedMiB: 512, Running: true}}}
	o := gpucheck.MPSProcessesOutcome(r)
	for _, w := range []string{
		"nvmlDeviceGetComputeRunningProcesses_v3: per-client memory partly, 1 of 2 clients listed",
		"nvmlDeviceGetMPSComputeRunningProcesses_v3: per-client memory yes, each client with a figure of its own",
		"listed but no longer running when read back: pid 4711 (nvmlDeviceGetComputeRunningProcesses_v3)",
		"client a (pid 101, allocated 256 MiB): compute list memory not available, MPS list 300 MiB",
		"MPS server (pid 90): compute list 1900 MiB, MPS list not listed",
	} {
		if !contains(o.Detail, w) {
			t.Errorf("detail lacks %q:\n%s", w, o.Detail)
		}
	}
	if o.Result != gpucheck.Passed || !o.Noted {
		t.Errorf("%s (noted %v), want a noted pass: %s", o.Result, o.Noted, o.Detail)
	}
}

func mkdir(root, name string) error { return os.Mkdir(filepath.Join(root, name), 0o755) }

func contains(s, sub string) bool { return strings.Contains(s, sub) }
