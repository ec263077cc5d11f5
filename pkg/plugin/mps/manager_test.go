package mps

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/tangram-gpu/tangram/pkg/plugin/mps/daemon"
)

// countingDaemon records Ensure/Stop calls and whether the daemon "runs".
type countingDaemon struct {
	mu               sync.Mutex
	running          bool
	starts, stops    int
	ensureErr        error
	ensureCalls      int
	stopCallsWhenOff int
}

func (d *countingDaemon) Ensure(context.Context) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.ensureCalls++
	if d.ensureErr != nil {
		return d.ensureErr
	}
	if !d.running {
		d.running = true
		d.starts++
	}
	return nil
}

func (d *countingDaemon) Stop(context.Context) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.running {
		d.stops++
	} else {
		d.stopCallsWhenOff++
	}
	d.running = false
	return nil
}

func (d *countingDaemon) Close() {}

type step struct {
	acquire string // claim to acquire (with cards) or ""
	release string // claim to release or ""
	cards   []string
	wantErr string
}

func TestManagerAccounting(t *testing.T) {
	cards := []string{"GPU-a", "GPU-b", "GPU-c"}
	tests := []struct {
		name        string
		steps       []step
		wantStarts  int
		wantStops   int
		wantRunning bool
		wantCalls   []daemon.ComputeModeCall
		wantHolders map[string][]string
	}{
		{
			name:        "first share starts the daemon and sets exclusive process",
			steps:       []step{{acquire: "c1", cards: []string{"GPU-a"}}},
			wantStarts:  1,
			wantRunning: true,
			wantCalls:   []daemon.ComputeModeCall{{UUID: "GPU-a", Mode: daemon.ComputeModeExclusiveProcess}},
			wantHolders: map[string][]string{"GPU-a": {"c1"}},
		},
		{
			name: "second share on the same card neither restarts nor switches again",
			steps: []step{
				{acquire: "c1", cards: []string{"GPU-a"}},
				{acquire: "c2", cards: []string{"GPU-a"}},
			},
			wantStarts:  1,
			wantRunning: true,
			wantCalls:   []daemon.ComputeModeCall{{UUID: "GPU-a", Mode: daemon.ComputeModeExclusiveProcess}},
			wantHolders: map[string][]string{"GPU-a": {"c1", "c2"}},
		},
		{
			name: "acquire is idempotent",
			steps: []step{
				{acquire: "c1", cards: []string{"GPU-a", "GPU-a"}},
				{acquire: "c1", cards: []string{"GPU-a"}},
			},
			wantStarts:  1,
			wantRunning: true,
			wantCalls:   []daemon.ComputeModeCall{{UUID: "GPU-a", Mode: daemon.ComputeModeExclusiveProcess}},
			wantHolders: map[string][]string{"GPU-a": {"c1"}},
		},
		{
			name: "last share on a card restores default, daemon stays for other cards",
			steps: []step{
				{acquire: "c1", cards: []string{"GPU-a"}},
				{acquire: "c2", cards: []string{"GPU-b"}},
				{release: "c1"},
			},
			wantStarts:  1,
			wantRunning: true,
			wantCalls: []daemon.ComputeModeCall{
				{UUID: "GPU-a", Mode: daemon.ComputeModeExclusiveProcess},
				{UUID: "GPU-b", Mode: daemon.ComputeModeExclusiveProcess},
				{UUID: "GPU-a", Mode: daemon.ComputeModeDefault},
			},
			wantHolders: map[string][]string{"GPU-b": {"c2"}},
		},
		{
			name: "last share on the node stops the daemon",
			steps: []step{
				{acquire: "c1", cards: []string{"GPU-a", "GPU-b"}},
				{acquire: "c2", cards: []string{"GPU-b"}},
				{release: "c2"},
				{release: "c1"},
			},
			wantStarts: 1,
			wantStops:  1,
			wantCalls: []daemon.ComputeModeCall{
				{UUID: "GPU-a", Mode: daemon.ComputeModeExclusiveProcess},
				{UUID: "GPU-b", Mode: daemon.ComputeModeExclusiveProcess},
				{UUID: "GPU-a", Mode: daemon.ComputeModeDefault},
				{UUID: "GPU-b", Mode: daemon.ComputeModeDefault},
			},
			wantHolders: map[string][]string{},
		},
		{
			name: "daemon starts again after it was stopped",
			steps: []step{
				{acquire: "c1", cards: []string{"GPU-a"}},
				{release: "c1"},
				{acquire: "c2", cards: []string{"GPU-c"}},
			},
			wantStarts:  2,
			wantStops:   1,
			wantRunning: true,
			wantCalls: []daemon.ComputeModeCall{
				{UUID: "GPU-a", Mode: daemon.ComputeModeExclusiveProcess},
				{UUID: "GPU-a", Mode: daemon.ComputeModeDefault},
				{UUID: "GPU-c", Mode: daemon.ComputeModeExclusiveProcess},
			},
			wantHolders: map[string][]string{"GPU-c": {"c2"}},
		},
		{
			name:        "unknown claim release succeeds",
			steps:       []step{{release: "nobody"}},
			wantHolders: map[string][]string{},
		},
		{
			name: "a card that is not shareable is refused and nothing is recorded",
			steps: []step{
				{acquire: "c1", cards: []string{"GPU-a", "GPU-z"}, wantErr: "share of claim c1 on card GPU-z: card is not shareable on this node; only cards published as shareable can hold shares"},
			},
			wantHolders: map[string][]string{},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			fake := &countingDaemon{}
			modes := &daemon.RecordingComputeModeSetter{}
			m := NewManager(daemon.Layout{Root: t.TempDir()}, fake, modes, cards)
			defer m.Close()
			for i, s := range tt.steps {
				var err error
				if s.acquire != "" {
					err = m.Acquire(ctx, s.acquire, cardShares(s.cards...))
				} else {
					err = m.Release(ctx, s.release)
				}
				if gotErr := errString(err); gotErr != s.wantErr {
					t.Fatalf("step %d: error %q, want %q", i, gotErr, s.wantErr)
				}
				waitIdle(t, m)
			}
			if fake.starts != tt.wantStarts || fake.stops != tt.wantStops || fake.running != tt.wantRunning {
				t.Errorf("daemon starts/stops/running = %d/%d/%v, want %d/%d/%v",
					fake.starts, fake.stops, fake.running, tt.wantStarts, tt.wantStops, tt.wantRunning)
			}
			if got := modes.Calls(); !reflect.DeepEqual(got, tt.wantCalls) {
				t.Errorf("compute mode calls = %v, want %v", got, tt.wantCalls)
			}
			if got := m.Holders(); !reflect.DeepEqual(got, tt.wantHolders) {
				t.Errorf("holders = %v, want %v", got, tt.wantHolders)
			}
		})
	}
}

