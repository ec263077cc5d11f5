package liveness

import (
	"context"
	"net"
	"testing"
)

// The old and the new plugin pod on the host network both serve health and
// metrics on the same port while they overlap.
func TestListenSharedTwiceOnOnePort(t *testing.T) {
	ctx := context.Background()
	first, err := ListenShared(ctx, "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer first.Close()
	addr := first.Addr().String()
	second, err := ListenShared(ctx, addr)
	if err != nil {
		t.Fatalf("second listener on %s: %v", addr, err)
	}
	defer second.Close()
	// A plain listener still finds the port taken: sharing is opt-in.
	if plain, err := net.Listen("tcp", addr); err == nil {
		plain.Close()
		t.Fatalf("a listener without SO_REUSEPORT got %s too", addr)
	}
}
