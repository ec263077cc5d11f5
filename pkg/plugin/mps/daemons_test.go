package mps

// The Manager over the daemons of package daemon.

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tangram-gpu/tangram/pkg/plugin/mps/daemon"
	"github.com/tangram-gpu/tangram/pkg/plugin/mps/mpstest/controlbin"
)

func TestMain(m *testing.M) { controlbin.Main(m) }

func TestManagerWithFakeBinary(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	d := daemon.NewProcessDaemon(daemon.ProcessDaemonConfig{
		Layout:         daemon.Layout{Root: root},
		Binary:         controlbin.FakeBinary,
		VisibleDevices: []string{"GPU-a", "GPU-b"},
		MinBackoff:     10 * time.Millisecond,
		MaxBackoff:     50 * time.Millisecond,
		ProbeInterval:  20 * time.Millisecond,
	})
	modes := &daemon.RecordingComputeModeSetter{}
	m := NewManager(daemon.Layout{Root: root}, d, modes, []string{"GPU-a", "GPU-b"})
	if err := m.Acquire(ctx, "c1", cardShares("GPU-a", "GPU-b")); err != nil {
		t.Fatal(err)
	}
	if err := m.Acquire(ctx, "c2", cardShares("GPU-b")); err != nil {
		t.Fatal(err)
	}
	if d.Starts() != 1 {
		t.Errorf("Starts() = %d, want 1", d.Starts())
	}
	for _, c := range []string{"c1", "c2"} {
		if err := m.Release(ctx, c); err != nil {
			t.Fatal(err)
		}
	}
	waitIdle(t, m)
	if got, want := strings.Join(controlbin.FakeLog(t, daemon.Layout{Root: root}.PipeDir()), " "), "start GPU-a,GPU-b ; quit ;"; got != want {
		t.Errorf("fake log %q, want %q", got, want)
	}
	if modes.Mode("GPU-a") != daemon.ComputeModeDefault || modes.Mode("GPU-b") != daemon.ComputeModeDefault {
		t.Errorf("modes after release: %s %s", modes.Mode("GPU-a"), modes.Mode("GPU-b"))
	}
}

func TestSimulatedDaemon(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	sim := &daemon.SimulatedDaemon{Layout: daemon.Layout{Root: root}}
	m := NewManager(daemon.Layout{Root: root}, sim, &daemon.RecordingComputeModeSetter{}, []string{"GPU-a"})
	if err := m.Acquire(ctx, "c1", cardShares("GPU-a")); err != nil {
		t.Fatal(err)
	}
	if !sim.Running() || sim.Starts() != 1 {
		t.Errorf("simulated daemon running %v starts %d, want true 1", sim.Running(), sim.Starts())
	}
	if _, err := os.Stat(filepath.Join(root, "pipe")); err != nil {
		t.Errorf("pipe directory not created: %v", err)
	}
	if err := m.Release(ctx, "c1"); err != nil {
		t.Fatal(err)
	}
	waitIdle(t, m)
	if sim.Running() {
		t.Error("simulated daemon still running after the last share")
	}
}
