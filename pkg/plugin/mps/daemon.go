package mps

// The daemon as the Manager sees it, and its stand-in for fake GPUs.

import (
	"context"
	"errors"
	"sync"

	"k8s.io/klog/v2"
)

// Daemon is the node-wide MPS control daemon as the Manager sees it.
type Daemon interface {
	// Ensure makes sure the daemon runs (starting it if needed) and is
	// supervised.
	Ensure(ctx context.Context) error
	// Stop asks the daemon to quit and stops supervising it. Stopping a
	// daemon that does not run succeeds.
	Stop(ctx context.Context) error
	// Close stops supervision and leaves the daemon running, for a plugin
	// that exits while shares are still in use: its successor adopts it.
	Close()
}

// SimulatedDaemon stands in for MPS on nodes with fake GPUs: it creates the
// directories containers mount, so CDI specs and mounts are exercised, and
// starts nothing. It must never be used on real hardware.
type SimulatedDaemon struct {
	Layout Layout
	mu     sync.Mutex
	run    bool
	starts int
}

// Ensure creates the directories and marks the daemon running.
func (s *SimulatedDaemon) Ensure(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.run {
		return nil
	}
	if err := s.Layout.create(); err != nil {
		return err
	}
	s.run = true
	s.starts++
	klog.FromContext(ctx).Info("SIMULATED MPS: no control daemon is started (fake GPUs); shares are recorded but not enforced", "pipeDir", s.Layout.PipeDir())
	return nil
}

// Stop marks the daemon stopped.
func (s *SimulatedDaemon) Stop(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.run {
		klog.FromContext(ctx).Info("SIMULATED MPS: control daemon marked stopped")
	}
	s.run = false
	return nil
}

// Close does nothing: there is no process.
func (s *SimulatedDaemon) Close() {}

// Running reports the simulated state.
func (s *SimulatedDaemon) Running() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.run
}

// Starts counts simulated starts.
func (s *SimulatedDaemon) Starts() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.starts
}

var errNotShareable = errors.New("card is not shareable on this node")
