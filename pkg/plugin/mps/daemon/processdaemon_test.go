package daemon

import (
	"bufio"
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tangram-gpu/tangram/pkg/plugin/mps/mpstest/controlbin"
)

func TestMain(m *testing.M) { controlbin.Main(m) }

func newFakeDaemon(t *testing.T, root string) *ProcessDaemon {
	t.Helper()
	return NewProcessDaemon(ProcessDaemonConfig{
		Layout:         Layout{Root: root},
		Binary:         controlbin.FakeBinary,
		VisibleDevices: []string{"GPU-a", "GPU-b"},
		MinBackoff:     10 * time.Millisecond,
		MaxBackoff:     50 * time.Millisecond,
		ProbeInterval:  20 * time.Millisecond,
	})
}

func fakeLog(t *testing.T, root string) []string {
	t.Helper()
	return controlbin.FakeLog(t, Layout{Root: root}.PipeDir())
}

func fakePid(t *testing.T, root string) int {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(Layout{Root: root}.PipeDir(), "fake.pid"))
	if err != nil {
		return 0
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(string(data)))
	return pid
}

// startedPids makes every fake daemon started under root report its pid on
// the returned channel, so a test waits for the start itself.
func startedPids(t *testing.T, root string) <-chan int {
	t.Helper()
	fifo := filepath.Join(Layout{Root: root}.PipeDir(), "started")
	if err := os.MkdirAll(filepath.Dir(fifo), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	// Read-write, so that opening does not wait for a writer and reads
	// never see end-of-file between two starts.
	f, err := os.OpenFile(fifo, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	pids := make(chan int)
	go func() {
		defer close(pids)
		lines := bufio.NewScanner(f)
		for lines.Scan() {
			pid, err := strconv.Atoi(lines.Text())
			if err != nil {
				return
			}
			pids <- pid
		}
	}()
	return pids
}

func TestProcessDaemonStartStop(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	d := newFakeDaemon(t, root)
	if err := d.Ensure(ctx); err != nil {
		t.Fatal(err)
	}
	if err := d.Ensure(ctx); err != nil {
		t.Fatal(err)
	}
	if d.Starts() != 1 {
		t.Fatalf("Starts() = %d after two Ensure calls, want 1", d.Starts())
	}
	pid := fakePid(t, root)
	if pid == 0 {
		t.Fatal("fake daemon recorded no pid")
	}
	for dir, mode := range map[string]os.FileMode{"pipe": 0o755 | os.ModeDir, "log": 0o777 | os.ModeDir | os.ModeSticky, "shm": 0o777 | os.ModeDir | os.ModeSticky} {
		info, err := os.Stat(filepath.Join(root, dir))
		if err != nil {
			t.Errorf("MPS directory %s missing: %v", dir, err)
		} else if info.Mode() != mode {
			t.Errorf("MPS directory %s has mode %v, want %v", dir, info.Mode(), mode)
		}
	}
	if err := d.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if got, want := strings.Join(fakeLog(t, root), " "), "start GPU-a,GPU-b ; quit ;"; got != want {
		t.Errorf("fake log %q, want %q", got, want)
	}
	if err := syscall.Kill(pid, 0); err == nil {
		t.Errorf("daemon pid %d still alive after Stop", pid)
	}
	// Stopping again, with nothing running, succeeds.
	if err := d.Stop(ctx); err != nil {
		t.Errorf("second Stop: %v", err)
	}
}

func TestProcessDaemonRestartsAfterDeath(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	pids := startedPids(t, root)
	d := newFakeDaemon(t, root)
	// Ensure returns once the daemon answers, after it reported its pid;
	// the FIFO write blocks until read, so read it alongside.
	ensured := make(chan error, 1)
	go func() { ensured <- d.Ensure(ctx) }()
	first := <-pids
	if err := <-ensured; err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(first, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	second := <-pids
	if second == first {
		t.Fatalf("restarted daemon has the dead one's pid %d", first)
	}
	if err := d.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if got, want := strings.Join(fakeLog(t, root), " "), "start GPU-a,GPU-b ; start GPU-a,GPU-b ; quit ;"; got != want {
		t.Errorf("fake log %q, want %q", got, want)
	}
	if d.Starts() != 2 {
		t.Errorf("Starts() = %d, want 2", d.Starts())
	}
}

func TestProcessDaemonAdoptsRunningDaemon(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	previous := newFakeDaemon(t, root)
	if err := previous.Ensure(ctx); err != nil {
		t.Fatal(err)
	}
	pid := fakePid(t, root)
	// The previous plugin process exits and leaves the daemon for running clients.
	previous.Close()
	if err := syscall.Kill(pid, 0); err != nil {
		t.Fatalf("Close killed the daemon: %v", err)
	}

	next := newFakeDaemon(t, root)
	if err := next.Ensure(ctx); err != nil {
		t.Fatal(err)
	}
	if next.Starts() != 0 {
		t.Errorf("adopting plugin started %d daemons, want 0", next.Starts())
	}
	if err := next.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	// The fake answers quit by killing the daemon; the first ProcessDaemon's
	// waiting goroutine reaps it.
	if got, want := strings.Join(fakeLog(t, root), " "), "start GPU-a,GPU-b ; quit ;"; got != want {
		t.Errorf("fake log %q, want %q: the adopted daemon was not told to quit", got, want)
	}
	if fakePid(t, root) != 0 {
		t.Error("the adopted daemon still has its pid file after Stop")
	}
}

func TestProcessDaemonStartFailure(t *testing.T) {
	d := NewProcessDaemon(ProcessDaemonConfig{
		Layout:       Layout{Root: t.TempDir()},
		Binary:       controlbin.FailingBinary,
		ReadyTimeout: 5 * time.Second,
	})
	err := d.Ensure(context.Background())
	if err == nil || !strings.Contains(err.Error(), "MPS control daemon exited right after start") {
		t.Fatalf("Ensure error %v, want an exited-right-after-start error", err)
	}
	missing := NewProcessDaemon(ProcessDaemonConfig{Layout: Layout{Root: t.TempDir()}, Binary: "/nonexistent/nvidia-cuda-mps-control"})
	err = missing.Ensure(context.Background())
	if err == nil || !strings.Contains(err.Error(), "starting MPS control daemon: starting /nonexistent/nvidia-cuda-mps-control") {
		t.Fatalf("Ensure error %v, want a start error naming the binary", err)
	}
}

// TestProcessDaemonPrivateShm starts the daemon through PrivateShmWrapper, as the
// plugin does on real GPUs, and checks that it sees <mps-root>/shm as its
// /dev/shm. It needs root (unshare, mount), which the plugin has too.
func TestProcessDaemonPrivateShm(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	layout := Layout{Root: root}
	if err := os.MkdirAll(layout.ShmDir(), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(layout.ShmDir(), "marker-from-plugin"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	d := NewProcessDaemon(ProcessDaemonConfig{Layout: layout, Binary: controlbin.FakeBinary, Wrapper: PrivateShmWrapper(layout.ShmDir())})
	if err := d.Ensure(ctx); err != nil {
		t.Fatalf("starting the daemon in a private mount namespace (needs root): %v", err)
	}
	defer d.Stop(ctx)
	data, err := os.ReadFile(filepath.Join(layout.PipeDir(), "shm.txt"))
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.TrimSpace(string(data)); got != "marker-from-plugin" {
		t.Errorf("daemon's /dev/shm holds %q, want the plugin's shm directory (marker-from-plugin)", got)
	}
	if _, err := os.Stat("/dev/shm/marker-from-plugin"); err == nil {
		t.Error("the bind mount leaked into the host's /dev/shm")
	}
}

func TestProcessDaemonMultiUser(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	d := NewProcessDaemon(ProcessDaemonConfig{Layout: Layout{Root: root}, Binary: controlbin.FakeBinary, VisibleDevices: []string{"GPU-a"}, MultiUser: true})
	if err := d.Ensure(ctx); err != nil {
		t.Fatal(err)
	}
	if err := d.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if got, want := strings.Join(fakeLog(t, root), " "), "start GPU-a -M ; quit ;"; got != want {
		t.Errorf("fake log %q, want %q", got, want)
	}
}

// Stopping a supervised daemon that has died (and waits for its restart)
// succeeds: there is nothing left to quit, so the last share's unprepare
// must not fail.
func TestProcessDaemonStopAfterDeath(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	d := NewProcessDaemon(ProcessDaemonConfig{
		Layout:     Layout{Root: root},
		Binary:     controlbin.FakeBinary,
		MinBackoff: time.Hour, // no restart during the test
		MaxBackoff: time.Hour,
	})
	if err := d.Ensure(ctx); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(fakePid(t, root), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if err := d.Stop(ctx); err != nil {
		t.Errorf("Stop after the daemon died: %v", err)
	}
	if d.Starts() != 1 {
		t.Errorf("Starts() = %d, want 1", d.Starts())
	}
}
