package control

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestRemoveStaleSocket: the socket of a daemon that no longer runs is
// removed with its PID file; the socket of one that still listens (even if
// it answers nothing) is never touched.
func TestRemoveStaleSocket(t *testing.T) {
	tests := []struct {
		name        string
		setup       func(t *testing.T, pipe string)
		wantRemoved bool
		wantErr     string
		wantLeft    []string
	}{
		{name: "an empty pipe directory", setup: func(*testing.T, string) {}},
		{name: "a PID file without a socket", wantRemoved: true,
			setup: func(t *testing.T, pipe string) { write(t, filepath.Join(pipe, PIDFileName)) }},
		{name: "a crashed daemon's socket and PID file", wantRemoved: true,
			setup: func(t *testing.T, pipe string) {
				bindAndLeave(t, filepath.Join(pipe, SocketName))
				write(t, filepath.Join(pipe, PIDFileName))
			}},
		{name: "a daemon that listens but never answers", wantErr: "still listens", wantLeft: []string{SocketName, PIDFileName},
			setup: func(t *testing.T, pipe string) {
				l, err := net.Listen("unix", filepath.Join(pipe, SocketName))
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = l.Close() })
				write(t, filepath.Join(pipe, PIDFileName))
			}},
		{name: "a regular file where the socket should be", wantErr: "not the MPS control daemon's socket", wantLeft: []string{SocketName},
			setup: func(t *testing.T, pipe string) { write(t, filepath.Join(pipe, SocketName)) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pipe, err := os.MkdirTemp("", "pipe")
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = os.RemoveAll(pipe) })
			tt.setup(t, pipe)
			removed, err := RemoveStaleSocket(context.Background(), pipe)
			if tt.wantErr == "" && err != nil || tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)) {
				t.Fatalf("error %v, want %q", err, tt.wantErr)
			}
			if tt.wantErr == "still listens" && !errors.Is(err, ErrDaemonListening) {
				t.Errorf("error %v is not ErrDaemonListening", err)
			}
			if removed != tt.wantRemoved {
				t.Errorf("removed %t, want %t", removed, tt.wantRemoved)
			}
			entries, _ := os.ReadDir(pipe)
			var left []string
			for _, e := range entries {
				left = append(left, e.Name())
			}
			if strings.Join(left, ",") != strings.Join(tt.wantLeft, ",") {
				t.Errorf("left %v, want %v", left, tt.wantLeft)
			}
		})
	}
}

func write(t *testing.T, path string) {
	t.Helper()
	if err := os.WriteFile(path, []byte("4242\n"), 0o644); err != nil {
		t.Fatal(err)
	}
}

// bindAndLeave leaves a socket file nobody listens on, as a killed
// daemon does.
func bindAndLeave(t *testing.T, path string) {
	t.Helper()
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	l.SetUnlinkOnClose(false)
	_ = l.Close()
}