func TestManagerFailuresLeaveNothingHalfDone(t *testing.T) {
	ctx := context.Background()
	cards := []string{"GPU-a", "GPU-b"}

	t.Run("compute mode failure on the second card restores the first", func(t *testing.T) {
		modes := &daemon.RecordingComputeModeSetter{Fail: func(uuid string, mode daemon.ComputeMode) error {
			if uuid == "GPU-b" && mode == daemon.ComputeModeExclusiveProcess {
				return errors.New("insufficient permissions")
			}
			return nil
		}}
		fake := &countingDaemon{}
		m := NewManager(daemon.Layout{Root: t.TempDir()}, fake, modes, cards)
		err := m.Acquire(ctx, "c1", cardShares("GPU-a", "GPU-b"))
		if want := "preparing card GPU-b for MPS shares: insufficient permissions"; errString(err) != want {
			t.Fatalf("error %q, want %q", errString(err), want)
		}
		if modes.Mode("GPU-a") != daemon.ComputeModeDefault || fake.starts != 0 || len(m.Holders()) != 0 {
			t.Errorf("after failure: GPU-a mode %s, daemon starts %d, holders %v; want Default, 0, none",
				modes.Mode("GPU-a"), fake.starts, m.Holders())
		}
	})

	t.Run("daemon failure restores compute modes", func(t *testing.T) {
		modes := &daemon.RecordingComputeModeSetter{}
		fake := &countingDaemon{ensureErr: errors.New("binary not found")}
		m := NewManager(daemon.Layout{Root: t.TempDir()}, fake, modes, cards)
		defer m.Close()
		err := m.Acquire(ctx, "c1", cardShares("GPU-a"))
		if want := "starting the node's MPS daemon for claim c1: binary not found; retrying in the background, the kubelet retries this prepare"; errString(err) != want {
			t.Fatalf("error %q, want %q", errString(err), want)
		}
		var notReady *DaemonNotReadyError
		if !errors.As(err, &notReady) {
			t.Errorf("error %T is not a *DaemonNotReadyError", err)
		}
		if modes.Mode("GPU-a") != daemon.ComputeModeDefault || len(m.Holders()) != 0 {
			t.Errorf("after failure: GPU-a mode %s, holders %v", modes.Mode("GPU-a"), m.Holders())
		}
	})

	t.Run("failed restore keeps the share so a retried release tries again", func(t *testing.T) {
		fail := true
		modes := &daemon.RecordingComputeModeSetter{Fail: func(uuid string, mode daemon.ComputeMode) error {
			if fail && mode == daemon.ComputeModeDefault {
				return errors.New("GPU is busy")
			}
			return nil
		}}
		fake := &countingDaemon{}
		m := NewManager(daemon.Layout{Root: t.TempDir()}, fake, modes, cards)
		if err := m.Acquire(ctx, "c1", cardShares("GPU-a")); err != nil {
			t.Fatal(err)
		}
		err := m.Release(ctx, "c1")
		if want := "releasing MPS shares of claim c1: restoring compute mode of card GPU-a: GPU is busy"; errString(err) != want {
			t.Fatalf("error %q, want %q", errString(err), want)
		}
		if !reflect.DeepEqual(m.Holders(), map[string][]string{"GPU-a": {"c1"}}) || !fake.running {
			t.Fatalf("after failed release: holders %v, daemon running %v", m.Holders(), fake.running)
		}
		fail = false
		if err := m.Release(ctx, "c1"); err != nil {
			t.Fatal(err)
		}
		waitIdle(t, m)
		if modes.Mode("GPU-a") != daemon.ComputeModeDefault || fake.running || len(m.Holders()) != 0 {
			t.Errorf("after retry: mode %s, daemon running %v, holders %v", modes.Mode("GPU-a"), fake.running, m.Holders())
		}
	})
}

