package mps

// Where MPS v3 clients reach their namespaces, and whether the sockets the
// control daemon binds under --mps-root fit in a Unix socket address.

import (
	"fmt"
	"path/filepath"

	"github.com/tangram-gpu/tangram/pkg/plugin/mps/control"
	"github.com/tangram-gpu/tangram/pkg/plugin/mps/daemon"
	"github.com/tangram-gpu/tangram/pkg/plugin/mps/mpsv3"
)

// NamespacePipeDir is where a v3 client reaches its namespace: the
// namespace's socket directory under the server's, which the control
// daemon creates (NVIDIA, "MPS v3 Namespaces", Namespace Routing). A
// container mounts only this directory, so it cannot reach the daemon's
// main control socket or another namespace.
func NamespacePipeDir(l daemon.Layout, server, claimUID string) string {
	return filepath.Join(l.PipeDir(), server, mpsv3.NamespaceName(claimUID))
}

// LongestSocketPath is the longest socket path the control daemon binds
// under the layout: in MPS v3 (v3Server set) a claim's namespace endpoint,
// in classic MPS its own control socket.
func LongestSocketPath(l daemon.Layout, v3Server string) string {
	if v3Server != "" {
		return filepath.Join(NamespacePipeDir(l, v3Server, longestClaimUID), control.SocketName)
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
func CheckSocketPaths(l daemon.Layout, v3Server string) error {
	longest := LongestSocketPath(l, v3Server)
	if over := len(longest) - control.MaxSocketPath; over > 0 {
		return fmt.Errorf("--mps-root %s (chart kubeletPlugin.hostPaths.mpsRoot) is %d characters too long: the MPS socket %s would be %d bytes, and Linux limits a Unix socket path to %d; choose a shorter --mps-root",
			l.Root, over, longest, len(longest), control.MaxSocketPath)
	}
	return nil
}
