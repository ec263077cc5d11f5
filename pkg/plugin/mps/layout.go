package mps

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

// LongestSocketPath is the longest socket path the control daemon binds
// under the layout: in MPS v3 (v3Server set) a claim's namespace endpoint,
// in classic MPS its own control socket.
func (l Layout) LongestSocketPath(v3Server string) string {
	if v3Server != "" {
		return filepath.Join(l.NamespacePipeDir(v3Server, longestClaimUID), control.SocketName)
	}
	return l.ControlSocket()
}

// longestClaimUID stands for any claim's UID: Kubernetes UIDs are 36
// characters.
const longestClaimUID = "00000000-0000-0000-0000-000000000000"

// CheckSocketPaths fails, naming --mps-root and by how much to shorten it,
// when a socket the control daemon will make under the pipe directory
// would not fit in a Unix socket address (107 bytes on Linux): the
// daemon's own control socket and, in MPS v3, each claim's namespace
// endpoint <pipe>/<server>/<namespace>/control (NVIDIA-FACTS.md, "Round
// two": a longer pipe directory failed on r615). A path that does not fit
// would fail every share on the node, so the plugin checks at start-up.
func (l Layout) CheckSocketPaths(v3Server string) error {
	longest := l.LongestSocketPath(v3Server)
	if over := len(longest) - control.MaxSocketPath; over > 0 {
		return fmt.Errorf("--mps-root %s (chart kubeletPlugin.hostPaths.mpsRoot) is %d characters too long: the MPS socket %s would be %d bytes, and Linux limits a Unix socket path to %d; choose a shorter --mps-root",
			l.Root, over, longest, len(longest), control.MaxSocketPath)
	}
	return nil
}

// LogDir holds control.log and server.log.
func (l Layout) LogDir() string { return filepath.Join(l.Root, "log") }

// ShmDir is the daemon's own /dev/shm (a directory of the MPS root, not the
// host's). Its clients do not share it: each claim's containers have the
// claim's own (ClaimShmDir); on a GPU (driver r580) a classic client with
// a /dev/shm of its own worked and created nothing in either.
func (l Layout) ShmDir() string { return filepath.Join(l.Root, "shm") }

// create makes the directories with the modes MPS needs: clients of any UID
// create shared-memory segments (so shm is world-writable and sticky, like
// /dev/shm), and a per-UID server writes its log as that user.
func (l Layout) create() error {
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

// NamespacePipeDir is where a v3 client reaches its namespace: the
// namespace's socket directory under the server's, which the control
// daemon creates (NVIDIA, "MPS v3 Namespaces", Namespace Routing). A
// container mounts only this directory, so it cannot reach the daemon's
// main control socket or another namespace.
func (l Layout) NamespacePipeDir(server, claimUID string) string {
	return filepath.Join(l.PipeDir(), server, NamespaceName(claimUID))
}
