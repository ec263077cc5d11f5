package mpsv3

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tangram-gpu/tangram/pkg/plugin/mps/control"
	"github.com/tangram-gpu/tangram/pkg/plugin/mps/daemon"
	"github.com/tangram-gpu/tangram/pkg/plugin/mps/mpstest"
	"github.com/tangram-gpu/tangram/pkg/plugin/mps/mpstest/controlbin"
	"github.com/tangram-gpu/tangram/pkg/plugin/mps/standin"
)

func TestMain(m *testing.M) { controlbin.Main(m) }

// newV3StandIn starts the stand-in control binary (a separate process) as
// an MPS v3 daemon, as the plugin does on a node.
func newV3StandIn(t *testing.T, root string, cards []string) *daemon.ProcessDaemon {
	t.Helper()
	d := daemon.NewProcessDaemon(daemon.ProcessDaemonConfig{Layout: daemon.Layout{Root: root}, Binary: controlbin.StandInBinary, VisibleDevices: cards, MultiUser: true, Protocol: 3,
		MinBackoff: 10 * time.Millisecond, MaxBackoff: 50 * time.Millisecond, ProbeInterval: 20 * time.Millisecond})
	t.Cleanup(func() { _ = d.Stop(context.Background()) })
	return d
}

// TestV3NamespacesAgainstStandIn drives the strict stand-in, started by
// ProcessDaemon as on a node (-p 3 -m -f, stdin held open), with the plugin's
// v3 code: commands as arguments, valid names, readiness from Ready,
// numbers compared as numbers, clients terminated before a delete.
func TestV3NamespacesAgainstStandIn(t *testing.T) {
	root := mpstest.ShortRoot(t)
	layout := daemon.Layout{Root: root}
	ctx := context.Background()
	d := newV3StandIn(t, root, []string{"GPU-a", "GPU-b"})
	if err := d.Ensure(ctx); err != nil {
		t.Fatal(err)
	}
	// The server through the control binary as a client (what the plugin
	// runs on a node), the rest through the stand-in in this process: each
	// run of the binary is a fork of this test program, slow under the
	// race detector.
	v3 := NewNamespaces(d.Control, []string{"GPU-a", "GPU-b"})
	v3.PipeDir = layout.PipeDir()
	var notRunning *ServerNotRunningError
	if err := v3.CheckRunning(ctx); !errors.As(err, &notRunning) || !strings.Contains(err.Error(), `server "tangram" is not listed`) {
		t.Errorf("CheckRunning before the server exists: %v", err)
	}
	if err := v3.EnsureServer(ctx); err != nil {
		t.Fatal(err)
	}
	v3 = NewNamespaces(standin.Control(layout.PipeDir()), []string{"GPU-a", "GPU-b"})
	v3.PipeDir = layout.PipeDir()
	if err := v3.EnsureServer(ctx); err != nil {
		t.Fatal(err)
	}
	if err := v3.CheckRunning(ctx); err != nil {
		t.Fatal(err)
	}
	a := NamespaceSpec{Name: NamespaceName("a"), ActiveThreadPercentage: 30, PinnedMemoryLimit: "20480M"}
	b := NamespaceSpec{Name: NamespaceName("b"), ActiveThreadPercentage: 50}
	if err := syncNamespaces(ctx, v3, []NamespaceSpec{a, b}); err != nil {
		t.Fatal(err)
	}
	ctl := standin.Control(layout.PipeDir())
	// Someone else's namespace is left alone; ours that no claim wants
	// goes, its client terminated first; a client on ours keeps it
	// unchanged (the daemon would refuse to set it).
	for _, cmd := range [][]string{
		{"namespace", "create", "admin_ns", "--server=tangram"},
		{"standin", "attach-client", a.Name, "--server=tangram", "--pid=1001"},
		{"standin", "attach-client", b.Name, "--server=tangram", "--pid=1002"},
	} {
		if _, err := ctl(ctx, cmd); err != nil {
			t.Fatal(err)
		}
	}
	if err := syncNamespaces(ctx, v3, []NamespaceSpec{a}); err != nil {
		t.Fatal(err)
	}
	have, err := v3.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]NamespaceSpec{
		a.Name:     {Name: a.Name, ActiveThreadPercentage: 30, PinnedMemoryLimit: "20G", PipeDirectory: filepath.Join(layout.PipeDir(), "tangram", NamespaceName("a"))},
		"admin_ns": {Name: "admin_ns", ActiveThreadPercentage: 100, PinnedMemoryLimit: "unlimited", PipeDirectory: filepath.Join(layout.PipeDir(), "tangram", "admin_ns")},
	}
	if !reflect.DeepEqual(have, want) {
		t.Errorf("namespaces %+v, want %+v", have, want)
	}
	// A changed limit is set once the client is gone.
	if _, err := ctl(ctx, clientTerminate(1001)); err != nil {
		t.Fatal(err)
	}
	a.ActiveThreadPercentage = 40
	if err := syncNamespaces(ctx, v3, []NamespaceSpec{a}); err != nil {
		t.Fatal(err)
	}
	// Delete with two clients attached: both terminated with the
	// documented command, then deleted without --force.
	for _, pid := range []string{"--pid=1003", "--pid=1004"} {
		if _, err := ctl(ctx, []string{"standin", "attach-client", a.Name, "--server=tangram", pid}); err != nil {
			t.Fatal(err)
		}
	}
	if err := v3.Delete(ctx, a.Name, have); err != nil {
		t.Fatal(err)
	}
	if err := v3.Delete(ctx, a.Name, map[string]NamespaceSpec{}); err != nil {
		t.Errorf("deleting an unlisted namespace: %v", err)
	}
	entries, err := standin.Log(layout.LogDir())
	if err != nil {
		t.Fatal(err)
	}
	var logged []string
	for _, e := range entries {
		if e.Transport != "argv" || e.Rejected != "" {
			t.Errorf("control.log: %+v; want every command as arguments and accepted", e)
		}
		logged = append(logged, e.Command)
	}
	an, bn := a.Name, b.Name
	wantLog := []string{
		"server list --format=csv", // the readiness probe
		"server list --format=csv",
		"server list --format=csv",
		"server create tangram --uid=0 --allowed-devices=GPU-a,GPU-b",
		"server list --format=csv",
		"server list --format=csv",
		"namespace list --server=tangram --format=csv",
		"namespace create " + an + " --server=tangram",
		"namespace set " + an + " --server=tangram --active-thread-percentage=30 --pinned-memory-limit=20480M",
		"namespace get " + an + " tangram pipe-directory",
		"namespace create " + bn + " --server=tangram",
		"namespace set " + bn + " --server=tangram --active-thread-percentage=50",
		"namespace get " + bn + " tangram pipe-directory",
		"namespace create admin_ns --server=tangram",
		"standin attach-client " + an + " --server=tangram --pid=1001",
		"standin attach-client " + bn + " --server=tangram --pid=1002",
		"namespace list --server=tangram --format=csv",
		"client list --server=tangram --format=csv,noheader",
		"client terminate 1002",
		"namespace delete " + bn + " --server=tangram",
		"namespace list --server=tangram --format=csv",
		"client terminate 1001",
		"namespace list --server=tangram --format=csv",
		"namespace set " + an + " --server=tangram --active-thread-percentage=40 --pinned-memory-limit=20480M",
		"standin attach-client " + an + " --server=tangram --pid=1003",
		"standin attach-client " + an + " --server=tangram --pid=1004",
		"client list --server=tangram --format=csv,noheader",
		"client terminate 1003",
		"client terminate 1004",
		"namespace delete " + an + " --server=tangram",
	}
	if !slices.Equal(logged, wantLog) {
		t.Errorf("control.log:\n%s\nwant:\n%s", strings.Join(logged, "\n"), strings.Join(wantLog, "\n"))
	}
}

