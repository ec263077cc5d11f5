package daemon

// Layout: where the node's MPS directories are, under --mps-root.

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/tangram-gpu/tangram/pkg/plugin/mps/control"
)

// Layout places the node-wide MPS daemon's directories under one root.
type Layout struct {
	// Root is e.g. /run/tangram/mps.
	Root string
}

// PipeDir holds the control daemon's and server's pipes and sockets; every
// share on every card of the node mounts it.
func (l Layout) PipeDir() string { return filepath.Join(l.Root, "pipe") }

// ControlSocket is the unix socket the control daemon listens on; clients
// (nvidia-cuda-mps-control without -f, and the CUDA runtime) connect to it.
func (l Layout) ControlSocket() string { return filepath.Join(l.PipeDir(), control.SocketName) }

// LogDir holds control.log and server.log.
func (l Layout) LogDir() string { return filepath.Join(l.Root, "log") }

// ShmDir is the daemon's own /dev/shm (a directory of the MPS root, not the
// host's). Its clients do not share it: each claim's containers have the
// claim's own (ClaimShmDir); on a GPU (driver r580) a classic client with
// a /dev/shm of its own worked and created nothing in either.
func (l Layout) ShmDir() string { return filepath.Join(l.Root, "shm") }

// Create makes the directories with the modes MPS needs: clients of any UID
// create shared-memory segments (so shm is world-writable and sticky, like
// /dev/shm), and a per-UID server writes its log as that user.
func (l Layout) Create() error {
	for _, dir := range []struct {
		path string
		mode os.FileMode
	}{
		{l.PipeDir(), 0o755},
		{l.LogDir(), 0o777 | os.ModeSticky},
		{l.ShmDir(), 0o777 | os.ModeSticky},
	} {
		if err := os.MkdirAll(dir.path, 0o755); err != nil {
			return fmt.Errorf("creating MPS directory %s: %w", dir.path, err)
		}
		// MkdirAll is subject to the umask and leaves existing modes alone.
		if err := os.Chmod(dir.path, dir.mode); err != nil {
			return fmt.Errorf("setting mode of MPS directory %s: %w", dir.path, err)
		}
	}
	return nil
}

// ClaimsDir holds the per-claim directories.
func (l Layout) ClaimsDir() string { return filepath.Join(l.Root, "claims") }

// ClaimShmDir is the claim's /dev/shm.
func (l Layout) ClaimShmDir(claimUID string) string {
	return filepath.Join(l.ClaimsDir(), claimUID, "shm")
}
