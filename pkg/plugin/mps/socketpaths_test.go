package mps

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/tangram-gpu/tangram/pkg/plugin/mps/daemon"
	"github.com/tangram-gpu/tangram/pkg/plugin/mps/mpsv3"
)

// TestCheckSocketPaths: the plugin refuses, at start-up and naming
// --mps-root, an MPS root under which a socket the daemon must bind would
// not fit in 107 bytes; in MPS v3 the longest is a claim's namespace
// endpoint, <root>/pipe/tangram/tangram_<claim UID>/control.
func TestCheckSocketPaths(t *testing.T) {
	// <root>/pipe/tangram/tangram_<36>/control is the root and 66 bytes.
	v3Room := 107 - len(filepath.Join("/pipe", mpsv3.DefaultServer, mpsv3.NamespaceName(longestClaimUID), "control"))
	tests := []struct {
		name, root, server string
		wantErr            string
	}{
		{name: "the default root, v3", root: "/run/tangram/mps", server: mpsv3.DefaultServer},
		{name: "v3, exactly 107 bytes", root: "/" + strings.Repeat("r", v3Room-1), server: mpsv3.DefaultServer},
		{name: "v3, one byte over", root: "/" + strings.Repeat("r", v3Room), server: mpsv3.DefaultServer,
			wantErr: "is 1 characters too long: the MPS socket"},
		{name: "the same root in classic MPS: only the control socket", root: "/" + strings.Repeat("r", v3Room)},
		{name: "classic, over", root: "/" + strings.Repeat("r", 100), wantErr: "--mps-root /rrr"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := CheckSocketPaths(daemon.Layout{Root: tt.root}, tt.server)
			if tt.wantErr == "" && err != nil || tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)) {
				t.Errorf("CheckSocketPaths(%d-byte root): %v, want %q", len(tt.root), err, tt.wantErr)
			}
		})
	}
}