// standInDaemon is a stand-in daemon run in the test process.
type standInDaemon struct{ pipe, logDir string }

// startStandIn runs standin.RunDaemon with cfg (its pipe and log
// directories filled in) until the test ends.
func startStandIn(t *testing.T, cfg standin.Config) standInDaemon {
	t.Helper()
	root := mpstest.ShortRoot(t)
	d := standInDaemon{pipe: filepath.Join(root, "pipe"), logDir: filepath.Join(root, "log")}
	if err := os.MkdirAll(d.logDir, 0o755); err != nil {
		t.Fatal(err)
	}
	cfg.PipeDir, cfg.LogDir = d.pipe, d.logDir
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- standin.RunDaemon(ctx, cfg) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
	mpstest.WaitAnswering(t, func(ctx context.Context) error { return standin.Probe(ctx, d.pipe) })
	return d
}

// TestV3PipeDirMismatch: a namespace the daemon reaches elsewhere than the
// plugin mounts fails the share rather than leaving its client uncapped.
func TestV3PipeDirMismatch(t *testing.T) {
	ctx := context.Background()
	d := startStandIn(t, standin.Config{Protocol: 3, MultiUser: true})
	v3 := NewNamespaces(standin.Control(d.pipe), []string{"GPU-a"})
	v3.PipeDir = "/elsewhere"
	if err := v3.EnsureServer(ctx); err != nil {
		t.Fatal(err)
	}
	err := v3.Ensure(ctx, NamespaceSpec{Name: "tangram_c", ActiveThreadPercentage: 10}, map[string]NamespaceSpec{})
	mpstest.CheckError(t, err, "not /elsewhere/tangram/tangram_c where the plugin mounts it")
	err = v3.Ensure(ctx, NamespaceSpec{Name: "tangram-c"}, map[string]NamespaceSpec{})
	mpstest.CheckError(t, err, "not a valid MPS v3 namespace name")
}

