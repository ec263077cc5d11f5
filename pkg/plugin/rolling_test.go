package plugin

import (
	"context"
	"path/filepath"
	"reflect"
	"slices"
	"testing"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/tangram-gpu/tangram/pkg/plugin/cdi"
	"github.com/tangram-gpu/tangram/pkg/plugin/checkpoint"
	"github.com/tangram-gpu/tangram/pkg/plugin/mps/daemon"
	"github.com/tangram-gpu/tangram/pkg/plugin/prepared"
)

// During a rolling update two plugin pods run on one node, on the same
// checkpoint, CDI directory, cards and MPS daemon, and the kubelet may call
// either. These tests run two Drivers the way two processes would: their
// own memory, store objects and lock file descriptors; shared files,
// compute modes and daemon.

// twin starts a second plugin process next to h's.
func (h *harness) twin() *harness {
	h.t.Helper()
	return h.twinWith(nil)
}

// twinWith is twin with the node's daemon, as the second process drives
// it, wrapped by wrap (nil: not wrapped).
func (h *harness) twinWith(wrap func(daemon.Daemon) daemon.Daemon) *harness {
	h.t.Helper()
	t := &harness{t: h.t, dir: h.dir, runDir: h.runDir, steps: &steps{}, modes: h.modes, bootID: h.bootID, claims: h.claims, timing: h.timing}
	t.mig = stepMIG{Partitions: h.mig.Partitions, steps: t.steps}
	t.state = &stepState{steps: t.steps, Claims: checkpoint.Claims{
		Store: checkpoint.NewStore(filepath.Join(h.dir, "state", "checkpoint.json"),
			checkpoint.WithBootID(func() (string, error) { return t.bootID, nil })),
		StateLock: checkpoint.NewFileLock(filepath.Join(h.dir, "state", "checkpoint.lock")),
	}}
	store, err := cdi.NewSpecStore(filepath.Join(h.runDir, "cdi"))
	if err != nil {
		h.t.Fatal(err)
	}
	t.specs = &stepSpecs{ClaimSpecs: cdi.ClaimSpecs{Store: store, Hardware: cdi.NoHardware{}, Cards: CardsByDevice(testGPUs())}, steps: t.steps}
	// One daemon per node, whichever process drives it (as in pod mode).
	nodeDaemon := h.daemon
	t.wrapDaemon = func(*daemon.SimulatedDaemon) daemon.Daemon {
		if wrap != nil {
			return wrap(nodeDaemon)
		}
		return nodeDaemon
	}
	h.t.Cleanup(func() {
		if t.shares.Manager != nil {
			t.shares.Close()
		}
	})
	t.start()
	t.daemon = nodeDaemon
	return t
}

// storedUIDs reads the checkpoint as a third party would.
func (h *harness) storedUIDs() []string {
	h.t.Helper()
	records, _, err := h.state.Load(context.Background())
	if err != nil {
		h.t.Fatal(err)
	}
	var out []string
	for uid, rec := range records {
		if rec.State != prepared.PrepareCompleted {
			h.t.Errorf("stored claim %s in phase %s", uid, rec.State)
		}
		out = append(out, uid)
	}
	slices.Sort(out)
	return out
}

// Calls alternate between the old and the new process; each must see what
// the other did: no claim lost from the checkpoint, none unprepared by
// one left behind by the other, no card given twice, the MPS accounting of
// whoever serves the call matching the node.
func TestTwoPluginProcessesInterleaved(t *testing.T) {
	oldPod := newHarness(t)
	newPod := oldPod.twin()
	share := func(uid, device string) *resourceapi.ResourceClaim {
		return claimWith(uid, shareResult("gpu", device, "s-"+uid, "4Gi", ""))
	}
	steps := []struct {
		name      string
		by        *harness
		prepare   *resourceapi.ResourceClaim
		unprepare string
		wantErr   bool
		want      []string
	}{
		{name: "old prepares a whole card", by: oldPod, prepare: claimWith("w0", wholeResult("gpu", "gpu-0")), want: []string{"w0"}},
		{name: "new prepares a share", by: newPod, prepare: share("s1", "gpu-1"), want: []string{"s1", "w0"}},
		{name: "old prepares another share", by: oldPod, prepare: share("s2", "gpu-1"), want: []string{"s1", "s2", "w0"}},
		{name: "new refuses the card old gave", by: newPod, prepare: claimWith("w0b", wholeResult("gpu", "gpu-0")), wantErr: true, want: []string{"s1", "s2", "w0"}},
		{name: "new unprepares old's whole card", by: newPod, unprepare: "w0", want: []string{"s1", "s2"}},
		{name: "old gives the freed card", by: oldPod, prepare: claimWith("w0b", wholeResult("gpu", "gpu-0")), want: []string{"s1", "s2", "w0b"}},
		{name: "old unprepares new's share", by: oldPod, unprepare: "s1", want: []string{"s2", "w0b"}},
		{name: "new unprepares old's share", by: newPod, unprepare: "s2", want: []string{"w0b"}},
		{name: "old returns the recorded w0b again", by: oldPod, prepare: claimWith("w0b", wholeResult("gpu", "gpu-0")), want: []string{"w0b"}},
	}
	for _, step := range steps {
		var err error
		if step.prepare != nil {
			err = step.by.prepare(step.prepare)[step.prepare.UID].Err
		} else {
			err = step.by.unprepare(step.unprepare)[types.UID(step.unprepare)]
		}
		if (err != nil) != step.wantErr {
			t.Fatalf("%s: error %v, want error %v", step.name, err, step.wantErr)
		}
		if got := step.by.storedUIDs(); !reflect.DeepEqual(got, step.want) {
			t.Fatalf("%s: checkpoint holds %v, want %v", step.name, got, step.want)
		}
		step.by.assertConsistent()
	}
}

