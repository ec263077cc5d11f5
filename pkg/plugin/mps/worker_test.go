package mps

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/tangram-gpu/tangram/pkg/plugin/mps/daemon"
)

func TestManagerReconcile(t *testing.T) {
	ctx := context.Background()
	cards := []string{"GPU-a", "GPU-b", "GPU-c"}
	fake := &countingDaemon{running: true}
	modes := &daemon.RecordingComputeModeSetter{}
	// A previous process switched GPU-c and died before recording a share.
	_ = modes.SetComputeMode(ctx, "GPU-c", daemon.ComputeModeExclusiveProcess)
	m := NewManager(daemon.Layout{Root: t.TempDir()}, fake, modes, cards)
	if err := m.Acquire(ctx, "kept", cardShares("GPU-a")); err != nil {
		t.Fatal(err)
	}
	if err := m.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	waitIdle(t, m)
	got := []daemon.ComputeMode{modes.Mode("GPU-a"), modes.Mode("GPU-b"), modes.Mode("GPU-c")}
	want := []daemon.ComputeMode{daemon.ComputeModeExclusiveProcess, daemon.ComputeModeDefault, daemon.ComputeModeDefault}
	if !reflect.DeepEqual(got, want) || !fake.running {
		t.Errorf("after reconcile with a share: modes %v running %v, want %v true", got, fake.running, want)
	}
	if err := m.Release(ctx, "kept"); err != nil {
		t.Fatal(err)
	}
	waitIdle(t, m)
	fake.mu.Lock()
	fake.running = true // a daemon left by an earlier process
	fake.mu.Unlock()
	// A new process: nothing stopped yet.
	m = NewManager(daemon.Layout{Root: t.TempDir()}, fake, modes, cards)
	if err := m.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	waitIdle(t, m)
	if fake.running {
		t.Error("reconcile with no share left the daemon running")
	}
}

// unusedAwareDaemon records whether the Manager told it that no share uses
// the daemon.
type unusedAwareDaemon struct {
	countingDaemon
	calls []string
}

func (d *unusedAwareDaemon) Ensure(ctx context.Context) error {
	d.record("in use")
	return d.countingDaemon.Ensure(ctx)
}

func (d *unusedAwareDaemon) EnsureUnused(ctx context.Context) error {
	d.record("unused")
	return d.countingDaemon.Ensure(ctx)
}

// record notes a call; the worker calls while a test may read.
func (d *unusedAwareDaemon) record(call string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.calls = append(d.calls, call)
}

func TestManagerTellsDaemonWhenUnused(t *testing.T) {
	cards := []string{"GPU-a", "GPU-b"}
	for _, tc := range []struct {
		name string
		// steps: "reconcile", "+claim card" (acquire), "-claim" (release).
		steps []string
		want  []string
	}{
		{
			// Replaying the checkpoint: the first share has no holder yet
			// but the others run and may use the daemon.
			name:  "before Reconcile every share may be in use",
			steps: []string{"+c1 GPU-a", "+c2 GPU-b", "reconcile"},
			want:  []string{"in use", "in use"},
		},
		{
			name:  "after Reconcile the node's first share finds it unused",
			steps: []string{"reconcile", "+c1 GPU-a", "+c2 GPU-a", "+c3 GPU-b"},
			want:  []string{"unused", "in use", "in use"},
		},
		{
			name:  "unused again once the last share left",
			steps: []string{"reconcile", "+c1 GPU-a", "+c2 GPU-b", "-c1", "+c3 GPU-a", "-c2", "-c3", "+c4 GPU-b"},
			want:  []string{"unused", "in use", "in use", "unused"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			fake := &unusedAwareDaemon{}
			// Every share has the daemon checked, however soon after the
			// last check (Timing.Recheck), so each check's mode shows.
			m := NewManager(daemon.Layout{Root: t.TempDir()}, fake, &daemon.RecordingComputeModeSetter{}, cards,
				WithTiming(Timing{Recheck: time.Nanosecond}))
			for _, s := range tc.steps {
				var err error
				switch {
				case s == "reconcile":
					err = m.Reconcile(ctx)
				case s[0] == '+':
					claim, card, _ := strings.Cut(s[1:], " ")
					err = m.Acquire(ctx, claim, cardShares(card))
				case s[0] == '-':
					err = m.Release(ctx, s[1:])
				}
				if err != nil {
					t.Fatalf("%s: %v", s, err)
				}
				waitIdle(t, m)
			}
			if !reflect.DeepEqual(fake.calls, tc.want) {
				t.Errorf("Ensure calls %v, want %v", fake.calls, tc.want)
			}
		})
	}
}