// TestV3DeleteForced: when terminating a client is refused, the delete is
// forced.
func TestV3DeleteForced(t *testing.T) {
	ctx := context.Background()
	d := startStandIn(t, standin.Config{Protocol: 3, MultiUser: true})
	real := standin.Control(d.pipe)
	// A daemon whose client terminate fails.
	ctl := func(ctx context.Context, cmd []string) (string, error) {
		if len(cmd) > 1 && cmd[0] == "client" && cmd[1] == "terminate" {
			return "", errors.New("client terminate: not supported")
		}
		return real(ctx, cmd)
	}
	v3 := NewNamespaces(ctl, []string{"GPU-a"})
	if err := v3.EnsureServer(ctx); err != nil {
		t.Fatal(err)
	}
	if err := syncNamespaces(ctx, v3, []NamespaceSpec{{Name: "tangram_c", ActiveThreadPercentage: 10}}); err != nil {
		t.Fatal(err)
	}
	if _, err := real(ctx, []string{"standin", "attach-client", "tangram_c", "--server=tangram"}); err != nil {
		t.Fatal(err)
	}
	if err := syncNamespaces(ctx, v3, nil); err != nil {
		t.Fatal(err)
	}
	entries, err := standin.Log(d.logDir)
	if err != nil {
		t.Fatal(err)
	}
	last := entries[len(entries)-2:]
	if last[0].Command != "namespace delete tangram_c --server=tangram" || last[0].Rejected == "" ||
		last[1].Command != "namespace delete tangram_c --server=tangram --force" || last[1].Rejected != "" {
		t.Errorf("control.log ends %+v, want a refused delete, then a forced one", last)
	}
}

// syncNamespaces makes v's namespaces of ours exactly want: missing ones
// are created, changed ones set, and those of ours no claim wants deleted
// (also any named as earlier versions named them). Other namespaces are
// left alone.
func syncNamespaces(ctx context.Context, v *Namespaces, want []NamespaceSpec) error {
	have, err := v.List(ctx)
	if err != nil {
		return err
	}
	var errs []error
	wanted := map[string]bool{}
	for _, spec := range want {
		wanted[spec.Name] = true
		if err := v.Ensure(ctx, spec, have); err != nil {
			errs = append(errs, err)
		}
	}
	for _, name := range slices.Sorted(maps.Keys(have)) {
		if wanted[name] || !OwnNamespace(name) {
			continue
		}
		if err := v.Delete(ctx, name, have); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// TestV3NamespacePipeDirSpellings: the plugin asks for the pipe directory
// with the documented field spelling first (pipe-directory) and falls back
// to the one r615 code reads (pipe_directory), so either binary is read.
func TestV3NamespacePipeDirSpellings(t *testing.T) {
	ctx := context.Background()
	for _, underscore := range []bool{false, true} {
		t.Run(fmt.Sprintf("underscore=%t", underscore), func(t *testing.T) {
			d := startStandIn(t, standin.Config{Protocol: 3, MultiUser: true, UnderscoreColumns: underscore})
			v3 := NewNamespaces(standin.Control(d.pipe), []string{"GPU-a"})
			if err := v3.EnsureServer(ctx); err != nil {
				t.Fatal(err)
			}
			if err := v3.Ensure(ctx, NamespaceSpec{Name: "tangram_c", ActiveThreadPercentage: 10}, map[string]NamespaceSpec{}); err != nil {
				t.Fatal(err)
			}
			got, err := v3.ListedPipeDir(ctx, "tangram_c")
			if want := filepath.Join(d.pipe, "tangram", "tangram_c"); err != nil || got != want {
				t.Errorf("pipe directory %q, %v; want %q", got, err, want)
			}
		})
	}
}

// TestV3DeleteStopsAtFirstTimeout: a control daemon that does not answer
// gets one command of a namespace delete, not one per client plus delete
// and --force; the worker deletes the namespace once it answers again.
func TestV3DeleteStopsAtFirstTimeout(t *testing.T) {
	ctx := context.Background()
	have := map[string]NamespaceSpec{"tangram_c": {Name: "tangram_c"}}
	for _, hangs := range []string{"client list", "client terminate", "namespace delete"} {
		t.Run(hangs, func(t *testing.T) {
			var sent []string
			ctl := func(_ context.Context, cmd []string) (string, error) {
				line := strings.Join(cmd, " ")
				sent = append(sent, line)
				if strings.HasPrefix(line, hangs) {
					return "", &control.TimeoutError{Command: line, Timeout: time.Second}
				}
				if strings.HasPrefix(line, "client list") {
					return "1,tangram,GPU-a,tangram/tangram_c (0),a\n2,tangram,GPU-a,tangram/tangram_c (0),b\n", nil
				}
				return "", nil
			}
			err := NewNamespaces(ctl, []string{"GPU-a"}).Delete(ctx, "tangram_c", have)
			var timeout *control.TimeoutError
			if !errors.As(err, &timeout) {
				t.Fatalf("Delete: %v, want the timeout", err)
			}
			if last := sent[len(sent)-1]; !strings.HasPrefix(last, hangs) {
				t.Errorf("sent %q after the timeout, want nothing after %q", sent, hangs)
			}
			if slices.ContainsFunc(sent, func(s string) bool { return strings.HasSuffix(s, "--force") }) {
				t.Errorf("sent %q: a forced delete after a timeout", sent)
			}
		})
	}
}
