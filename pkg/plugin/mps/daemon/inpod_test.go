package daemon

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tangram-gpu/tangram/pkg/plugin/mps/inpod"
	"github.com/tangram-gpu/tangram/pkg/plugin/mps/mpstest"
	"github.com/tangram-gpu/tangram/pkg/plugin/mps/mpstest/controlbin"
)

func TestRunSimulatedControlDaemon(t *testing.T) {
	root := mpstest.ShortRoot(t)
	layout := Layout{Root: root}
	if err := os.MkdirAll(layout.PipeDir(), 0o755); err != nil {
		t.Fatal(err)
	}
	// A socket left by a previous container must not stop a new one.
	stale, err := net.Listen("unix", layout.ControlSocket())
	if err != nil {
		t.Fatal(err)
	}
	stale.(*net.UnixListener).SetUnlinkOnClose(false)
	stale.Close()
	if _, err := net.Dial("unix", layout.ControlSocket()); err == nil {
		t.Fatal("a stale socket answers")
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- inpod.RunSimulated(ctx, layout.PipeDir()) }()
	deadline := time.Now().Add(5 * time.Second)
	for {
		conn, err := net.Dial("unix", layout.ControlSocket())
		if err == nil {
			conn.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the simulated daemon does not answer: %v", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(layout.ControlSocket()); !os.IsNotExist(err) {
		t.Errorf("control socket left behind after stop: %v", err)
	}
}

func TestRunControlDaemon(t *testing.T) {
	for _, tc := range []struct {
		name     string
		binary   string
		cancel   bool
		wantErr  string
		wantQuit bool
	}{
		{name: "pod deleted: quit sent, clean exit", binary: controlbin.FakeBinary, cancel: true, wantQuit: true},
		{name: "daemon cannot start: the container fails", binary: controlbin.FailingBinary, wantErr: "exited"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := mpstest.ShortRoot(t)
			layout := Layout{Root: root}
			if err := layout.Create(); err != nil {
				t.Fatal(err)
			}
			t.Setenv("CUDA_MPS_PIPE_DIRECTORY", layout.PipeDir())
			t.Setenv("CUDA_VISIBLE_DEVICES", "GPU-a")
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			done := make(chan error, 1)
			go func() {
				done <- inpod.Run(ctx, inpod.Config{Binary: tc.binary, MultiUser: true, QuitTimeout: 5 * time.Second})
			}()
			if tc.cancel {
				pidFile := filepath.Join(layout.PipeDir(), "fake.pid")
				for i := 0; ; i++ {
					if _, err := os.Stat(pidFile); err == nil {
						break
					}
					if i > 500 {
						t.Fatal("the daemon did not start")
					}
					time.Sleep(10 * time.Millisecond)
				}
				cancel()
			}
			var err error
			select {
			case err = <-done:
			case <-time.After(10 * time.Second):
				t.Fatal("inpod.Run did not return")
			}
			if mpstest.CheckError(t, err, tc.wantErr) {
				return
			}
			log := strings.Join(fakeLog(t, root), " ")
			if !strings.Contains(log, "start GPU-a -M") {
				t.Errorf("fake log %q: want a start with -M and the pod's CUDA_VISIBLE_DEVICES", log)
			}
			if tc.wantQuit != strings.Contains(log, "quit") {
				t.Errorf("fake log %q: quit sent = %v, want %v", log, !tc.wantQuit, tc.wantQuit)
			}
		})
	}
}

func TestPipeDirFromEnv(t *testing.T) {
	for _, tc := range []struct {
		value string
		ok    bool
	}{{"/run/tangram/mps/pipe", true}, {"", false}, {"relative/pipe", false}} {
		t.Setenv("CUDA_MPS_PIPE_DIRECTORY", tc.value)
		if _, err := inpod.PipeDirFromEnv(); (err == nil) != tc.ok {
			t.Errorf("%q: error %v, want ok=%v", tc.value, err, tc.ok)
		}
	}
}