// blockingDaemon blocks in Ensure and Stop until released.
type blockingDaemon struct {
	countingDaemon
	ensureGate, stopGate chan struct{}
}

func (d *blockingDaemon) Ensure(ctx context.Context) error {
	select {
	case <-d.ensureGate:
	case <-ctx.Done():
		return ctx.Err()
	}
	return d.countingDaemon.Ensure(ctx)
}

func (d *blockingDaemon) Stop(ctx context.Context) error {
	select {
	case <-d.stopGate:
	case <-ctx.Done():
		return ctx.Err()
	}
	return d.countingDaemon.Stop(ctx)
}

// While the daemon starts or stops, for however long, the Manager's lock
// is free: every call returns (a share with a retryable error), none waits
// for the daemon.
func TestManagerNeverWaitsForTheDaemonUnderItsLock(t *testing.T) {
	ctx := context.Background()
	fake := &blockingDaemon{ensureGate: make(chan struct{}), stopGate: make(chan struct{})}
	m := NewManager(daemon.Layout{Root: t.TempDir()}, fake, &daemon.RecordingComputeModeSetter{}, []string{"GPU-a", "GPU-b"},
		WithTiming(Timing{ReadyWait: 10 * time.Millisecond, RetryMin: time.Millisecond, RetryMax: 10 * time.Millisecond}))
	defer m.Close()
	returns := func(what string, f func()) {
		t.Helper()
		done := make(chan struct{})
		go func() { f(); close(done) }()
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			t.Fatalf("%s did not return while the daemon was blocked", what)
		}
	}
	var notReady *DaemonNotReadyError
	returns("a share while the daemon starts", func() {
		if err := m.Acquire(ctx, "c1", cardShares("GPU-a")); !errors.As(err, &notReady) || notReady.Cause != nil {
			t.Errorf("Acquire while starting: %v, want a DaemonNotReadyError without cause", err)
		}
	})
	returns("Holders, Status, Release and another share", func() {
		_ = m.Holders()
		if st := m.Status(); !st.Wanted || st.Ready {
			t.Errorf("status while starting %+v, want wanted and not ready", st)
		}
		if err := m.Release(ctx, "c0"); err != nil {
			t.Error(err)
		}
		if err := m.Acquire(ctx, "c2", cardShares("GPU-b")); !errors.As(err, &notReady) {
			t.Errorf("second Acquire while starting: %v", err)
		}
	})
	close(fake.ensureGate)
	deadline := time.Now().Add(20 * time.Second)
	for m.Acquire(ctx, "c1", cardShares("GPU-a")) != nil {
		if time.Now().After(deadline) {
			t.Fatal("share still refused after the daemon started")
		}
		time.Sleep(time.Millisecond)
	}
	returns("the last share's release while the daemon stops", func() {
		if err := m.Release(ctx, "c1"); err != nil {
			t.Error(err)
		}
	})
	// Once the worker has begun stopping the daemon, shares must not count
	// on it.
	for m.Status().Ready {
		if time.Now().After(deadline) {
			t.Fatal("the worker never began to stop the daemon")
		}
		time.Sleep(time.Millisecond)
	}
	returns("a share while the daemon stops", func() {
		if err := m.Acquire(ctx, "c3", cardShares("GPU-a")); !errors.As(err, &notReady) {
			t.Errorf("Acquire while stopping: %v, want a DaemonNotReadyError", err)
		}
	})
	close(fake.stopGate)
	// The refused share keeps the daemon wanted: it is started again.
	waitIdle(t, m)
	if st := m.Status(); !st.Wanted || !st.Ready {
		t.Errorf("status after the stop %+v, want the daemon running again for the refused share", st)
	}
}

