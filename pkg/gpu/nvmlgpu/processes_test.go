//go:build cgo

package nvmlgpu

import (
	"context"
	"math"
	"strings"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxa100"
	"github.com/google/go-cmp/cmp"

	"github.com/tangram-gpu/tangram/pkg/gpu"
)

// TestGPUProcesses reads the process lists of go-nvml's DGX A100 mock as
// NVML documents them: host PIDs, memory that may be "not available"
// (all ones), a GPU instance ID of all ones outside MIG, MPS clients in a
// list of their own, which a driver may not support. One card's failure
// leaves the others' processes.
func TestGPUProcesses(t *testing.T) {
	const notAvailable = math.MaxUint64
	type lists struct {
		compute    []nvml.ProcessInfo
		computeRet nvml.Return
		mps        []nvml.ProcessInfo
		mpsRet     nvml.Return
		// util are the SM samples; utilRet, else SUCCESS with util, else
		// NOT_SUPPORTED.
		util       []nvml.ProcessUtilizationSample
		utilRet    nvml.Return
		utilPanics bool
	}
	tests := []struct {
		name    string
		cards   map[int]lists // the others run nothing
		want    func(uuid func(int) string) []gpu.Process
		wantErr string
	}{
		{name: "compute processes, one without its memory",
			cards: map[int]lists{0: {compute: []nvml.ProcessInfo{
				{Pid: 200, UsedGpuMemory: 3 << 30, GpuInstanceId: math.MaxUint32, ComputeInstanceId: math.MaxUint32},
				{Pid: 100, UsedGpuMemory: notAvailable, GpuInstanceId: math.MaxUint32, ComputeInstanceId: math.MaxUint32},
			}, mpsRet: nvml.ERROR_NOT_SUPPORTED}},
			want: func(uuid func(int) string) []gpu.Process {
				return []gpu.Process{
					{Card: uuid(0), GPUInstance: gpu.NoGPUInstance, PID: 100, UsedBytes: -1},
					{Card: uuid(0), GPUInstance: gpu.NoGPUInstance, PID: 200, UsedBytes: 3 << 30},
				}
			}},
		{name: "MPS: a client in both lists, its memory from the one that gives it",
			cards: map[int]lists{2: {
				compute: []nvml.ProcessInfo{{Pid: 50, UsedGpuMemory: 1 << 30, GpuInstanceId: math.MaxUint32}, {Pid: 300, UsedGpuMemory: notAvailable, GpuInstanceId: math.MaxUint32}},
				mps:     []nvml.ProcessInfo{{Pid: 300, UsedGpuMemory: 2 << 30, GpuInstanceId: math.MaxUint32}},
			}},
			want: func(uuid func(int) string) []gpu.Process {
				return []gpu.Process{
					{Card: uuid(2), GPUInstance: gpu.NoGPUInstance, PID: 50, UsedBytes: 1 << 30},
					{Card: uuid(2), GPUInstance: gpu.NoGPUInstance, PID: 300, UsedBytes: 2 << 30, MPSClient: true},
				}
			}},
		{name: "MIG: each process with its GPU instance",
			cards: map[int]lists{1: {compute: []nvml.ProcessInfo{
				{Pid: 400, UsedGpuMemory: 5 << 30, GpuInstanceId: 1, ComputeInstanceId: 0},
				{Pid: 401, UsedGpuMemory: 1 << 30, GpuInstanceId: 2, ComputeInstanceId: 0},
			}, mpsRet: nvml.ERROR_NOT_SUPPORTED}},
			want: func(uuid func(int) string) []gpu.Process {
				return []gpu.Process{
					{Card: uuid(1), GPUInstance: 1, PID: 400, UsedBytes: 5 << 30},
					{Card: uuid(1), GPUInstance: 2, PID: 401, UsedBytes: 1 << 30},
				}
			}},
		{name: "SM utilisation: each process's samples averaged, none for a process that used none; an MPS client without a sample not known",
			cards: map[int]lists{5: {
				compute: []nvml.ProcessInfo{{Pid: 600, UsedGpuMemory: 1 << 30, GpuInstanceId: math.MaxUint32}, {Pid: 601, UsedGpuMemory: 1 << 30, GpuInstanceId: math.MaxUint32}},
				mps:     []nvml.ProcessInfo{{Pid: 602, UsedGpuMemory: 1 << 30, GpuInstanceId: math.MaxUint32}, {Pid: 603, UsedGpuMemory: 1 << 30, GpuInstanceId: math.MaxUint32}},
				util:    []nvml.ProcessUtilizationSample{{Pid: 600, TimeStamp: 20, SmUtil: 70}, {Pid: 600, TimeStamp: 10, SmUtil: 10}, {Pid: 603, TimeStamp: 20, SmUtil: 130}},
			}},
			want: func(uuid func(int) string) []gpu.Process {
				return []gpu.Process{
					{Card: uuid(5), GPUInstance: gpu.NoGPUInstance, PID: 600, UsedBytes: 1 << 30, SMPercent: 40, SMKnown: true},
					{Card: uuid(5), GPUInstance: gpu.NoGPUInstance, PID: 601, UsedBytes: 1 << 30, SMKnown: true},
					{Card: uuid(5), GPUInstance: gpu.NoGPUInstance, PID: 602, UsedBytes: 1 << 30, MPSClient: true},
					{Card: uuid(5), GPUInstance: gpu.NoGPUInstance, PID: 603, UsedBytes: 1 << 30, MPSClient: true, SMPercent: 100, SMKnown: true},
				}
			}},
		{name: "SM utilisation whose binding panics (samples grown between its two calls): not known, the processes still listed",
			cards: map[int]lists{5: {
				compute: []nvml.ProcessInfo{{Pid: 600, UsedGpuMemory: 1 << 30, GpuInstanceId: math.MaxUint32}},
				mpsRet:  nvml.ERROR_NOT_SUPPORTED, utilPanics: true,
			}},
			want: func(uuid func(int) string) []gpu.Process {
				return []gpu.Process{{Card: uuid(5), GPUInstance: gpu.NoGPUInstance, PID: 600, UsedBytes: 1 << 30}}
			}},
		{name: "SM utilisation: no sample since the last read (NOT_FOUND) is none used",
			cards: map[int]lists{5: {
				compute: []nvml.ProcessInfo{{Pid: 600, UsedGpuMemory: 1 << 30, GpuInstanceId: math.MaxUint32}},
				mpsRet:  nvml.ERROR_NOT_SUPPORTED, utilRet: nvml.ERROR_NOT_FOUND,
			}},
			want: func(uuid func(int) string) []gpu.Process {
				return []gpu.Process{{Card: uuid(5), GPUInstance: gpu.NoGPUInstance, PID: 600, UsedBytes: 1 << 30, SMKnown: true}}
			}},
		{name: "SM utilisation NVML cannot give (MIG mode, an error): not known, the processes still listed",
			cards: map[int]lists{5: {
				compute: []nvml.ProcessInfo{{Pid: 600, UsedGpuMemory: 1 << 30, GpuInstanceId: math.MaxUint32}},
				mpsRet:  nvml.ERROR_NOT_SUPPORTED, utilRet: nvml.ERROR_UNKNOWN,
			}},
			want: func(uuid func(int) string) []gpu.Process {
				return []gpu.Process{{Card: uuid(5), GPUInstance: gpu.NoGPUInstance, PID: 600, UsedBytes: 1 << 30}}
			}},
		{name: "one card fails: the others' processes, the card named",
			cards: map[int]lists{
				3: {computeRet: nvml.ERROR_GPU_IS_LOST},
				4: {compute: []nvml.ProcessInfo{{Pid: 500, UsedGpuMemory: 1 << 30, GpuInstanceId: math.MaxUint32}}},
			},
			want: func(uuid func(int) string) []gpu.Process {
				return []gpu.Process{{Card: uuid(4), GPUInstance: gpu.NoGPUInstance, PID: 500, UsedBytes: 1 << 30}}
			},
			wantErr: "listing the compute processes of card 3 (GPU-"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			server := dgxa100.New()
			uuid := func(i int) string { return server.Devices[i].(*dgxa100.Device).UUID }
			for i, d := range server.Devices {
				dev := d.(*dgxa100.Device)
				l := tt.cards[i]
				dev.GetComputeRunningProcessesFunc = func() ([]nvml.ProcessInfo, nvml.Return) {
					if l.computeRet != 0 {
						return nil, l.computeRet
					}
					return l.compute, nvml.SUCCESS
				}
				dev.GetMPSComputeRunningProcessesFunc = func() ([]nvml.ProcessInfo, nvml.Return) {
					if l.mpsRet != 0 {
						return nil, l.mpsRet
					}
					return l.mps, nvml.SUCCESS
				}
				dev.GetProcessUtilizationFunc = func(uint64) ([]nvml.ProcessUtilizationSample, nvml.Return) {
					switch {
					case l.utilPanics:
						var buf []nvml.ProcessUtilizationSample
						n := 2
						return buf[:n], nvml.SUCCESS // what go-nvml does when the count grew
					case l.utilRet != 0:
						return nil, l.utilRet
					case l.util != nil:
						return l.util, nvml.SUCCESS
					}
					return nil, nvml.ERROR_NOT_SUPPORTED
				}
			}
			got, err := New(server).(gpu.ProcessLister).GPUProcesses(context.Background())
			if tt.wantErr == "" && err != nil || tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)) {
				t.Errorf("error %v, want %q", err, tt.wantErr)
			}
			if diff := cmp.Diff(tt.want(uuid), got); diff != "" {
				t.Errorf("processes (-want +got):\n%s", diff)
			}
		})
	}
}

