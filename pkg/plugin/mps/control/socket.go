package control

// The control daemon's files in its pipe directory, as NVIDIA's control
// daemon leaves them (shared/notes/NVIDIA-FACTS.md, "Round two"): the
// `control` Unix socket and `nvidia-cuda-mps-control.pid`. A daemon that did
// not stop cleanly leaves both, and a new daemon started over the socket
// fails to bind (recorded on r615 by NVIDIA's GPU-fractioning code).

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"k8s.io/klog/v2"
)

const (
	// SocketName is the control daemon's socket in its pipe directory.
	SocketName = "control"
	// PIDFileName is the control daemon's PID file in its pipe directory.
	PIDFileName = "nvidia-cuda-mps-control.pid"
	// MaxSocketPath is the longest path a Unix socket may have on Linux:
	// sun_path holds 108 bytes with the terminating NUL (unix(7)).
	MaxSocketPath = 107
)

// ErrDaemonListening answers RemoveStaleSocket when a process still
// accepts connections on the socket: it is not stale, whatever its
// answers to commands.
var ErrDaemonListening = errors.New("a process still listens on the MPS control socket")

// RemoveStaleSocket makes the pipe directory ready for a new control
// daemon: a `control` socket nobody listens on (connect is refused) is
// removed with the PID file beside it, so that the new daemon can bind. A
// socket something still listens on is left alone and reported with
// ErrDaemonListening: a hung daemon's socket accepts connections, and
// removing it would orphan that daemon and its clients. It reports whether
// it removed anything, and logs a removed socket.
func RemoveStaleSocket(ctx context.Context, pipeDir string) (bool, error) {
	socket := filepath.Join(pipeDir, SocketName)
	fi, err := os.Lstat(socket)
	if errors.Is(err, fs.ErrNotExist) {
		// No socket: a PID file alone names no daemon anyone can reach.
		return removeIfExists(filepath.Join(pipeDir, PIDFileName))
	}
	if err != nil {
		return false, fmt.Errorf("checking for a stale MPS control socket: %w", err)
	}
	if fi.Mode().Type() != fs.ModeSocket {
		return false, fmt.Errorf("%s is a %s, not the MPS control daemon's socket: remove it by hand", socket, fi.Mode().Type())
	}
	dialCtx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	var dialer net.Dialer
	conn, err := dialer.DialContext(dialCtx, "unix", socket)
	if err == nil {
		_ = conn.Close()
		return false, fmt.Errorf("%w (%s): leaving it; stop that daemon first", ErrDaemonListening, socket)
	}
	if !errors.Is(err, syscall.ECONNREFUSED) {
		// A full backlog or a slow daemon: not provably dead.
		return false, fmt.Errorf("checking whether the MPS control socket %s is stale: %w", socket, err)
	}
	if err := os.Remove(socket); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return false, fmt.Errorf("removing the stale MPS control socket %s: %w", socket, err)
	}
	if _, err := removeIfExists(filepath.Join(pipeDir, PIDFileName)); err != nil {
		return true, err
	}
	klog.FromContext(ctx).Info("Removed the socket of an MPS control daemon that no longer runs", "socket", socket)
	return true, nil
}

func removeIfExists(path string) (bool, error) {
	err := os.Remove(path)
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, fs.ErrNotExist):
		return false, nil
	default:
		return false, fmt.Errorf("removing the stale %s: %w", path, err)
	}
}
