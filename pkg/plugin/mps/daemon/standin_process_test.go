package daemon

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tangram-gpu/tangram/pkg/plugin/mps/control"
	"github.com/tangram-gpu/tangram/pkg/plugin/mps/inpod"
	"github.com/tangram-gpu/tangram/pkg/plugin/mps/mpstest"
	"github.com/tangram-gpu/tangram/pkg/plugin/mps/mpstest/controlbin"
	"github.com/tangram-gpu/tangram/pkg/plugin/mps/standin"
)

// The stand-in run as a separate program (controlbin.StandInBinary, TestMain) under
// the plugin's daemon code: the host process daemon, an admin's -d, and
// the daemon pod's entry point.

// TestStandInWithProcessDaemon drives the stand-in program (a separate process)
// with the plugin's own client code, legacy MPS: ProcessDaemon starts it with
// -f -M (its stdin held open), probes it with get_server_list on stdin and
// stops it with quit, as on a real node.
func TestStandInWithProcessDaemon(t *testing.T) {
	root := mpstest.ShortRoot(t)
	layout := Layout{Root: root}
	ctx := context.Background()
	d := NewProcessDaemon(ProcessDaemonConfig{Layout: layout, Binary: controlbin.StandInBinary, VisibleDevices: []string{"GPU-a", "GPU-b"}, MultiUser: true})
	if err := d.Ensure(ctx); err != nil {
		t.Fatal(err)
	}
	// The daemon lives on: its stdin has not ended.
	time.Sleep(100 * time.Millisecond)
	if err := d.control(ctx, "set_default_active_thread_percentage", "50"); err != nil {
		t.Fatal(err)
	}
	if d.Starts() != 1 {
		t.Errorf("%d starts, want 1", d.Starts())
	}
	if err := d.control(ctx, "start_server", "-uid", "nobody"); err == nil || !strings.Contains(err.Error(), `is not a UID`) {
		t.Errorf("a bad command: %v, want the daemon's error", err)
	}
	if err := d.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if err := standin.Probe(ctx, layout.PipeDir()); err == nil {
		t.Error("the stand-in still answers after Stop")
	}
	entries, err := standin.Log(layout.LogDir())
	if err != nil {
		t.Fatal(err)
	}
	want := []standin.LogEntry{
		{Transport: "stdin", Command: "get_server_list"},
		{Transport: "stdin", Command: "set_default_active_thread_percentage 50"},
		{Transport: "stdin", Command: "start_server -uid nobody", Rejected: `"nobody" is not a UID`},
		{Transport: "stdin", Command: "quit"},
	}
	if !slices.Equal(entries, want) {
		t.Errorf("control.log has %+v, want %+v", entries, want)
	}
	log, _ := os.ReadFile(filepath.Join(layout.LogDir(), "control.log"))
	if !strings.Contains(string(log), "protocol 2, multi-user true, CUDA_VISIBLE_DEVICES=GPU-a,GPU-b") {
		t.Errorf("control.log does not record -M and the cards:\n%s", log)
	}
}