// TestGPUProcessesLooksUpTheCalls: a library without the process list
// calls is never called (go-nvml binds lazily: calling a missing symbol
// kills the process); one without the MPS list is asked for compute
// processes only.
func TestGPUProcessesLooksUpTheCalls(t *testing.T) {
	tests := []struct {
		name        string
		missing     string // a prefix of the symbols the library lacks
		wantErr     string
		wantCompute bool
	}{
		{name: "no process list at all", missing: "nvmlDeviceGetComputeRunningProcesses", wantErr: "has none of [nvmlDeviceGetComputeRunningProcesses_v3"},
		{name: "no MPS list", missing: "nvmlDeviceGetMPSComputeRunningProcesses", wantCompute: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			server := dgxa100.New()
			server.LookupSymbolFunc = func(symbol string) error {
				if strings.HasPrefix(symbol, tt.missing) {
					return nvml.ERROR_FUNCTION_NOT_FOUND
				}
				return nil
			}
			computeCalls := 0
			for _, d := range server.Devices {
				dev := d.(*dgxa100.Device)
				dev.GetComputeRunningProcessesFunc = func() ([]nvml.ProcessInfo, nvml.Return) {
					computeCalls++
					return nil, nvml.SUCCESS
				}
				dev.GetMPSComputeRunningProcessesFunc = func() ([]nvml.ProcessInfo, nvml.Return) {
					t.Fatal("the MPS list was called")
					return nil, nvml.ERROR_UNKNOWN
				}
				if tt.missing != "nvmlDeviceGetMPSComputeRunningProcesses" {
					dev.GetMPSComputeRunningProcessesFunc = nil
				}
			}
			_, err := New(server).(gpu.ProcessLister).GPUProcesses(context.Background())
			if tt.wantErr == "" && err != nil || tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)) {
				t.Errorf("error %v, want %q", err, tt.wantErr)
			}
			if (computeCalls > 0) != tt.wantCompute {
				t.Errorf("%d compute list calls, want some: %t", computeCalls, tt.wantCompute)
			}
		})
	}
}