func TestManagerConcurrentShares(t *testing.T) {
	ctx := context.Background()
	cards := []string{"GPU-a", "GPU-b"}
	fake := &countingDaemon{}
	modes := &daemon.RecordingComputeModeSetter{}
	m := NewManager(daemon.Layout{Root: t.TempDir()}, fake, modes, cards)
	const claims = 40
	var wg sync.WaitGroup
	errs := make(chan error, 2*claims)
	for i := range claims {
		wg.Go(func() {
			errs <- m.Acquire(ctx, fmt.Sprintf("c%d", i), cardShares(cards[i%2]))
		})
	}
	wg.Wait()
	if fake.starts != 1 || len(modes.Calls()) != 2 {
		t.Fatalf("after %d concurrent acquires: daemon starts %d, compute mode calls %v; want 1 start, 2 calls", claims, fake.starts, modes.Calls())
	}
	for i := range claims {
		wg.Go(func() { errs <- m.Release(ctx, fmt.Sprintf("c%d", i)) })
	}
	wg.Wait()
	waitIdle(t, m)
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if fake.running || fake.stops != 1 || modes.Mode("GPU-a") != daemon.ComputeModeDefault || modes.Mode("GPU-b") != daemon.ComputeModeDefault {
		t.Errorf("after releases: running %v stops %d modes %s/%s", fake.running, fake.stops, modes.Mode("GPU-a"), modes.Mode("GPU-b"))
	}
}

func TestClientConfigMountsPipeAndShm(t *testing.T) {
	m := NewManager(daemon.Layout{Root: "/run/tangram/mps"}, &countingDaemon{}, &daemon.RecordingComputeModeSetter{}, nil)
	// Classic mode: the daemon's pipe directory, read-only (a client only
	// connects to its sockets), and the claim's own /dev/shm, not the
	// daemon's: a classic client worked with a /dev/shm of its own on a GPU
	// (docs/gpu-reports/2026-11-27-h200-r580-experiments.md).
	want := ClientConfig{
		PipeDir:      "/run/tangram/mps/pipe",
		PipeReadOnly: true,
		Mounts: []Mount{
			{HostPath: "/run/tangram/mps/pipe", ContainerPath: "/run/tangram/mps/pipe", ReadOnly: true},
			{HostPath: "/run/tangram/mps/claims/c1/shm", ContainerPath: "/dev/shm"},
		},
	}
	if got := m.ClientConfig("c1"); !reflect.DeepEqual(got, want) {
		t.Errorf("ClientConfig() = %+v, want %+v", got, want)
	}
}

// waitIdle waits until the Manager's worker is done with the daemon.
func waitIdle(t *testing.T, m *Manager) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := m.WaitIdle(ctx); err != nil {
		t.Fatal(err)
	}
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// cardShares is a share on each card, without limits.
func cardShares(cards ...string) []Share {
	out := make([]Share, len(cards))
	for i, c := range cards {
		out[i] = Share{Card: c}
	}
	return out
}