// TestStandInDaemonMode starts the stand-in with -d -p 3, as an admin
// would, talks to it with arguments and quits it with -q.
func TestStandInDaemonMode(t *testing.T) {
	root := mpstest.ShortRoot(t)
	layout := Layout{Root: root}
	if err := layout.Create(); err != nil {
		t.Fatal(err)
	}
	env := []string{"CUDA_MPS_PIPE_DIRECTORY=" + layout.PipeDir(), "CUDA_MPS_LOG_DIRECTORY=" + layout.LogDir()}
	ctx := context.Background()
	run := func(stdin string, args ...string) (string, error) {
		out, err := control.ExecCommander{}.Run(ctx, append([]string{controlbin.StandInBinary}, args...), env, stdin)
		return string(out), err
	}
	if _, err := run("", "-d", "-p", "3", "-m"); err != nil {
		t.Fatal(err)
	}
	// -d's daemon does not end with its starter's stdin.
	time.Sleep(100 * time.Millisecond)
	if _, err := run("", "server", "create", "s", "--uid=0"); err != nil {
		t.Fatal(err)
	}
	out, err := run("", "namespace", "create", "ns", "--server=s")
	if err != nil || out != "" {
		t.Errorf("namespace create: %q, %v", out, err)
	}
	if _, err := run("namespace list\n"); err == nil || !strings.Contains(err.Error(), "no interactive shell") {
		t.Errorf("a v3 command on stdin: %v", err)
	}
	if _, err := run("", "-q"); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for standin.Probe(ctx, layout.PipeDir()) == nil {
		if time.Now().After(deadline) {
			t.Fatal("the daemon still answers after -q")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if _, err := run("", "-p", "4"); err == nil {
		t.Error("-p 4 accepted")
	}
}

// TestStandInUnderRunControlDaemon is the daemon pod's path: inpod.Run
// runs the program with -f (v3: -p 3 -m -f), its stdin held open, and quits
// it when the pod is deleted (v3: -q).
func TestStandInUnderRunControlDaemon(t *testing.T) {
	for _, tt := range []struct {
		protocol  int
		multiUser bool
		wantLog   []standin.LogEntry
		wantStart string
	}{
		{protocol: 2, multiUser: true, wantLog: []standin.LogEntry{{Transport: "stdin", Command: "quit"}}, wantStart: "protocol 2, multi-user true"},
		{protocol: 3, multiUser: true, wantLog: []standin.LogEntry{{Transport: "flag", Command: "quit"}}, wantStart: "protocol 3, multi-user true"},
	} {
		t.Run(fmt.Sprint("protocol ", tt.protocol), func(t *testing.T) {
			root := mpstest.ShortRoot(t)
			layout := Layout{Root: root}
			if err := layout.Create(); err != nil {
				t.Fatal(err)
			}
			t.Setenv("CUDA_MPS_PIPE_DIRECTORY", layout.PipeDir())
			t.Setenv("CUDA_MPS_LOG_DIRECTORY", layout.LogDir())
			t.Setenv("CUDA_MPS_PROTOCOL_VERSION", fmt.Sprint(tt.protocol))
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() {
				done <- inpod.Run(ctx, inpod.Config{Binary: controlbin.StandInBinary, MultiUser: tt.multiUser})
			}()
			mpstest.WaitAnswering(t, func(ctx context.Context) error { return standin.Probe(ctx, layout.PipeDir()) })
			time.Sleep(100 * time.Millisecond) // its stdin has not ended
			if err := standin.Probe(ctx, layout.PipeDir()); err != nil {
				t.Fatalf("the daemon stopped on its own: %v", err)
			}
			cancel()
			if err := <-done; err != nil {
				t.Fatal(err)
			}
			entries, err := standin.Log(layout.LogDir())
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(entries, tt.wantLog) {
				t.Errorf("control.log has %+v, want %+v", entries, tt.wantLog)
			}
			log, _ := os.ReadFile(filepath.Join(layout.LogDir(), "control.log"))
			if !strings.Contains(string(log), tt.wantStart) {
				t.Errorf("control.log does not record %q:\n%s", tt.wantStart, log)
			}
		})
	}
}

// TestDaemonStartOverCrashedDaemon: the plugin's daemon (a process on the
// host, or the daemon pod's main process) starts over the socket and PID
// file a killed daemon left, which the control binary cannot bind over;
// over the socket of a daemon that still listens, it refuses and touches
// nothing.
func TestDaemonStartOverCrashedDaemon(t *testing.T) {
	ctx := context.Background()
	t.Run("process daemon over a crashed daemon", func(t *testing.T) {
		layout := Layout{Root: mpstest.ShortRoot(t)}
		if err := standin.LeaveCrashedDaemon(layout.PipeDir()); err != nil {
			t.Fatal(err)
		}
		d := NewProcessDaemon(ProcessDaemonConfig{Layout: layout, Binary: controlbin.StandInBinary, VisibleDevices: []string{"GPU-a"}, MultiUser: true, Protocol: 3})
		t.Cleanup(func() { _ = d.Stop(ctx) })
		if err := d.Ensure(ctx); err != nil {
			t.Fatalf("starting over a crashed daemon's socket: %v", err)
		}
		if d.Starts() != 1 {
			t.Errorf("%d starts, want 1", d.Starts())
		}
	})
	t.Run("process daemon over a listening socket", func(t *testing.T) {
		layout := Layout{Root: mpstest.ShortRoot(t)}
		hung := listenHung(t, layout)
		d := NewProcessDaemon(ProcessDaemonConfig{Layout: layout, Binary: controlbin.StandInBinary, VisibleDevices: []string{"GPU-a"}, MultiUser: true, Protocol: 3,
			ReadyTimeout: 300 * time.Millisecond})
		t.Cleanup(func() { _ = d.Stop(ctx) })
		err := d.Ensure(ctx)
		if !errors.Is(err, control.ErrDaemonListening) {
			t.Fatalf("starting over a listening socket: %v, want %v", err, control.ErrDaemonListening)
		}
		if d.Starts() != 0 {
			t.Errorf("%d starts, want none", d.Starts())
		}
		if fi, err := os.Lstat(hung); err != nil || fi.Mode().Type() != os.ModeSocket {
			t.Errorf("the listening daemon's socket: %v", err)
		}
	})
	t.Run("daemon pod over a crashed daemon", func(t *testing.T) {
		layout := Layout{Root: mpstest.ShortRoot(t)}
		if err := layout.Create(); err != nil {
			t.Fatal(err)
		}
		if err := standin.LeaveCrashedDaemon(layout.PipeDir()); err != nil {
			t.Fatal(err)
		}
		t.Setenv("CUDA_MPS_PIPE_DIRECTORY", layout.PipeDir())
		t.Setenv("CUDA_MPS_LOG_DIRECTORY", layout.LogDir())
		t.Setenv("CUDA_MPS_PROTOCOL_VERSION", "3")
		runCtx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- inpod.Run(runCtx, inpod.Config{Binary: controlbin.StandInBinary, MultiUser: true}) }()
		mpstest.WaitAnswering(t, func(ctx context.Context) error { return standin.Probe(ctx, layout.PipeDir()) })
		cancel()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	})
	t.Run("daemon pod over a listening socket", func(t *testing.T) {
		layout := Layout{Root: mpstest.ShortRoot(t)}
		listenHung(t, layout)
		t.Setenv("CUDA_MPS_PIPE_DIRECTORY", layout.PipeDir())
		err := inpod.Run(ctx, inpod.Config{Binary: controlbin.StandInBinary, MultiUser: true, Protocol: 3})
		if !errors.Is(err, control.ErrDaemonListening) {
			t.Fatalf("the daemon pod over a listening socket: %v, want %v", err, control.ErrDaemonListening)
		}
	})
}

// listenHung plays a hung control daemon on the layout's socket: it
// accepts connections and never answers. It returns the socket's path.
func listenHung(t *testing.T, layout Layout) string {
	t.Helper()
	if err := os.MkdirAll(layout.PipeDir(), 0o755); err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("unix", layout.ControlSocket())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	go func() {
		for {
			conn, err := l.Accept()
			if err != nil {
				return
			}
			t.Cleanup(func() { _ = conn.Close() })
		}
	}()
	return layout.ControlSocket()
}

// TestR580BinaryIsClassicOnly: the control binary of driver r580 has no
// MPS v3, so a v3 daemon (-p 3 -m -f) cannot start from it, while the
// classic daemon the plugin runs there (-f -M, commands on stdin) does.
func TestR580BinaryIsClassicOnly(t *testing.T) {
	ctx := context.Background()
	v3 := NewProcessDaemon(ProcessDaemonConfig{Layout: Layout{Root: mpstest.ShortRoot(t)}, Binary: controlbin.StandIn580Binary, VisibleDevices: []string{"GPU-a"},
		MultiUser: true, Protocol: 3, ReadyTimeout: 5 * time.Second})
	t.Cleanup(func() { _ = v3.Stop(ctx) })
	if err := v3.Ensure(ctx); err == nil || !strings.Contains(err.Error(), "exited right after start") {
		t.Errorf("an MPS v3 daemon from the r580 binary: %v, want it to exit at start", err)
	}
	classic := NewProcessDaemon(ProcessDaemonConfig{Layout: Layout{Root: mpstest.ShortRoot(t)}, Binary: controlbin.StandIn580Binary, VisibleDevices: []string{"GPU-a"},
		MultiUser: true, Protocol: 2})
	t.Cleanup(func() { _ = classic.Stop(ctx) })
	if err := classic.Ensure(ctx); err != nil {
		t.Fatalf("a classic daemon from the r580 binary: %v", err)
	}
	if err := classic.control(ctx, "set_default_active_thread_percentage", "50"); err != nil {
		t.Errorf("a legacy command to it: %v", err)
	}
}
