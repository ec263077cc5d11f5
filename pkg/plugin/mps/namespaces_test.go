package mps

import (
	"context"
	"errors"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tangram-gpu/tangram/pkg/plugin/mps/control"
	"github.com/tangram-gpu/tangram/pkg/plugin/mps/daemon"
	"github.com/tangram-gpu/tangram/pkg/plugin/mps/mpstest"
	"github.com/tangram-gpu/tangram/pkg/plugin/mps/mpsv3"
	"github.com/tangram-gpu/tangram/pkg/plugin/mps/standin"
)

// inProcessV3 is the stand-in v3 daemon run in the test process: the
// Manager tests start and adopt it many times, which the separate program
// (TestV3NamespacesAgainstStandIn) makes slow under the race detector.
type inProcessV3 struct {
	layout daemon.Layout
	mu     sync.Mutex
	done   chan error
}

func (d *inProcessV3) Ensure(ctx context.Context) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.done != nil {
		return nil // started by us and supervised, as ProcessDaemon does
	}
	if err := standin.Probe(ctx, d.layout.PipeDir()); err == nil {
		return nil // running (adopted)
	}
	if err := d.layout.Create(); err != nil {
		return err
	}
	done := make(chan error, 1)
	d.done = done
	go func() {
		done <- standin.RunDaemon(context.Background(), standin.Config{PipeDir: d.layout.PipeDir(), LogDir: d.layout.LogDir(), Protocol: 3, MultiUser: true})
	}()
	for range 500 {
		if err := standin.Probe(ctx, d.layout.PipeDir()); err == nil {
			return nil
		}
		time.Sleep(10 * time.Millisecond)
	}
	return errors.New("the stand-in did not answer")
}

func (d *inProcessV3) Stop(ctx context.Context) error {
	d.mu.Lock()
	d.done = nil
	d.mu.Unlock()
	quit := control.Client{Runner: standin.Runner{}, Binary: control.BinaryName, PipeDir: d.layout.PipeDir(), Protocol: 3}
	if err := quit.Quit(ctx); err != nil && !strings.Contains(err.Error(), "cannot find MPS control daemon") {
		return err
	}
	return nil
}

func (d *inProcessV3) Close() {}

func (d *inProcessV3) Control(ctx context.Context, command []string) (string, error) {
	return standin.Control(d.layout.PipeDir())(ctx, command)
}

func newInProcessV3(t *testing.T, root string) *inProcessV3 {
	d := &inProcessV3{layout: daemon.Layout{Root: root}}
	t.Cleanup(func() { _ = d.Stop(context.Background()) })
	return d
}

type controlDaemon interface {
	daemon.Daemon
	Control(ctx context.Context, command []string) (string, error)
}

func newV3Manager(t *testing.T, root string, d *inProcessV3, mounter daemon.ShmMounter) *Manager {
	t.Helper()
	cards := []string{"GPU-a", "GPU-b"}
	layout := daemon.Layout{Root: root}
	namespaces := mpsv3.NewNamespaces(d.Control, cards)
	namespaces.PipeDir = layout.PipeDir()
	m := NewManager(layout, d, &daemon.RecordingComputeModeSetter{}, cards,
		WithTiming(Timing{ReadyWait: 5 * time.Second, RetryMin: 10 * time.Millisecond, RetryMax: 50 * time.Millisecond}),
		WithV3(namespaces, daemon.ClaimDirs{Layout: layout, Mounter: mounter, ShmSizeBytes: 64 << 20}))
	t.Cleanup(m.Close)
	return m
}

