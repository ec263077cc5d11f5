// Package daemon runs the node's one MPS control daemon and keeps the
// directories it and its clients use under --mps-root: the Daemon
// interface the mps Manager supervises, with three places to run it (a
// child process of the plugin, a pod of its own, or simulated on fake
// GPUs); the Layout of --mps-root; each claim's own /dev/shm (ClaimDirs);
// and the cards' compute mode, which MPS wants EXCLUSIVE_PROCESS. Which
// cards hold shares, and when the daemon should run, is the Manager's
// business, not this package's.
package daemon

// The daemon as the Manager sees it, and its stand-in for fake GPUs.

import (
	"context"
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
	if err := s.Layout.Create(); err != nil {
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
