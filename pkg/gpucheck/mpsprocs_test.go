package gpucheck

import (
	"strings"
	"testing"
)

func TestMPSProcessesOutcome(t *testing.T) {
	const mi = 1 << 20
	const na = NVMLValueNotAvailable
	const compute, mpsCall = "nvmlDeviceGetComputeRunningProcesses_v3", "nvmlDeviceGetMPSComputeRunningProcesses_v3"
	clients := []MPSClient{{Name: "a", PID: 101, AllocatedMiB: 256, Running: true}, {Name: "b", PID: 102, AllocatedMiB: 512, Running: true}}
	list := func(call string, procs ...NVMLProcess) ProcessList {
		return ProcessList{Call: call, Return: NVMLSuccess, Processes: procs}
	}
	noMIG := func(p NVMLProcess) NVMLProcess {
		p.GPUInstanceID, p.ComputeInstanceID = ^uint32(0), ^uint32(0)
		return p
	}
	reading := func(c, m ProcessList) MPSProcessReading {
		return MPSProcessReading{Card: "GPU-a", Clients: clients, ServerPIDs: []int{90}, ControlPIDs: []int{80}, Compute: c, MPS: m}
	}
	for _, tc := range []struct {
		name   string
		r      MPSProcessReading
		result Result
		says   []string
		absent []string
	}{
		{
			name: "each client with its own figure in both lists, the server too",
			r: reading(
				list(compute, noMIG(NVMLProcess{PID: 90, UsedBytes: 30 * mi}), noMIG(NVMLProcess{PID: 101, UsedBytes: 774 * mi}), noMIG(NVMLProcess{PID: 102, UsedBytes: 1030 * mi})),
				list(mpsCall, noMIG(NVMLProcess{PID: 101, UsedBytes: 774 * mi}), noMIG(NVMLProcess{PID: 102, UsedBytes: 1030 * mi}))),
			result: Passed,
			says: []string{"card GPU-a: ", compute + ": per-client memory yes, each client with a figure of its own",
				"client a (pid 101, allocated 256 MiB): compute list 774 MiB, MPS list 774 MiB",
				"client b (pid 102, allocated 512 MiB): compute list 1030 MiB, MPS list 1030 MiB",
				"MPS server (pid 90): compute list 30 MiB, MPS list not listed",
				compute + ": pid 90 (MPS server) 30 MiB, pid 101 (client a) 774 MiB, pid 102 (client b) 1030 MiB"},
			absent: []string{"GPU instance"},
		},
		{
			name: "clients listed with memory not available, only the server has a figure",
			r: reading(
				list(compute, NVMLProcess{PID: 102, UsedBytes: na}, NVMLProcess{PID: 90, UsedBytes: 1900 * mi}, NVMLProcess{PID: 101, UsedBytes: na}),
				list(mpsCall, NVMLProcess{PID: 101, UsedBytes: na}, NVMLProcess{PID: 102, UsedBytes: na})),
			result: Passed,
			says: []string{compute + ": per-client memory listed, memory not available", mpsCall + ": per-client memory listed, memory not available",
				"client a (pid 101, allocated 256 MiB): compute list memory not available, MPS list memory not available",
				"MPS server (pid 90): compute list 1900 MiB",
				"pid 90 (MPS server) 1900 MiB, pid 101 (client a) memory not available, pid 102 (client b) memory not available"},
		},
		{
			name: "only the server listed; MPS list not supported",
			r: reading(list(compute, NVMLProcess{PID: 90, UsedBytes: 1900 * mi}, NVMLProcess{PID: 4242, UsedBytes: 10 * mi}),
				ProcessList{Call: mpsCall, Return: NVMLNotSupported}),
			result: Passed,
			says: []string{compute + ": per-client memory no, no client listed", mpsCall + " is not supported",
				"client b (pid 102, allocated 512 MiB): compute list not listed, MPS list not read",
				"pid 4242 (another process) 10 MiB", mpsCall + ": ERROR_NOT_SUPPORTED"},
		},
		{
			name: "PIDs that vanished are named; one client with a figure, one without",
			r: reading(list(compute, NVMLProcess{PID: 101, UsedBytes: 774 * mi}, NVMLProcess{PID: 102, UsedBytes: na}, NVMLProcess{PID: 7, UsedBytes: 2 * mi, Gone: true}),
				list(mpsCall, NVMLProcess{PID: 101, UsedBytes: 774 * mi}, NVMLProcess{PID: 5, UsedBytes: na, Gone: true})),
			result: Passed,
			says: []string{compute + ": per-client memory listed, 1 of 2 with a figure", mpsCall + ": per-client memory partly, 1 of 2 clients listed",
				"listed but no longer running when read back: pid 7 (" + compute + "), pid 5 (" + mpsCall + ")",
				"pid 7 (another process) 2 MiB, no longer running", "pid 5 (another process) memory not available, no longer running"},
		},
		{
			name:   "MIG instance ids are shown when set",
			r:      reading(list(compute, NVMLProcess{PID: 101, UsedBytes: mi, GPUInstanceID: 1, ComputeInstanceID: 0}), list(mpsCall)),
			result: Passed,
			says:   []string{"pid 101 (client a) 1 MiB (GPU instance 1, compute instance 0)", mpsCall + ": no process"},
		},
		{
			name:   "an NVML error other than NOT_SUPPORTED fails",
			r:      reading(ProcessList{Call: compute, Return: "ERROR_NO_PERMISSION"}, list(mpsCall)),
			result: Failed,
			says:   []string{compute + ": ERROR_NO_PERMISSION", "compute list not read"},
		},
		{
			name:   "a list not asked fails",
			r:      reading(ProcessList{Call: compute}, list(mpsCall)),
			result: Failed,
			says:   []string{compute + " was not called"},
		},
		{
			name: "a client that exited before the reading fails, with its log",
			r: func() MPSProcessReading {
				r := reading(list(compute), list(mpsCall))
				r.Clients = []MPSClient{clients[0], {Name: "b", PID: 102, AllocatedMiB: 512, Log: "cuda-alloc: devices=1 ...\n"}}
				return r
			}(),
			result: Failed,
			says:   []string{"client b (pid 102) had exited before NVML was asked: \"cuda-alloc: devices=1 ...\""},
		},
		{
			name: "a client that was not served fails; no server found fails",
			r: func() MPSProcessReading {
				r := reading(list(compute), list(mpsCall))
				r.Clients = []MPSClient{clients[0], {Name: "b", PID: 102, Log: "cuda-alloc: no usable device"}}
				r.ServerPIDs = nil
				return r
			}(),
			result: Failed,
			says:   []string{"client b (pid 102) allocated nothing, so it was not served", "no MPS server process"},
		},
		{
			name:   "one client is not a reading",
			r:      MPSProcessReading{Clients: clients[:1], ServerPIDs: []int{90}, Compute: list(compute), MPS: list(mpsCall)},
			result: Failed,
			says:   []string{"1 client(s) started, the reading needs two"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := MPSProcessesOutcome(tc.r)
			if o.Result != tc.result {
				t.Errorf("%s, want %s: %s", o.Result, tc.result, o.Detail)
			}
			if o.Result == Passed && !o.Noted {
				t.Errorf("a passed reading is a note, to be read: %+v", o)
			}
			for _, w := range tc.says {
				if !strings.Contains(o.Detail, w) {
					t.Errorf("detail lacks %q:\n%s", w, o.Detail)
				}
			}
			for _, a := range tc.absent {
				if strings.Contains(o.Detail, a) {
					t.Errorf("detail says %q:\n%s", a, o.Detail)
				}
			}
		})
	}
}