func namespacesOf(t *testing.T, d controlDaemon) map[string]mpsv3.NamespaceSpec {
	t.Helper()
	v3 := mpsv3.NewNamespaces(d.Control, nil)
	have, err := v3.List(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for name, spec := range have {
		spec.PipeDirectory = "" // as the plugin mounts it: checked at Ensure
		have[name] = spec
	}
	return have
}

// TestManagerV3 prepares and releases shares through the Manager against
// the stand-in: one server, a namespace per claim with its limits, a
// /dev/shm and pipe directory per claim, all gone at release.
func TestManagerV3(t *testing.T) {
	const gib = 1 << 30
	root := mpstest.ShortRoot(t)
	ctx := context.Background()
	d := newInProcessV3(t, root)
	mounter := mpstest.NewRecordingMounter()
	m := newV3Manager(t, root, d, mounter)
	layout := daemon.Layout{Root: root}

	claims := map[string][]Share{
		"c1": {{Card: "GPU-a", MemoryBytes: 20 * gib, ThreadPercent: 30}},
		"c2": {{Card: "GPU-a", MemoryBytes: 20 * gib, ThreadPercent: 20}},
		"c3": {{Card: "GPU-a", MemoryBytes: 20 * gib}, {Card: "GPU-b", MemoryBytes: 10 * gib, ThreadPercent: 50}},
	}
	for _, c := range slices.Sorted(maps.Keys(claims)) {
		if err := m.Acquire(ctx, c, claims[c]); err != nil {
			t.Fatalf("Acquire %s: %v", c, err)
		}
	}
	// Acquiring again changes nothing.
	if err := m.Acquire(ctx, "c1", claims["c1"]); err != nil {
		t.Fatal(err)
	}
	// As the daemon lists them: sizes in the largest exact unit.
	want := map[string]mpsv3.NamespaceSpec{
		"tangram_c1": {Name: "tangram_c1", ActiveThreadPercentage: 30, PinnedMemoryLimit: "20G"},
		"tangram_c2": {Name: "tangram_c2", ActiveThreadPercentage: 20, PinnedMemoryLimit: "20G"},
		"tangram_c3": {Name: "tangram_c3", ActiveThreadPercentage: 50, PinnedMemoryLimit: "20G"},
	}
	if got := namespacesOf(t, d); !reflect.DeepEqual(got, want) {
		t.Errorf("namespaces %+v, want %+v", got, want)
	}
	cfg := m.ClientConfig("c1")
	wantCfg := ClientConfig{
		PipeDir: filepath.Join(root, "pipe", "tangram", "tangram_c1"),
		Mounts: []Mount{
			{HostPath: filepath.Join(root, "pipe", "tangram", "tangram_c1"), ContainerPath: filepath.Join(root, "pipe", "tangram", "tangram_c1")},
			{HostPath: filepath.Join(root, "claims", "c1", "shm"), ContainerPath: "/dev/shm"},
		},
	}
	if !reflect.DeepEqual(cfg, wantCfg) {
		t.Errorf("ClientConfig(c1) = %+v, want %+v", cfg, wantCfg)
	}
	for _, c := range []string{"c1", "c2", "c3"} {
		fi, err := os.Stat(layout.ClaimShmDir(c))
		if err != nil || fi.Mode()&os.ModePerm != 0o777 || fi.Mode()&os.ModeSticky == 0 {
			t.Errorf("/dev/shm of %s: %v, %v; want a sticky world-writable directory", c, fi, err)
		}
		if mounter.Bounds[layout.ClaimShmDir(c)] != 64<<20 {
			t.Errorf("/dev/shm of %s is not bounded to 64 MiB: %v", c, mounter.Bounds)
		}
		if _, err := os.Stat(NamespacePipeDir(layout, "tangram", c)); err != nil {
			t.Errorf("the namespace pipe directory of %s: %v", c, err)
		}
	}

	if err := m.Release(ctx, "c2"); err != nil {
		t.Fatal(err)
	}
	delete(want, "tangram_c2")
	if got := namespacesOf(t, d); !reflect.DeepEqual(got, want) {
		t.Errorf("after releasing c2: namespaces %+v, want %+v", got, want)
	}
	if _, err := os.Stat(filepath.Join(root, "claims", "c2")); !os.IsNotExist(err) {
		t.Errorf("c2's directory is still there: %v", err)
	}
	if _, ok := mounter.Bounds[layout.ClaimShmDir("c2")]; ok {
		t.Error("c2's /dev/shm is still mounted")
	}
	if err := m.Release(ctx, "c2"); err != nil {
		t.Errorf("releasing again: %v", err)
	}
	if err := m.Release(ctx, "c1"); err != nil {
		t.Fatal(err)
	}
	delete(want, "tangram_c1")
	if got := namespacesOf(t, d); !reflect.DeepEqual(got, want) {
		t.Errorf("after releasing c1: namespaces %+v, want %+v", got, want)
	}
	// The last share gone, the worker stops the daemon: its log tells.
	if err := m.Release(ctx, "c3"); err != nil {
		t.Fatal(err)
	}
	logged, err := standin.Commands(layout.LogDir())
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(logged, "namespace delete tangram_c3 --server=tangram") {
		t.Errorf("the last claim's namespace was not deleted:\n%s", strings.Join(logged, "\n"))
	}
	var creates int
	for _, l := range logged {
		if strings.HasPrefix(l, "server create") {
			creates++
		}
	}
	if creates != 1 {
		t.Errorf("%d server creates, want one server for the node:\n%s", creates, strings.Join(logged, "\n"))
	}
}

// TestManagerV3Failures: a bound that cannot be set or a server that is
// not running fails the share with nothing left behind; the server case
// is retryable.
func TestManagerV3Failures(t *testing.T) {
	ctx := context.Background()
	t.Run("shm bound fails", func(t *testing.T) {
		root := mpstest.ShortRoot(t)
		d := newInProcessV3(t, root)
		m := newV3Manager(t, root, d, &mpstest.RecordingMounter{Fail: errors.New("permission denied")})
		err := m.Acquire(ctx, "c1", []Share{{Card: "GPU-a", MemoryBytes: 1 << 30}})
		if err == nil || !strings.Contains(err.Error(), "bounding the /dev/shm of claim c1: permission denied") {
			t.Errorf("Acquire: %v", err)
		}
		if len(m.Holders()) != 0 {
			t.Errorf("holders after a failed share: %v", m.Holders())
		}
		if _, err := os.Stat(filepath.Join(root, "claims", "c1")); !os.IsNotExist(err) {
			t.Errorf("the claim's directory is left: %v", err)
		}
	})
	t.Run("server not running", func(t *testing.T) {
		root := mpstest.ShortRoot(t)
		d := newInProcessV3(t, root)
		// A control daemon that lists the server as starting.
		ctl := func(ctx context.Context, cmd []string) (string, error) {
			if slices.Equal(cmd, []string{"server", "list", "--format=csv"}) {
				return "name,pid,status\ntangram,0,Starting\n", nil
			}
			return d.Control(ctx, cmd)
		}
		layout := daemon.Layout{Root: root}
		m := NewManager(layout, d, &daemon.RecordingComputeModeSetter{}, []string{"GPU-a"},
			WithTiming(Timing{ReadyWait: 5 * time.Second, RetryMin: 10 * time.Millisecond, RetryMax: 50 * time.Millisecond}),
			WithV3(mpsv3.NewNamespaces(ctl, []string{"GPU-a"}), daemon.ClaimDirs{Layout: layout}))
		t.Cleanup(m.Close)
		err := m.Acquire(ctx, "c1", []Share{{Card: "GPU-a", MemoryBytes: 1 << 30}})
		var notReady *DaemonNotReadyError
		if !errors.As(err, &notReady) || !strings.Contains(err.Error(), `MPS v3 server "tangram" is Starting, not Ready`) {
			t.Errorf("Acquire: %v, want a retryable error naming the server's state", err)
		}
		if len(m.Holders()) != 0 {
			t.Errorf("holders after a failed share: %v", m.Holders())
		}
		// The server was never created: no namespace anywhere.
		out, err := d.Control(ctx, []string{"namespace", "list", "--format=csv"})
		// A header and no row.
		if rows := strings.Split(strings.TrimSpace(out), "\n"); err != nil || len(rows) != 1 || !strings.HasPrefix(rows[0], "name,") {
			t.Errorf("namespaces after a failed share: %q (%v), want the CSV header alone", out, err)
		}
	})
}

// TestManagerV3Restart: a new plugin process adopts the running daemon,
// recreates the namespace of a prepared claim that is missing and deletes
// those of claims no longer prepared. It leaves the claims' /dev/shm
// directories alone: a claim without a share (a whole card) has one too,
// and the driver sweeps those of claims it holds no record of
// (pkg/plugin TestRecoverSweepsClaimDirs).
func TestManagerV3Restart(t *testing.T) {
	root := mpstest.ShortRoot(t)
	ctx := context.Background()
	d := newInProcessV3(t, root)
	first := newV3Manager(t, root, d, nil)
	shares := map[string][]Share{
		"kept":    {{Card: "GPU-a", MemoryBytes: 1 << 30, ThreadPercent: 30}},
		"dropped": {{Card: "GPU-b", MemoryBytes: 1 << 30, ThreadPercent: 40}},
	}
	for _, c := range []string{"kept", "dropped"} {
		if err := first.Acquire(ctx, c, shares[c]); err != nil {
			t.Fatal(err)
		}
	}
	// The plugin exits (the daemon keeps running); the kept claim's
	// namespace is lost meanwhile.
	first.Close()
	if _, err := d.Control(ctx, []string{"namespace", "delete", mpsv3.NamespaceName("kept"), "--server=tangram"}); err != nil {
		log, _ := os.ReadFile(filepath.Join(root, "log", "control.log"))
		t.Fatalf("%v; control.log:\n%s", err, log)
	}

	next := newV3Manager(t, root, newInProcessV3(t, root), nil)
	next.Restore(ctx, "kept", shares["kept"])
	if err := next.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	waitIdle(t, next)
	want := map[string]mpsv3.NamespaceSpec{"tangram_kept": {Name: "tangram_kept", ActiveThreadPercentage: 30, PinnedMemoryLimit: "1G"}}
	if got := namespacesOf(t, d); !reflect.DeepEqual(got, want) {
		t.Errorf("namespaces after restart %+v, want %+v", got, want)
	}
	if _, err := os.Stat(filepath.Join(root, "claims", "dropped")); err != nil {
		t.Errorf("the Manager removed a claim's directory, which is the driver's to sweep: %v", err)
	}
	if _, err := os.Stat(daemon.Layout{Root: root}.ClaimShmDir("kept")); err != nil {
		t.Errorf("the kept claim's /dev/shm: %v", err)
	}
}

// TestClassicShmClearedWhenDaemonStops: the classic daemon's own /dev/shm
// (Layout.ShmDir; its shares have their claims' own) is emptied once the
// last share is gone and the daemon stopped.
func TestClassicShmClearedWhenDaemonStops(t *testing.T) {
	root := t.TempDir()
	layout := daemon.Layout{Root: root}
	if err := layout.Create(); err != nil {
		t.Fatal(err)
	}
	m := NewManager(layout, &countingDaemon{}, &daemon.RecordingComputeModeSetter{}, []string{"GPU-a"},
		WithTiming(Timing{ReadyWait: 5 * time.Second, Linger: time.Millisecond, RetryMin: time.Millisecond, RetryMax: 10 * time.Millisecond}))
	t.Cleanup(m.Close)
	ctx := context.Background()
	if err := m.Acquire(ctx, "c1", cardShares("GPU-a")); err != nil {
		t.Fatal(err)
	}
	segment := filepath.Join(layout.ShmDir(), "cuda.shm.1234")
	if err := os.WriteFile(segment, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	waitIdle(t, m)
	if _, err := os.Stat(segment); err != nil {
		t.Fatalf("a segment of a running share was removed: %v", err)
	}
	if err := m.Release(ctx, "c1"); err != nil {
		t.Fatal(err)
	}
	waitIdle(t, m)
	if _, err := os.Stat(segment); !os.IsNotExist(err) {
		t.Errorf("the segment is left after the daemon stopped: %v", err)
	}
	if _, err := os.Stat(layout.ShmDir()); err != nil {
		t.Errorf("the shm directory itself must stay: %v", err)
	}
}
