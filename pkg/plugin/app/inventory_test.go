package app

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/tangram-gpu/tangram/pkg/gpu"
	"github.com/tangram-gpu/tangram/pkg/plugin/plugintest"
)

// The test inventory of the node plane (pkg/plugin/plugintest).
const (
	testNode = plugintest.Node
	migCard  = plugintest.MIGCard
)

func testGPUs() []gpu.GPU { return plugintest.GPUs() }

// kubeletDirs is a directory for the kubelet's sockets, with the
// registrar's reg/ made as the kubelet makes it. Not t.TempDir(): its
// path holds the test's name, and a socket path must fit in 107 bytes.
func kubeletDirs(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "tg")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	if err := os.Mkdir(filepath.Join(dir, "reg"), 0o750); err != nil {
		t.Fatal(err)
	}
	return dir
}
