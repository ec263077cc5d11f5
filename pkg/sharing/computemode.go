package sharing

import (
	"context"
	"fmt"
	"sync"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// ComputeMode is the subset of NVML compute modes the plugin switches between.
type ComputeMode string

const (
	// ComputeModeDefault lets any number of processes open contexts on the card.
	ComputeModeDefault ComputeMode = "Default"
	// ComputeModeExclusiveProcess allows one context on the card: the MPS
	// server's. NVIDIA recommends it for MPS so that no client can bypass the
	// server (and its per-client limits) by opening its own context.
	ComputeModeExclusiveProcess ComputeMode = "ExclusiveProcess"
)

// ComputeModeSetter changes a card's compute mode.
type ComputeModeSetter interface {
	SetComputeMode(ctx context.Context, uuid string, mode ComputeMode) error
}

// ComputeModeCall is one recorded SetComputeMode call.
type ComputeModeCall struct {
	UUID string
	Mode ComputeMode
}

// RecordingComputeModeSetter changes nothing; it remembers the calls and the
// resulting mode of each card. It backs the simulated MPS backend on fake
// GPUs and the tests.
type RecordingComputeModeSetter struct {
	mu    sync.Mutex
	calls []ComputeModeCall
	modes map[string]ComputeMode
	// Fail, when set, makes SetComputeMode return its error for that call
	// instead of recording it.
	Fail func(uuid string, mode ComputeMode) error
}

// SetComputeMode records the call.
func (r *RecordingComputeModeSetter) SetComputeMode(_ context.Context, uuid string, mode ComputeMode) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.Fail != nil {
		if err := r.Fail(uuid, mode); err != nil {
			return err
		}
	}
	if r.modes == nil {
		r.modes = map[string]ComputeMode{}
	}
	r.calls = append(r.calls, ComputeModeCall{UUID: uuid, Mode: mode})
	r.modes[uuid] = mode
	return nil
}

// Calls returns a copy of the recorded calls in order.
func (r *RecordingComputeModeSetter) Calls() []ComputeModeCall {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]ComputeModeCall(nil), r.calls...)
}

// Mode returns the last mode set on a card, Default when never set.
func (r *RecordingComputeModeSetter) Mode(uuid string) ComputeMode {
	r.mu.Lock()
	defer r.mu.Unlock()
	if m, ok := r.modes[uuid]; ok {
		return m
	}
	return ComputeModeDefault
}

// NVMLComputeModeSetter sets compute modes through NVML. It needs the NVIDIA
// driver's libnvidia-ml.so and root privileges; it has not been exercised on
// a real GPU in this project's CI.
type NVMLComputeModeSetter struct {
	once    sync.Once
	initErr error
	mu      sync.Mutex
}

// SetComputeMode sets the card's compute mode, initialising NVML on first use.
func (n *NVMLComputeModeSetter) SetComputeMode(_ context.Context, uuid string, mode ComputeMode) error {
	n.once.Do(func() {
		if ret := nvml.Init(); ret != nvml.SUCCESS {
			n.initErr = fmt.Errorf("initialising NVML: %s", nvml.ErrorString(ret))
		}
	})
	if n.initErr != nil {
		return n.initErr
	}
	var nvmlMode nvml.ComputeMode
	switch mode {
	case ComputeModeDefault:
		nvmlMode = nvml.COMPUTEMODE_DEFAULT
	case ComputeModeExclusiveProcess:
		nvmlMode = nvml.COMPUTEMODE_EXCLUSIVE_PROCESS
	default:
		return fmt.Errorf("setting compute mode of %s: unknown mode %q", uuid, mode)
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	device, ret := nvml.DeviceGetHandleByUUID(uuid)
	if ret != nvml.SUCCESS {
		return fmt.Errorf("finding card %s in NVML: %s", uuid, nvml.ErrorString(ret))
	}
	if ret := device.SetComputeMode(nvmlMode); ret != nvml.SUCCESS {
		return fmt.Errorf("setting compute mode of %s to %s: %s", uuid, mode, nvml.ErrorString(ret))
	}
	return nil
}