// A call waits for the other process's call to finish and then works on
// what it left: two prepares of the same whole card at once give it once.
func TestTwoPluginProcessesExcludeEachOther(t *testing.T) {
	oldPod := newHarness(t)
	newPod := oldPod.twin()
	// Hold old's prepare in its first checkpoint save.
	inSave, release := make(chan struct{}), make(chan struct{})
	oldPod.state.beforeSave = func() error {
		close(inSave)
		<-release
		return nil
	}
	oldErr := make(chan error, 1)
	go func() { oldErr <- oldPod.prepare(claimWith("a", wholeResult("gpu", "gpu-0")))["a"].Err }()
	<-inSave
	newErr := make(chan error, 1)
	go func() { newErr <- newPod.prepare(claimWith("b", wholeResult("gpu", "gpu-0")))["b"].Err }()
	select {
	case err := <-newErr:
		t.Fatalf("new's prepare returned (%v) while old's call was still running", err)
	case <-time.After(100 * time.Millisecond):
	}
	oldPod.state.beforeSave = nil
	close(release)
	if err := <-oldErr; err != nil {
		t.Fatalf("old's prepare: %v", err)
	}
	if err := <-newErr; err == nil {
		t.Fatal("new's prepare of a card old holds succeeded")
	}
	if got, want := newPod.storedUIDs(), []string{"a"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("checkpoint holds %v, want %v", got, want)
	}
	newPod.assertConsistent()
}

// The old process dies half-way through preparing a share (after writing
// its spec, with the card switched to MPS); the kubelet then unprepares
// the claim through the new one, which must undo what the dead one did.
// Then the new one serves on as usual.
func TestPluginProcessDiesWhileTheOtherServes(t *testing.T) {
	for _, crashAt := range []string{"save", "mps-acquire", "spec-write"} {
		t.Run("after "+crashAt, func(t *testing.T) {
			oldPod := newHarness(t)
			newPod := oldPod.twin()
			if err := newPod.prepare(claimWith("w", wholeResult("gpu", "gpu-0")))["w"].Err; err != nil {
				t.Fatal(err)
			}
			oldPod.steps.crashAt, oldPod.steps.crashN = crashAt, oldPod.steps.count(crashAt)+1
			claim := claimWith("s", shareResult("gpu", "gpu-1", "s1", "4Gi", ""))
			crashed := crashing(func() {
				_, _ = oldPod.driver.PrepareResourceClaims(context.Background(), []*resourceapi.ResourceClaim{claim})
			})
			if crashed != crashAt {
				t.Fatalf("crashed after %q, want %q", crashed, crashAt)
			}
			// The process is gone: so is its MPS accounting (the card's
			// compute mode and the daemon stay as it left them).
			oldPod.shares.Close()

			if err := newPod.unprepare("s")["s"]; err != nil {
				t.Fatalf("unprepare through the surviving process: %v", err)
			}
			if got, want := newPod.storedUIDs(), []string{"w"}; !reflect.DeepEqual(got, want) {
				t.Fatalf("checkpoint holds %v, want %v", got, want)
			}
			newPod.assertConsistent()
			if err := newPod.prepare(claim)["s"].Err; err != nil {
				t.Fatalf("preparing the claim again: %v", err)
			}
			newPod.assertConsistent()
		})
	}
}
