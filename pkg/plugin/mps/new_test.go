package mps

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/tangram-gpu/tangram/pkg/plugin/mps/daemon"
	"github.com/tangram-gpu/tangram/pkg/plugin/mps/mpsv3"
)

// TestNewBuildsClassicOrV3: mps.New, the plugin's one constructor, builds
// classic MPS without a v3 control (clients mount the node daemon's pipe
// directory read-only) and MPS v3 with one (a namespace per claim, whose
// pipe directory as the daemon reports it is checked against the one
// containers mount), and keeps the idle grace it was given.
func TestNewBuildsClassicOrV3(t *testing.T) {
	layout := daemon.Layout{Root: t.TempDir()}
	settings := Settings{
		Layout:         layout,
		ShareableCards: []string{"GPU-a", "GPU-b"},
		Daemon:         &daemon.SimulatedDaemon{Layout: layout},
		ComputeModes:   &daemon.RecordingComputeModeSetter{},
		Timing:         Timing{IdleGrace: 3 * time.Minute},
	}

	classic := New(settings)
	defer classic.Close()
	if classic.v3 != nil {
		t.Errorf("classic: v3 namespaces set")
	}
	if cc := classic.ClientConfig("c1"); cc.PipeDir != layout.PipeDir() || !cc.PipeReadOnly {
		t.Errorf("classic client config %+v, want the node daemon's pipe directory %s read-only", cc, layout.PipeDir())
	}
	if classic.timing.IdleGrace != 3*time.Minute || classic.timing.ReadyWait == 0 {
		t.Errorf("classic timing %+v, want the idle grace given and defaults elsewhere", classic.timing)
	}

	settings.V3Control = func(context.Context, []string) (string, error) { return "", nil }
	settings.ClaimDirs = daemon.ClaimDirs{Layout: layout}
	v3 := New(settings)
	defer v3.Close()
	if v3.v3 == nil {
		t.Fatal("v3: no namespaces")
	}
	if v3.v3.PipeDir != layout.PipeDir() || !slices.Equal(v3.v3.Devices, settings.ShareableCards) {
		t.Errorf("v3 namespaces pipe directory %q devices %v, want %q %v", v3.v3.PipeDir, v3.v3.Devices, layout.PipeDir(), settings.ShareableCards)
	}
	want := NamespacePipeDir(layout, mpsv3.DefaultServer, "c1")
	if cc := v3.ClientConfig("c1"); cc.PipeDir != want || cc.PipeReadOnly {
		t.Errorf("v3 client config %+v, want the claim's namespace directory %s", cc, want)
	}
}
