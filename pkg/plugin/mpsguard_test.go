package plugin

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"

	"github.com/tangram-gpu/tangram/pkg/plugin/mps/daemon"
)

// gatedStop holds the daemon's Stop until release is closed, so that a
// test can run another process's calls while a stop is under way.
type gatedStop struct {
	daemon.Daemon
	entered, release chan struct{}
	once             sync.Once
}

func newGatedStop() *gatedStop {
	return &gatedStop{entered: make(chan struct{}), release: make(chan struct{})}
}

func (g *gatedStop) Stop(ctx context.Context) error {
	g.once.Do(func() { close(g.entered) })
	select {
	case <-g.release:
	case <-ctx.Done():
		return ctx.Err()
	}
	return g.Daemon.Stop(ctx)
}

// prepareAsync runs a prepare in the background; the result arrives on
// the returned channel.
func (h *harness) prepareAsync(claim *resourceapi.ResourceClaim) <-chan kubeletplugin.PrepareResult {
	done := make(chan kubeletplugin.PrepareResult, 1)
	go func() {
		res, err := h.driver.PrepareResourceClaims(context.Background(), []*resourceapi.ResourceClaim{claim})
		if err != nil {
			done <- kubeletplugin.PrepareResult{Err: err}
			return
		}
		done <- res[claim.UID]
	}()
	return done
}

func waitClosed(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(10 * time.Second):
		t.Fatalf("timed out waiting for %s", what)
	}
}

// The rolling-update window: the new plugin pod recovers on a node with no
// share, so its worker goes to stop the idle daemon, and meanwhile the old
// pod prepares the node's first share. The stop must come before the share
// or not at all: the share's prepare finds the daemon running, and it
// keeps running while the share is prepared.
func TestNewPluginProcessLeavesTheDaemonOfTheOldOnesFirstShare(t *testing.T) {
	oldPod := newHarness(t)
	// An idle daemon runs, left by shares that are gone.
	if err := oldPod.daemon.Ensure(context.Background()); err != nil {
		t.Fatal(err)
	}
	gate := newGatedStop()
	newPod := oldPod.twinWith(func(d daemon.Daemon) daemon.Daemon { gate.Daemon = d; return gate })
	waitClosed(t, gate.entered, "the new process to stop the idle daemon")

	claim := claimWith("s", shareResult("gpu", "gpu-1", "s1", "4Gi", ""))
	done := oldPod.prepareAsync(claim)
	var res kubeletplugin.PrepareResult
	prepared := false
	select {
	case res = <-done:
		// Prepared while the stop was under way: it must not stop now.
		prepared = true
	case <-time.After(300 * time.Millisecond):
		// Waiting for the stop to finish.
	}
	close(gate.release)
	if !prepared {
		res = <-done
	}
	if res.Err != nil {
		t.Fatalf("old's prepare of the node's first share: %v", res.Err)
	}
	if !oldPod.daemon.Running() {
		t.Error("the share's prepare returned while the MPS daemon was not running")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := newPod.shares.WaitIdle(ctx); err != nil {
		t.Fatal(err)
	}
	if !oldPod.daemon.Running() {
		t.Fatal("the new process stopped the MPS daemon the old one's share uses")
	}
	oldPod.assertConsistent()

	// The new process serves on: it accounts the share, and stops the
	// daemon after unpreparing it.
	if err := newPod.unprepare("s")["s"]; err != nil {
		t.Fatal(err)
	}
	newPod.assertConsistent()
}

// The worker of one process waits for the state lock to stop the daemon
// (its call learnt that the other process released the node's last
// share) while that call still holds the lock; a share's prepare arriving
// then makes the worker give up the stop (the share waits for the daemon
// before the state lock, AwaitDaemon) and is prepared with the daemon
// running.
func TestStopWaitingForTheLockGivesWayToAShare(t *testing.T) {
	oldPod := newHarness(t)
	newPod := oldPod.twin()
	if err := oldPod.prepare(claimWith("s0", shareResult("gpu", "gpu-1", "s0", "4Gi", "")))["s0"].Err; err != nil {
		t.Fatal(err)
	}
	oldPod.assertConsistent()
	if err := newPod.unprepare("s0")["s0"]; err != nil {
		t.Fatal(err)
	}
	newPod.assertConsistent()

	// Old's next call (a whole card) learns that s0 is gone, so its
	// worker goes to stop the daemon and waits for the lock that call
	// holds. Hold the call until the worker waits, then let a share
	// arrive.
	var locks atomic.Int32
	oldPod.state.onLock = func() { locks.Add(1) }
	var saves atomic.Int32
	var shareDone <-chan kubeletplugin.PrepareResult
	oldPod.state.beforeSave = func() error {
		if saves.Add(1) > 1 {
			return nil
		}
		deadline := time.Now().Add(10 * time.Second)
		// The call's own lock, then the worker's.
		for locks.Load() < 2 {
			if time.Now().After(deadline) {
				t.Error("the worker did not try to take the state lock to stop the daemon")
				return nil
			}
			time.Sleep(time.Millisecond)
		}
		shareDone = oldPod.prepareAsync(claimWith("s1", shareResult("gpu", "gpu-2", "s1", "4Gi", "")))
		// Hold the lock until the share waits for the daemon.
		for !oldPod.shares.Status().Wanted {
			if time.Now().After(deadline) {
				t.Error("the share's prepare never asked for the daemon")
				return nil
			}
			time.Sleep(time.Millisecond)
		}
		return nil
	}
	if err := oldPod.prepare(claimWith("w", wholeResult("gpu", "gpu-3")))["w"].Err; err != nil {
		t.Fatal(err)
	}
	if shareDone == nil {
		t.Fatal("the share was never prepared")
	}
	select {
	case res := <-shareDone:
		if res.Err != nil {
			t.Fatalf("preparing a share while the worker waited to stop the daemon: %v", res.Err)
		}
	case <-time.After(noWaitLimit):
		t.Fatal("the share's prepare did not return")
	}
	oldPod.state.beforeSave, oldPod.state.onLock = nil, nil
	if !oldPod.daemon.Running() {
		t.Error("the share's prepare returned while the MPS daemon was not running")
	}
	oldPod.assertConsistent()
}

// The new process is shut down (or dies) while its worker stops the daemon
// under the state lock: the lock is released, and the old process's
// prepare of a share, waiting for it, goes on and starts the daemon.
func TestStopUnderTheLockEndsWithItsProcess(t *testing.T) {
	oldPod := newHarness(t)
	if err := oldPod.daemon.Ensure(context.Background()); err != nil {
		t.Fatal(err)
	}
	gate := newGatedStop() // never released
	newPod := oldPod.twinWith(func(d daemon.Daemon) daemon.Daemon { gate.Daemon = d; return gate })
	waitClosed(t, gate.entered, "the new process to stop the idle daemon")

	done := oldPod.prepareAsync(claimWith("s", shareResult("gpu", "gpu-1", "s1", "4Gi", "")))
	select {
	case res := <-done:
		t.Fatalf("old's prepare returned (%v) while the new process stopped the daemon under the lock", res.Err)
	case <-time.After(100 * time.Millisecond):
	}
	newPod.shares.Close()
	select {
	case res := <-done:
		if res.Err != nil {
			t.Fatalf("old's prepare after the new process ended: %v", res.Err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("old's prepare still waits after the new process ended")
	}
	oldPod.assertConsistent()
}
