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
)

func TestResolveMode(t *testing.T) {
	tests := []struct {
		flag   string
		v3     bool
		want   Mode
		badArg bool
	}{
		{flag: "auto", v3: true, want: ModeV3},
		{flag: "auto", v3: false, want: ModeClassic},
		{flag: "", want: ModeClassic},
		{flag: "v3", v3: false, want: ModeV3},
		{flag: "classic", v3: true, want: ModeClassic},
		{flag: "v4", badArg: true},
	}
	for _, tt := range tests {
		m, err := ParseMode(tt.flag)
		if tt.badArg {
			if err == nil || !strings.Contains(err.Error(), "want auto, v3 or classic") {
				t.Errorf("ParseMode(%q) = %v, want an error naming the values", tt.flag, err)
			}
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		if got := ResolveMode(m, tt.v3); got != tt.want {
			t.Errorf("ResolveMode(%q, %t) = %q, want %q", tt.flag, tt.v3, got, tt.want)
		}
	}
}

func TestNamespaceFor(t *testing.T) {
	const gib = 1 << 30
	tests := []struct {
		name   string
		shares []Share
		want   NamespaceSpec
	}{
		{name: "one share", shares: []Share{{Card: "GPU-a", MemoryBytes: 20 * gib, ThreadPercent: 30}},
			want: NamespaceSpec{Name: "tangram-c", ActiveThreadPercentage: 30, PinnedMemoryLimit: "20480M"}},
		{name: "no compute asked: no cap", shares: []Share{{Card: "GPU-a", MemoryBytes: 20 * gib}},
			want: NamespaceSpec{Name: "tangram-c", PinnedMemoryLimit: "20480M"}},
		{name: "two cards: smallest cap, largest memory", shares: []Share{
			{Card: "GPU-a", MemoryBytes: 10 * gib, ThreadPercent: 50},
			{Card: "GPU-b", MemoryBytes: 20 * gib, ThreadPercent: 25},
			{Card: "GPU-c", MemoryBytes: gib}},
			want: NamespaceSpec{Name: "tangram-c", ActiveThreadPercentage: 25, PinnedMemoryLimit: "20480M"}},
		{name: "memory rounds up to MiB", shares: []Share{{Card: "GPU-a", MemoryBytes: mib + 1}},
			want: NamespaceSpec{Name: "tangram-c", PinnedMemoryLimit: "2M"}},
		{name: "cap above 100 is the whole card", shares: []Share{{Card: "GPU-a", ThreadPercent: 150}},
			want: NamespaceSpec{Name: "tangram-c", ActiveThreadPercentage: 100}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := namespaceFor("c", tt.shares); got != tt.want {
				t.Errorf("namespaceFor = %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestV3Commands(t *testing.T) {
	spec := NamespaceSpec{Name: "tangram-c", ActiveThreadPercentage: 30, PinnedMemoryLimit: "20480M"}
	tests := []struct{ got, want string }{
		{v3ServerCreate("tangram", 0, []string{"GPU-a", "GPU-b"}), "server create tangram --uid=0 --allowed-devices=GPU-a,GPU-b"},
		{v3ServerList(), "server list --format=csv"},
		{v3NamespaceCreate("tangram", "tangram-c"), "namespace create tangram-c --server=tangram"},
		{v3NamespaceSet("tangram", spec), "namespace set tangram-c --server=tangram --active-thread-percentage=30 --pinned-memory-limit=20480M"},
		{v3NamespaceSet("tangram", NamespaceSpec{Name: "tangram-c"}), ""},
		{v3NamespaceList("tangram"), "namespace list --server=tangram --format=csv"},
		{v3NamespaceDelete("tangram", "tangram-c"), "namespace delete tangram-c --server=tangram"},
	}
	for _, tt := range tests {
		if tt.got != tt.want {
			t.Errorf("got %q, want %q", tt.got, tt.want)
		}
	}
}

func TestParseV3CSV(t *testing.T) {
	tests := []struct {
		name       string
		out        string
		server     string
		wantStatus string
		wantNS     map[string]NamespaceSpec
		wantErr    string
	}{
		{name: "server running, columns in another order, device list unquoted",
			out: "uid,status,name,allowed_devices\n0,Running,tangram,GPU-a,GPU-b\n", server: "tangram", wantStatus: "running"},
		{name: "server not listed", out: "name,status\nother,running\n", server: "tangram", wantStatus: ""},
		{name: "no header", out: "", server: "tangram", wantErr: "no header line"},
		{name: "no status column", out: "name\ntangram\n", server: "tangram", wantErr: `no "status" column`},
		{name: "short row", out: "name,status\ntangram\n", server: "tangram", wantErr: "has 1 fields, the header 2"},
		{name: "namespaces",
			out: "server,name,active_thread_percentage,pinned_memory_limit\ntangram,tangram-a,30,20480M\ntangram,other,,\n",
			wantNS: map[string]NamespaceSpec{
				"tangram-a": {Name: "tangram-a", ActiveThreadPercentage: 30, PinnedMemoryLimit: "20480M"},
				"other":     {Name: "other"},
			}},
		{name: "bad percentage", out: "name,active_thread_percentage\nx,lots\n", wantErr: "not a number"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var err error
			if tt.server != "" {
				var status string
				status, err = serverStatus(tt.out, tt.server)
				if err == nil && status != tt.wantStatus {
					t.Errorf("status %q, want %q", status, tt.wantStatus)
				}
			} else {
				var ns map[string]NamespaceSpec
				ns, err = parseNamespaces(tt.out)
				if err == nil && !reflect.DeepEqual(ns, tt.wantNS) {
					t.Errorf("namespaces %+v, want %+v", ns, tt.wantNS)
				}
			}
			if errString(err) == "" && tt.wantErr != "" || tt.wantErr == "" && err != nil ||
				tt.wantErr != "" && !strings.Contains(errString(err), tt.wantErr) {
				t.Errorf("error %v, want %q", err, tt.wantErr)
			}
		})
	}
}

// newV3StandIn starts the stand-in control binary (a separate process) as
// an MPS v3 daemon, as the plugin does on a node.
func newV3StandIn(t *testing.T, root string, cards []string) *MPSDaemon {
	t.Helper()
	d := NewMPSDaemon(MPSDaemonConfig{Layout: Layout{Root: root}, Binary: standInBinary, VisibleDevices: cards, MultiUser: true, Protocol: 3,
		MinBackoff: 10 * time.Millisecond, MaxBackoff: 50 * time.Millisecond, ProbeInterval: 20 * time.Millisecond})
	t.Cleanup(func() { _ = d.Stop(context.Background()) })
	return d
}

func TestV3NamespacesAgainstStandIn(t *testing.T) {
	root := shortRoot(t)
	ctx := context.Background()
	d := newV3StandIn(t, root, []string{"GPU-a", "GPU-b"})
	if err := d.Ensure(ctx); err != nil {
		t.Fatal(err)
	}
	// The server through the control binary as a client (what the plugin
	// runs on a node), the rest straight on the socket: each run of the
	// binary is a fork of this test program, slow under the race detector.
	v3 := NewV3Namespaces(d.Control, []string{"GPU-a", "GPU-b"})
	var notRunning *ServerNotRunningError
	if err := v3.CheckRunning(ctx); !errors.As(err, &notRunning) || !strings.Contains(err.Error(), `server "tangram" is not listed`) {
		t.Errorf("CheckRunning before the server exists: %v", err)
	}
	if err := v3.EnsureServer(ctx); err != nil {
		t.Fatal(err)
	}
	v3 = NewV3Namespaces(StandInControl(Layout{Root: root}.PipeDir()), []string{"GPU-a", "GPU-b"})
	if err := v3.EnsureServer(ctx); err != nil {
		t.Fatal(err)
	}
	if err := v3.CheckRunning(ctx); err != nil {
		t.Fatal(err)
	}
	a := NamespaceSpec{Name: "tangram-a", ActiveThreadPercentage: 30, PinnedMemoryLimit: "20480M"}
	b := NamespaceSpec{Name: "tangram-b", ActiveThreadPercentage: 50}
	if err := v3.Sync(ctx, []NamespaceSpec{a, b}); err != nil {
		t.Fatal(err)
	}
	// Someone else's namespace is left alone; ours that no claim wants goes.
	if _, err := SendStandInCommand(ctx, Layout{Root: root}.PipeDir(), "namespace create admin-ns --server=tangram"); err != nil {
		t.Fatal(err)
	}
	a.ActiveThreadPercentage = 40
	if err := v3.Sync(ctx, []NamespaceSpec{a}); err != nil {
		t.Fatal(err)
	}
	have, err := v3.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]NamespaceSpec{"tangram-a": a, "admin-ns": {Name: "admin-ns"}}
	if !reflect.DeepEqual(have, want) {
		t.Errorf("namespaces %+v, want %+v", have, want)
	}
	if err := v3.Delete(ctx, "tangram-a", have); err != nil {
		t.Fatal(err)
	}
	if err := v3.Delete(ctx, "tangram-a", map[string]NamespaceSpec{}); err != nil {
		t.Errorf("deleting an unlisted namespace: %v", err)
	}
	logged, err := StandInCommands(Layout{Root: root}.LogDir())
	if err != nil {
		t.Fatal(err)
	}
	wantLog := []string{
		"get_server_list",
		"server list --format=csv",
		"server list --format=csv",
		"server create tangram --uid=0 --allowed-devices=GPU-a,GPU-b",
		"server list --format=csv",
		"server list --format=csv",
		"namespace list --server=tangram --format=csv",
		"namespace create tangram-a --server=tangram",
		"namespace set tangram-a --server=tangram --active-thread-percentage=30 --pinned-memory-limit=20480M",
		"namespace create tangram-b --server=tangram",
		"namespace set tangram-b --server=tangram --active-thread-percentage=50",
		"namespace create admin-ns --server=tangram",
		"namespace list --server=tangram --format=csv",
		"namespace set tangram-a --server=tangram --active-thread-percentage=40 --pinned-memory-limit=20480M",
		"namespace delete tangram-b --server=tangram",
		"namespace list --server=tangram --format=csv",
		"namespace delete tangram-a --server=tangram",
	}
	if !slices.Equal(logged, wantLog) {
		t.Errorf("control.log:\n%s\nwant:\n%s", strings.Join(logged, "\n"), strings.Join(wantLog, "\n"))
	}
}

// recordingMounter records the bounds it was asked for.
type recordingMounter struct {
	mu      sync.Mutex
	mounted map[string]int64
	fail    error
}

func (r *recordingMounter) Mount(dir string, size int64) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.fail != nil {
		return r.fail
	}
	r.mounted[dir] = size
	return nil
}

func (r *recordingMounter) Unmount(dir string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.mounted, dir)
	return nil
}

// inProcessV3 is the stand-in v3 daemon run in the test process: the
// Manager tests start and adopt it many times, which the separate program
// (TestV3NamespacesAgainstStandIn) makes slow under the race detector.
type inProcessV3 struct {
	layout Layout
	mu     sync.Mutex
	done   chan error
}

func (d *inProcessV3) Ensure(ctx context.Context) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.done != nil {
		return nil // started by us and supervised, as MPSDaemon does
	}
	if _, err := SendStandInCommand(ctx, d.layout.PipeDir(), ""); err == nil {
		return nil // running (adopted)
	}
	if err := d.layout.create(); err != nil {
		return err
	}
	done := make(chan error, 1)
	d.done = done
	go func() {
		done <- RunStandInControlDaemon(context.Background(), StandInConfig{PipeDir: d.layout.PipeDir(), LogDir: d.layout.LogDir(), Protocol: 3, MultiUser: true})
	}()
	for range 500 {
		if _, err := SendStandInCommand(ctx, d.layout.PipeDir(), ""); err == nil {
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
	if _, err := SendStandInCommand(ctx, d.layout.PipeDir(), "quit"); err != nil && !strings.Contains(err.Error(), "cannot find MPS control daemon") {
		return err
	}
	return nil
}

func (d *inProcessV3) Close() {}

func (d *inProcessV3) Control(ctx context.Context, command string) (string, error) {
	return SendStandInCommand(ctx, d.layout.PipeDir(), command)
}

func newInProcessV3(t *testing.T, root string) *inProcessV3 {
	d := &inProcessV3{layout: Layout{Root: root}}
	t.Cleanup(func() { _ = d.Stop(context.Background()) })
	return d
}

type controlDaemon interface {
	Daemon
	Control(ctx context.Context, command string) (string, error)
}

func newV3Manager(t *testing.T, root string, d *inProcessV3, mounter ShmMounter) *Manager {
	t.Helper()
	cards := []string{"GPU-a", "GPU-b"}
	layout := Layout{Root: root}
	m := NewManager(layout, d, &RecordingComputeModeSetter{}, cards,
		WithTiming(Timing{ReadyWait: 5 * time.Second, RetryMin: 10 * time.Millisecond, RetryMax: 50 * time.Millisecond}),
		WithV3(NewV3Namespaces(d.Control, cards), ClaimDirs{Layout: layout, Mounter: mounter, ShmSizeBytes: 64 << 20}))
	t.Cleanup(m.Close)
	return m
}

func namespacesOf(t *testing.T, d controlDaemon) map[string]NamespaceSpec {
	t.Helper()
	v3 := NewV3Namespaces(d.Control, nil)
	have, err := v3.List(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return have
}

// TestManagerV3 prepares and releases shares through the Manager against
// the stand-in: one server, a namespace per claim with its limits, a
// /dev/shm and pipe directory per claim, all gone at release.
func TestManagerV3(t *testing.T) {
	const gib = 1 << 30
	root := shortRoot(t)
	ctx := context.Background()
	d := newInProcessV3(t, root)
	mounter := &recordingMounter{mounted: map[string]int64{}}
	m := newV3Manager(t, root, d, mounter)
	layout := Layout{Root: root}

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
	want := map[string]NamespaceSpec{
		"tangram-c1": {Name: "tangram-c1", ActiveThreadPercentage: 30, PinnedMemoryLimit: "20480M"},
		"tangram-c2": {Name: "tangram-c2", ActiveThreadPercentage: 20, PinnedMemoryLimit: "20480M"},
		"tangram-c3": {Name: "tangram-c3", ActiveThreadPercentage: 50, PinnedMemoryLimit: "20480M"},
	}
	if got := namespacesOf(t, d); !reflect.DeepEqual(got, want) {
		t.Errorf("namespaces %+v, want %+v", got, want)
	}
	cfg := m.ClientConfig("c1")
	wantCfg := ClientConfig{
		PipeDir: filepath.Join(root, "pipe", "tangram", "tangram-c1"),
		Mounts: []Mount{
			{HostPath: filepath.Join(root, "pipe", "tangram", "tangram-c1"), ContainerPath: filepath.Join(root, "pipe", "tangram", "tangram-c1")},
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
		if mounter.mounted[layout.ClaimShmDir(c)] != 64<<20 {
			t.Errorf("/dev/shm of %s is not bounded to 64 MiB: %v", c, mounter.mounted)
		}
		if _, err := os.Stat(layout.NamespacePipeDir("tangram", c)); err != nil {
			t.Errorf("the namespace pipe directory of %s: %v", c, err)
		}
	}

	if err := m.Release(ctx, "c2"); err != nil {
		t.Fatal(err)
	}
	delete(want, "tangram-c2")
	if got := namespacesOf(t, d); !reflect.DeepEqual(got, want) {
		t.Errorf("after releasing c2: namespaces %+v, want %+v", got, want)
	}
	if _, err := os.Stat(filepath.Join(root, "claims", "c2")); !os.IsNotExist(err) {
		t.Errorf("c2's directory is still there: %v", err)
	}
	if _, ok := mounter.mounted[layout.ClaimShmDir("c2")]; ok {
		t.Error("c2's /dev/shm is still mounted")
	}
	if err := m.Release(ctx, "c2"); err != nil {
		t.Errorf("releasing again: %v", err)
	}
	if err := m.Release(ctx, "c1"); err != nil {
		t.Fatal(err)
	}
	delete(want, "tangram-c1")
	if got := namespacesOf(t, d); !reflect.DeepEqual(got, want) {
		t.Errorf("after releasing c1: namespaces %+v, want %+v", got, want)
	}
	// The last share gone, the worker stops the daemon: its log tells.
	if err := m.Release(ctx, "c3"); err != nil {
		t.Fatal(err)
	}
	logged, err := StandInCommands(layout.LogDir())
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(logged, "namespace delete tangram-c3 --server=tangram") {
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
		root := shortRoot(t)
		d := newInProcessV3(t, root)
		m := newV3Manager(t, root, d, &recordingMounter{fail: errors.New("permission denied")})
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
		root := shortRoot(t)
		d := newInProcessV3(t, root)
		// A control daemon that lists the server as starting.
		ctl := func(ctx context.Context, cmd string) (string, error) {
			if cmd == v3ServerList() {
				return "name,status\ntangram,starting\n", nil
			}
			return d.Control(ctx, cmd)
		}
		layout := Layout{Root: root}
		m := NewManager(layout, d, &RecordingComputeModeSetter{}, []string{"GPU-a"},
			WithTiming(Timing{ReadyWait: 5 * time.Second, RetryMin: 10 * time.Millisecond, RetryMax: 50 * time.Millisecond}),
			WithV3(NewV3Namespaces(ctl, []string{"GPU-a"}), ClaimDirs{Layout: layout}))
		t.Cleanup(m.Close)
		err := m.Acquire(ctx, "c1", []Share{{Card: "GPU-a", MemoryBytes: 1 << 30}})
		var notReady *DaemonNotReadyError
		if !errors.As(err, &notReady) || !strings.Contains(err.Error(), `MPS v3 server "tangram" is starting, not running`) {
			t.Errorf("Acquire: %v, want a retryable error naming the server's state", err)
		}
		if len(m.Holders()) != 0 {
			t.Errorf("holders after a failed share: %v", m.Holders())
		}
		if got := namespacesOf(t, d); len(got) != 0 {
			t.Errorf("namespaces after a failed share: %+v", got)
		}
	})
}

// TestManagerV3Restart: a new plugin process adopts the running daemon,
// recreates the namespace of a prepared claim that is missing, deletes
// those of claims no longer prepared, and sweeps their directories.
func TestManagerV3Restart(t *testing.T) {
	root := shortRoot(t)
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
	if _, err := d.Control(ctx, v3NamespaceDelete("tangram", "tangram-kept")); err != nil {
		log, _ := os.ReadFile(filepath.Join(root, "log", "control.log"))
		t.Fatalf("%v; control.log:\n%s", err, log)
	}

	next := newV3Manager(t, root, newInProcessV3(t, root), nil)
	next.Restore(ctx, "kept", shares["kept"])
	if err := next.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	waitIdle(t, next)
	want := map[string]NamespaceSpec{"tangram-kept": {Name: "tangram-kept", ActiveThreadPercentage: 30, PinnedMemoryLimit: "1024M"}}
	if got := namespacesOf(t, d); !reflect.DeepEqual(got, want) {
		t.Errorf("namespaces after restart %+v, want %+v", got, want)
	}
	if _, err := os.Stat(filepath.Join(root, "claims", "dropped")); !os.IsNotExist(err) {
		t.Errorf("the dropped claim's directory is left: %v", err)
	}
	if _, err := os.Stat(Layout{Root: root}.ClaimShmDir("kept")); err != nil {
		t.Errorf("the kept claim's /dev/shm: %v", err)
	}
}

func TestClaimDirsRefuseOddNames(t *testing.T) {
	dirs := ClaimDirs{Layout: Layout{Root: t.TempDir()}}
	for _, uid := range []string{"..", "a/b", "", "UPPER"} {
		if err := dirs.Create(context.Background(), uid); err == nil {
			t.Errorf("Create(%q) succeeded", uid)
		}
	}
}

// TestClassicShmClearedWhenDaemonStops: classic MPS shares one /dev/shm
// between every share of the node; once the last share is gone and the
// daemon stopped, what its clients left there is removed.
func TestClassicShmClearedWhenDaemonStops(t *testing.T) {
	root := t.TempDir()
	layout := Layout{Root: root}
	if err := layout.create(); err != nil {
		t.Fatal(err)
	}
	m := NewManager(layout, &countingDaemon{}, &RecordingComputeModeSetter{}, []string{"GPU-a"},
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