// Another plugin process on the node (a rolling update) starts or stops
// the daemon behind this Manager's back; after Resync the worker brings it
// back to what this Manager's shares want.
func TestManagerResync(t *testing.T) {
	ctx := context.Background()
	cards := []string{"GPU-a"}
	fake := &countingDaemon{}
	m := NewManager(daemon.Layout{Root: t.TempDir()}, fake, &daemon.RecordingComputeModeSetter{}, cards)
	t.Cleanup(m.Close)
	if err := m.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	waitIdle(t, m)
	setRunning := func(running bool) {
		fake.mu.Lock()
		fake.running = running
		fake.mu.Unlock()
	}
	isRunning := func() bool {
		fake.mu.Lock()
		defer fake.mu.Unlock()
		return fake.running
	}

	// No share here, yet the other process started the daemon.
	setRunning(true)
	m.Resync(ctx)
	waitIdle(t, m)
	if isRunning() {
		t.Error("after Resync with no share the daemon still runs")
	}

	// A share here, and the other process stopped the daemon.
	if err := m.Acquire(ctx, "share", cardShares(cards...)); err != nil {
		t.Fatal(err)
	}
	waitIdle(t, m)
	setRunning(false)
	m.Resync(ctx)
	waitIdle(t, m)
	if !isRunning() {
		t.Error("after Resync with a share the daemon is not running")
	}
}

// TestRecheckOfAReadyDaemon: a share that finds the daemon ready has the
// worker check it again once the last successful check is Timing.Recheck
// old: a burst of shares inside that window gets one check after it (so a
// daemon that died meanwhile is found without another share), not one
// beside each share; the shares never wait for it.
func TestRecheckOfAReadyDaemon(t *testing.T) {
	for _, tc := range []struct {
		name    string
		recheck time.Duration
		// minNow and maxNow bound the checks right after the first share
		// and three more on the ready daemon, each a moment after the
		// last (the first share's own prepare may check twice); later
		// the checks after the burst, once every due one has run.
		minNow, maxNow, later int
	}{
		{name: "checked a moment ago: no new check yet", recheck: time.Hour, minNow: 1, maxNow: 2, later: -1},
		{name: "a burst inside the window: one check after it", recheck: 300 * time.Millisecond, minNow: 1, maxNow: 2, later: +1},
		{name: "every share once the last check is older", recheck: time.Nanosecond, minNow: 4, maxNow: 8, later: 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			fake := &unusedAwareDaemon{}
			m := NewManager(daemon.Layout{Root: t.TempDir()}, fake, &daemon.RecordingComputeModeSetter{}, []string{"GPU-a"},
				WithTiming(Timing{Recheck: tc.recheck}))
			t.Cleanup(m.Close)
			for i := range 4 {
				claim := fmt.Sprintf("c%d", i)
				done, err := m.AwaitDaemon(ctx)
				if err != nil {
					t.Fatal(err)
				}
				err = m.Acquire(ctx, claim, cardShares("GPU-a"))
				done()
				if err != nil {
					t.Fatal(err)
				}
				waitIdle(t, m)
			}
			calls := func() int {
				fake.mu.Lock()
				defer fake.mu.Unlock()
				return len(fake.calls)
			}
			now := calls()
			if now < tc.minNow || now > tc.maxNow {
				t.Fatalf("%d Ensure calls right after the shares, want %d to %d", now, tc.minNow, tc.maxNow)
			}
			if tc.later < 0 {
				return
			}
			// The deferred check, if any, runs within a few windows; none
			// follows it without another share.
			deadline := time.Now().Add(10 * time.Second)
			for calls() < now+tc.later && time.Now().Before(deadline) {
				time.Sleep(10 * time.Millisecond)
			}
			time.Sleep(3 * tc.recheck)
			if got := calls(); got != now+tc.later {
				t.Errorf("%d Ensure calls after the burst, want %d", got, now+tc.later)
			}
		})
	}
}
