//go:build cgo

package nvmlgpu

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"slices"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/tangram-gpu/tangram/pkg/gpu"
)

// noInstance is NVML's GPU instance ID of a process outside MIG.
const noInstance = math.MaxUint32

// GPUProcesses lists every card's compute processes and MPS clients. On a
// card in MIG mode the card's handle gives the processes of all its
// instances, each with its GPU instance ID, to a caller with the
// privileges the plugin has (NVML, nvmlDeviceGetComputeRunningProcesses).
// A card whose list fails is left out and named in the returned error;
// the others' processes are still returned. An MPS list NVML does not
// support, or a library without the call, is no MPS client, not an error.
func (s *source) GPUProcesses(ctx context.Context) ([]gpu.Process, error) {
	// Calling a symbol the library lacks would kill the process (go-nvml
	// binds lazily): look the calls up first.
	if !s.hasAnySymbol(computeProcessSymbols) {
		return nil, fmt.Errorf("listing GPU processes: the NVIDIA driver's NVML has none of %v", computeProcessSymbols)
	}
	withMPS := s.hasAnySymbol(mpsProcessSymbols)
	withSM := s.hasAnySymbol(utilizationSymbols)
	count, ret := s.lib.DeviceGetCount()
	if ret != nvml.SUCCESS {
		return nil, fmt.Errorf("listing GPU processes: nvmlDeviceGetCount: %w", ret)
	}
	var out []gpu.Process
	var errs []error
	for i := 0; i < count; i++ {
		dev, ret := s.lib.DeviceGetHandleByIndex(i)
		if ret != nvml.SUCCESS {
			errs = append(errs, fmt.Errorf("listing the processes of card %d: its handle: %w", i, ret))
			continue
		}
		procs, err := cardProcesses(dev, i, withMPS)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if withSM && len(procs) > 0 {
			s.addSMUtilization(dev, procs)
		}
		out = append(out, procs...)
	}
	return out, errors.Join(errs...)
}

// The versions of the process list calls go-nvml may call, newest first.
var (
	computeProcessSymbols = []string{"nvmlDeviceGetComputeRunningProcesses_v3", "nvmlDeviceGetComputeRunningProcesses_v2", "nvmlDeviceGetComputeRunningProcesses"}
	mpsProcessSymbols     = []string{"nvmlDeviceGetMPSComputeRunningProcesses_v3", "nvmlDeviceGetMPSComputeRunningProcesses_v2", "nvmlDeviceGetMPSComputeRunningProcesses"}
	utilizationSymbols    = []string{"nvmlDeviceGetProcessUtilization"}
)

// addSMUtilization sets the SM utilisation of card dev's processes from
// the samples NVML took since the previous read, averaged per process.
// NVML returns samples only for a process with some utilisation, so a
// compute process without one used none (NVML_ERROR_NOT_FOUND: none did).
// An MPS client without a sample stays not known: whether NVML samples
// each client or only the MPS server is not verified. Where NVML cannot
// say (NOT_SUPPORTED in MIG mode and on older cards, any other error, a
// panic in the binding) the processes keep SMKnown false: utilisation is
// an extra, never a failed round.
func (s *source) addSMUtilization(dev nvml.Device, procs []gpu.Process) {
	uuid := procs[0].Card
	s.smMu.Lock()
	defer s.smMu.Unlock()
	samples, ok := processUtilization(dev, s.smSeen[uuid])
	if !ok {
		return
	}
	type mean struct{ sum, n int }
	byPID := map[int]mean{}
	for _, smp := range samples {
		m := byPID[int(smp.Pid)]
		byPID[int(smp.Pid)] = mean{m.sum + int(min(smp.SmUtil, 100)), m.n + 1}
		if s.smSeen == nil {
			s.smSeen = map[string]uint64{}
		}
		s.smSeen[uuid] = max(s.smSeen[uuid], smp.TimeStamp)
	}
	for i := range procs {
		m, sampled := byPID[procs[i].PID]
		if !sampled && procs[i].MPSClient {
			continue
		}
		procs[i].SMKnown = true
		if sampled {
			procs[i].SMPercent = (m.sum + m.n/2) / m.n
		}
	}
}

// processUtilization reads the samples after lastSeen; ok is false when
// NVML cannot say. go-nvml's binding slices its buffer by the count the
// second call returns, which panics when the samples grew between its two
// calls: that is a round without SM figures, not a dead plugin.
func processUtilization(dev nvml.Device, lastSeen uint64) (samples []nvml.ProcessUtilizationSample, ok bool) {
	defer func() {
		if recover() != nil {
			samples, ok = nil, false
		}
	}()
	samples, ret := dev.GetProcessUtilization(lastSeen)
	switch ret {
	case nvml.SUCCESS, nvml.ERROR_NOT_FOUND:
		return samples, true
	}
	return nil, false
}

func (s *source) hasAnySymbol(names []string) bool {
	for _, name := range names {
		if s.lib.Extensions().LookupSymbol(name) == nil {
			return true
		}
	}
	return false
}

func cardProcesses(dev nvml.Device, index int, withMPS bool) ([]gpu.Process, error) {
	uuid, ret := dev.GetUUID()
	if ret != nvml.SUCCESS {
		return nil, fmt.Errorf("listing the processes of card %d: its UUID: %w", index, ret)
	}
	compute, ret := dev.GetComputeRunningProcesses()
	if ret != nvml.SUCCESS {
		return nil, fmt.Errorf("listing the compute processes of card %d (%s): %w", index, uuid, ret)
	}
	var mps []nvml.ProcessInfo
	ret = nvml.ERROR_NOT_SUPPORTED
	if withMPS {
		mps, ret = dev.GetMPSComputeRunningProcesses()
	}
	switch ret {
	case nvml.SUCCESS:
	case nvml.ERROR_NOT_SUPPORTED, nvml.ERROR_FUNCTION_NOT_FOUND:
		mps = nil
	default:
		return nil, fmt.Errorf("listing the MPS clients of card %d (%s): %w", index, uuid, ret)
	}
	type key struct{ pid, instance int }
	seen := map[key]int{}
	var out []gpu.Process
	add := func(p nvml.ProcessInfo, client bool) {
		proc := gpu.Process{Card: uuid, GPUInstance: gpu.NoGPUInstance, PID: int(p.Pid), UsedBytes: -1, MPSClient: client}
		if p.GpuInstanceId != noInstance {
			proc.GPUInstance = int(p.GpuInstanceId)
		}
		// NVML_VALUE_NOT_AVAILABLE is all ones; a size past int64 is no
		// size either.
		if p.UsedGpuMemory <= math.MaxInt64 {
			proc.UsedBytes = int64(p.UsedGpuMemory)
		}
		k := key{proc.PID, proc.GPUInstance}
		if at, dup := seen[k]; dup {
			out[at].MPSClient = out[at].MPSClient || client
			if out[at].UsedBytes < 0 {
				out[at].UsedBytes = proc.UsedBytes
			}
			return
		}
		seen[k] = len(out)
		out = append(out, proc)
	}
	for _, p := range compute {
		add(p, false)
	}
	for _, p := range mps {
		add(p, true)
	}
	slices.SortFunc(out, func(a, b gpu.Process) int {
		return cmp.Or(cmp.Compare(a.PID, b.PID), cmp.Compare(a.GPUInstance, b.GPUInstance))
	})
	return out, nil
}
