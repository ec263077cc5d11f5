package plugin

import (
	"context"
	"path/filepath"
	"reflect"
	"slices"
	"testing"

	"github.com/tangram-gpu/tangram/pkg/plugin/cdi"
	"github.com/tangram-gpu/tangram/pkg/plugin/mps"
	"github.com/tangram-gpu/tangram/pkg/plugin/mps/daemon"
	"github.com/tangram-gpu/tangram/pkg/plugin/mps/mpsv3"
	"github.com/tangram-gpu/tangram/pkg/plugin/prepared"
)

// TestSpecMountsTheClaimsOwnMPSDirs: in MPS v3 mode each claim's CDI spec
// mounts its own namespace's pipe directory and its own /dev/shm, never
// the daemon's, so two shares of one card see nothing of each other.
func TestSpecMountsTheClaimsOwnMPSDirs(t *testing.T) {
	dir := t.TempDir()
	store, err := cdi.NewSpecStore(filepath.Join(dir, "cdi"))
	if err != nil {
		t.Fatal(err)
	}
	specs := &stepSpecs{ClaimSpecs: cdi.ClaimSpecs{Store: store, Hardware: cdi.NoHardware{}, Cards: CardsByDevice(testGPUs())}, steps: &steps{}}
	layout := daemon.Layout{Root: filepath.Join(dir, "mps")}
	card := testGPUs()[0]
	m := mps.NewManager(layout, &daemon.SimulatedDaemon{Layout: layout}, &daemon.RecordingComputeModeSetter{}, []string{card.UUID},
		mps.WithV3(mpsv3.NewNamespaces(nil, []string{card.UUID}), daemon.ClaimDirs{Layout: layout}))
	defer m.Close()
	specs.MPS = m

	for _, uid := range []string{"c1", "c2"} {
		share := prepared.Device{Request: "gpu", Device: "gpu-0", GPUUUID: card.UUID, ShareID: "s-" + uid, Share: true, MemoryBytes: 20 << 30,
			MPSPipeDir: layout.PipeDir()}
		claim := prepared.Claim{UID: uid, Namespace: "default", Name: uid, Devices: []prepared.Device{share}}
		ids, err := specs.Write(context.Background(), claim)
		if err != nil {
			t.Fatal(err)
		}
		env, mounts, err := specs.env(slices.Concat(ids...))
		if err != nil {
			t.Fatal(err)
		}
		pipe := filepath.Join(dir, "mps", "pipe", "tangram", "tangram_"+uid)
		if got := env["CUDA_MPS_PIPE_DIRECTORY"]; got != pipe {
			t.Errorf("%s: CUDA_MPS_PIPE_DIRECTORY=%q, want its namespace's directory %q", uid, got, pipe)
		}
		want := []string{filepath.Join(dir, "mps", "claims", uid, "shm") + ":/dev/shm", pipe + ":" + pipe}
		slices.Sort(mounts)
		slices.Sort(want)
		if !reflect.DeepEqual(mounts, want) {
			t.Errorf("%s: mounts %v, want %v", uid, mounts, want)
		}
	}
}
