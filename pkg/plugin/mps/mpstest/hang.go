// Package mpstest has the test doubles and helpers shared by the tests of
// pkg/plugin/mps, its daemon and mpsv3 packages, and pkg/plugin: a control
// daemon that hangs, a recording /dev/shm mounter, short MPS roots, error
// checks. It imports none of them, so their own tests can use it.
package mpstest

import (
	"context"
	"strings"
	"sync"
)

// HangingControl passes control commands (a control.Func's argv) to
// the wrapped function, except that a command whose words contain the hang
// string blocks, ignoring its context, until Set is called again: the worst
// case of a control daemon that never answers.
type HangingControl struct {
	ctl    func(ctx context.Context, argv []string) (string, error)
	mu     sync.Mutex
	hangOn string
	gate   chan struct{}
	// Hung receives each command that starts hanging (dropped when full).
	Hung chan string
}

// NewHangingControl wraps ctl; nothing hangs until Set.
func NewHangingControl(ctl func(ctx context.Context, argv []string) (string, error)) *HangingControl {
	return &HangingControl{ctl: ctl, Hung: make(chan string, 100)}
}

// Control is the wrapped control.Func.
func (h *HangingControl) Control(ctx context.Context, argv []string) (string, error) {
	command := strings.Join(argv, " ")
	h.mu.Lock()
	on, gate := h.hangOn, h.gate
	h.mu.Unlock()
	if on != "" && strings.Contains(command, on) {
		select {
		case h.Hung <- command:
		default: // nobody counts the hangs any more
		}
		<-gate
	}
	return h.ctl(ctx, argv)
}

// Set makes commands containing on hang ("" for none) and frees those
// hanging so far.
func (h *HangingControl) Set(on string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.gate != nil {
		close(h.gate)
	}
	h.hangOn, h.gate = on, make(chan struct{})
}
