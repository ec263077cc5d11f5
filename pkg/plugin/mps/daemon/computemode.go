package daemon

import (
	"context"
	"errors"
	"sync"
)

// ErrNVMLUnavailable is returned by NewNVMLComputeModeSetter in binaries
// built without cgo, which cannot load NVML.
var ErrNVMLUnavailable = errors.New("setting compute modes needs NVML, which needs cgo; this binary was built without it")

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
