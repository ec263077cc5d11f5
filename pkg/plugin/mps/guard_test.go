package mps

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tangram-gpu/tangram/pkg/plugin/mps/daemon"
)

// fakeGuard stands in for the driver's StopGuard: what the node's state
// would say about shares, with no lock to wait for.
type fakeGuard struct {
	mu       sync.Mutex
	noShares bool
	err      error
}

func (g *fakeGuard) LockForStop(context.Context) (func(), bool, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.err != nil {
		return nil, false, g.err
	}
	return func() {}, g.noShares, nil
}

func (d *countingDaemon) isRunning() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.running
}

// With a guard the worker stops an idle daemon only when the guard says
// that no plugin process of the node records a share; when it cannot tell,
// the daemon stays and the failure is reported.
func TestManagerStopsOnlyWhatTheGuardAllows(t *testing.T) {
	for _, tc := range []struct {
		name        string
		guard       *fakeGuard
		wantRunning bool
		wantErr     string
	}{
		{name: "no share anywhere", guard: &fakeGuard{noShares: true}},
		{name: "another process records a share", guard: &fakeGuard{noShares: false}, wantRunning: true},
		{name: "the checkpoint cannot be read", guard: &fakeGuard{err: errors.New("checkpoint unreadable")}, wantRunning: true,
			wantErr: "not stopping the idle MPS daemon: checkpoint unreadable"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			// Left running by an earlier process.
			fake := &countingDaemon{running: true}
			m := NewManager(daemon.Layout{Root: t.TempDir()}, fake, &daemon.RecordingComputeModeSetter{}, []string{"GPU-a"},
				WithTiming(Timing{RetryMin: 10 * time.Millisecond, RetryMax: 10 * time.Millisecond}))
			t.Cleanup(m.Close)
			m.GuardStops(tc.guard)
			if err := m.Reconcile(ctx); err != nil {
				t.Fatal(err)
			}
			if tc.wantErr == "" {
				waitIdle(t, m)
			} else {
				deadline := time.Now().Add(10 * time.Second)
				for m.Status().Failures == 0 {
					if time.Now().After(deadline) {
						t.Fatal("no failure reported")
					}
					time.Sleep(time.Millisecond)
				}
			}
			if got := fake.isRunning(); got != tc.wantRunning {
				t.Errorf("daemon running %v, want %v", got, tc.wantRunning)
			}
			if got := m.Status().LastError; !strings.Contains(got, tc.wantErr) || (tc.wantErr == "") != (got == "") {
				t.Errorf("last error %q, want %q", got, tc.wantErr)
			}
		})
	}
}

// gatedEnsure holds Ensure while its gate is closed (hold) and lets it
// through once opened (open).
type gatedEnsure struct {
	*countingDaemon
	gateMu sync.Mutex
	gate   chan struct{}
}

func (d *gatedEnsure) hold() {
	d.gateMu.Lock()
	defer d.gateMu.Unlock()
	d.gate = make(chan struct{})
}

func (d *gatedEnsure) open() {
	d.gateMu.Lock()
	defer d.gateMu.Unlock()
	close(d.gate)
}

func (d *gatedEnsure) Ensure(ctx context.Context) error {
	d.gateMu.Lock()
	gate := d.gate
	d.gateMu.Unlock()
	select {
	case <-gate:
	case <-ctx.Done():
		return ctx.Err()
	}
	return d.countingDaemon.Ensure(ctx)
}

// This process saw the daemon running while no share used it (it was kept
// for a refused share's retry); then another plugin process, seeing no
// share recorded, stopped it. The node's first share must not count on
// what this process saw: its Acquire waits for the worker to look again,
// and is refused as still starting while the daemon is not back.
func TestManagerFirstShareDoesNotTrustAnOldReady(t *testing.T) {
	ctx := context.Background()
	fake := &gatedEnsure{countingDaemon: &countingDaemon{}}
	fake.hold()
	m := NewManager(daemon.Layout{Root: t.TempDir()}, fake, &daemon.RecordingComputeModeSetter{}, []string{"GPU-a", "GPU-b"},
		WithTiming(Timing{ReadyWait: 50 * time.Millisecond, RetryMin: 10 * time.Millisecond}))
	t.Cleanup(m.Close)
	m.GuardStops(&fakeGuard{noShares: true})
	if err := m.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	var notReady *DaemonNotReadyError
	if err := m.Acquire(ctx, "refused", cardShares("GPU-a")); !errors.As(err, &notReady) {
		t.Fatalf("first Acquire: %v, want a DaemonNotReadyError", err)
	}
	fake.open()
	waitIdle(t, m)
	if st := m.Status(); !st.Ready || st.SharedCards != 0 {
		t.Fatalf("status %+v, want the daemon ready and kept for the refused share's retry", st)
	}

	// The other process stops it, and starting it again takes a while.
	if err := fake.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	fake.hold()
	err := m.Acquire(ctx, "first", cardShares("GPU-b"))
	if err == nil && !fake.isRunning() {
		t.Fatal("the node's first share was acquired while the daemon was stopped")
	}
	if !errors.As(err, &notReady) {
		t.Fatalf("Acquire while the daemon starts again: %v, want a DaemonNotReadyError", err)
	}
	fake.open()
	waitIdle(t, m)
	if err := m.Acquire(ctx, "first", cardShares("GPU-b")); err != nil {
		t.Fatalf("retried Acquire: %v", err)
	}
	if !fake.isRunning() {
		t.Fatal("the retried first share was acquired while the daemon was stopped")
	}
}
