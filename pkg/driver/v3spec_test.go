package driver

import (
	"context"
	"path/filepath"
	"reflect"
	"slices"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/tangram-gpu/tangram/pkg/cdi"
	"github.com/tangram-gpu/tangram/pkg/sharing"
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
	specs := &stepSpecs{CDISpecs: CDISpecs{Store: store, Hardware: cdi.NoHardware{}}, steps: &steps{}}
	layout := sharing.Layout{Root: filepath.Join(dir, "mps")}
	card := testGPUs()[0]
	m := sharing.NewManager(layout, &sharing.SimulatedDaemon{Layout: layout}, &sharing.RecordingComputeModeSetter{}, []string{card.UUID},
		sharing.WithV3(sharing.NewV3Namespaces(nil, []string{card.UUID}), sharing.ClaimDirs{Layout: layout}))
	defer m.Close()

	for _, uid := range []string{"c1", "c2"} {
		share := SpecDevice{plannedDevice: plannedDevice{
			Request: "gpu", Pool: testNode, Device: "gpu-0", GPU: card, ShareID: "s-" + uid, Share: true, MemoryBytes: 20 << 30,
			ConsumedCapacity: map[resourceapi.QualifiedName]resource.Quantity{"memory": resource.MustParse("20Gi")},
		}}
		ids, err := specs.Write(context.Background(), ClaimSpec{UID: uid, Namespace: "default", Name: uid, Devices: []SpecDevice{share}, MPS: m.ClientConfig(uid)})
		if err != nil {
			t.Fatal(err)
		}
		env, mounts, err := specs.env(slices.Concat(ids...))
		if err != nil {
			t.Fatal(err)
		}
		pipe := filepath.Join(dir, "mps", "pipe", "tangram", "tangram-"+uid)
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
