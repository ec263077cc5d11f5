package liveness

import (
	"context"
	"net"
	"syscall"

	"golang.org/x/sys/unix"
)

// ListenShared listens on a TCP address that another process may be
// listening on too (SO_REUSEPORT): during a rolling update the old and the
// new plugin pod of a node run at once, and on the host network
// (kubeletPlugin.hostNetwork) their health and metrics ports are the same
// node port. The kernel spreads connections over both until the old pod
// closes its listener; a probe of either pod may therefore be answered by
// the other for those seconds.
func ListenShared(ctx context.Context, addr string) (net.Listener, error) {
	lc := net.ListenConfig{Control: func(_, _ string, c syscall.RawConn) error {
		var sockErr error
		if err := c.Control(func(fd uintptr) {
			sockErr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_REUSEPORT, 1)
		}); err != nil {
			return err
		}
		return sockErr
	}}
	return lc.Listen(ctx, "tcp", addr)
}
