package plugin

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"testing"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"

	"github.com/tangram-gpu/tangram/pkg/gpu"
	"github.com/tangram-gpu/tangram/pkg/gpu/fakegpu"
	"github.com/tangram-gpu/tangram/pkg/plugin/cdi"
	"github.com/tangram-gpu/tangram/pkg/plugin/checkpoint"
	"github.com/tangram-gpu/tangram/pkg/plugin/claimstatus"
	"github.com/tangram-gpu/tangram/pkg/plugin/kinds/migpartition"
	"github.com/tangram-gpu/tangram/pkg/plugin/memlimit/records"
	"github.com/tangram-gpu/tangram/pkg/plugin/mps"
	"github.com/tangram-gpu/tangram/pkg/plugin/mps/daemon"
	"github.com/tangram-gpu/tangram/pkg/plugin/podcheck"
	"github.com/tangram-gpu/tangram/pkg/plugin/prepared"
)

// harness runs a Driver on temp dirs; restart() simulates a new process on
// the same node (same files, same card compute modes, fresh memory).
type harness struct {
	t testing.TB
	// dir holds the state directory; runDir the CDI specs and the MPS
	// root, which a node keeps on tmpfs (/var/run/cdi, /run/tangram/mps):
	// dir itself, but for the benchmarks (newNodeHarness).
	dir    string
	runDir string
	steps  *steps
	state  *stepState
	bootID string
	specs  *stepSpecs
	modes  *daemon.RecordingComputeModeSetter
	daemon *daemon.SimulatedDaemon
	shares stepShares
	mig    stepMIG
	// status, when set, receives each start's claim status writes.
	status claimstatus.Writer
	claims []resourceapi.ResourceClaim
	// listErr makes listing claims from the API server fail.
	listErr error
	// wrapDaemon, when set, wraps the simulated daemon of each start
	// (e.g. to make it slow or failing); timing replaces the Manager's.
	wrapDaemon func(*daemon.SimulatedDaemon) daemon.Daemon
	timing     mps.Timing
	// managerOpts, when set, adds options to each start's Manager (e.g.
	// MPS v3 against a stand-in).
	managerOpts func(layout daemon.Layout, cards []string) []mps.ManagerOption
	driver      *Driver
}

func newHarness(t testing.TB) *harness {
	t.Helper()
	dir := harnessDir(t, "")
	return newHarnessIn(t, dir, dir)
}

// harnessDir makes a directory removed when t ends, in parent ("": the
// temporary directory). Not t.TempDir(): its path holds the test's name,
// and the MPS v3 namespace sockets under <dir>/mps must fit in 107 bytes,
// as on a node (mps.CheckSocketPaths).
func harnessDir(t testing.TB, parent string) string {
	t.Helper()
	// A name a stray one (a killed benchmark's, in /dev/shm) is known by.
	dir, err := os.MkdirTemp(parent, "tangram-h")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	return dir
}

func newHarnessIn(t testing.TB, dir, runDir string) *harness {
	t.Helper()
	for _, sub := range []string{filepath.Join(runDir, "cdi"), filepath.Join(dir, "state"), filepath.Join(runDir, "mps")} {
		if err := os.MkdirAll(sub, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	h := &harness{t: t, dir: dir, runDir: runDir, steps: &steps{}, modes: &daemon.RecordingComputeModeSetter{}}
	h.mig = stepMIG{Partitions: fakegpu.NewPartitions(filepath.Join(dir, "state", fakegpu.PartitionsFileName)), steps: h.steps}
	h.bootID = "boot-1"
	h.state = &stepState{steps: h.steps, Claims: checkpoint.Claims{
		Store: checkpoint.NewStore(filepath.Join(dir, "state", "checkpoint.json"),
			checkpoint.WithBootID(func() (string, error) { return h.bootID, nil })),
		StateLock: checkpoint.NewFileLock(filepath.Join(dir, "state", "checkpoint.lock")),
	}}
	store, err := cdi.NewSpecStore(filepath.Join(runDir, "cdi"))
	if err != nil {
		t.Fatal(err)
	}
	h.specs = &stepSpecs{ClaimSpecs: cdi.ClaimSpecs{Store: store, Hardware: cdi.NoHardware{}, Cards: CardsByDevice(testGPUs()),
		ClaimShmDir: h.claimDirs().ShmDir}, steps: h.steps}
	t.Cleanup(func() {
		if h.shares.Manager != nil {
			h.shares.Close()
		}
	})
	h.start()
	return h
}

func (h *harness) start() {
	h.t.Helper()
	if err := h.tryStart(); err != nil {
		h.t.Fatalf("starting driver: %v", err)
	}
}

// tryStart starts a new Driver and returns New's error.
func (h *harness) tryStart() error {
	layout := daemon.Layout{Root: filepath.Join(h.runDir, "mps")}
	h.daemon = &daemon.SimulatedDaemon{Layout: layout}
	var uuids []string
	for _, g := range testGPUs() {
		uuids = append(uuids, g.UUID)
	}
	if h.shares.Manager != nil {
		// The previous process's worker dies with it.
		h.shares.Close()
	}
	var running daemon.Daemon = h.daemon
	if h.wrapDaemon != nil {
		running = h.wrapDaemon(h.daemon)
	}
	opts := []mps.ManagerOption{mps.WithTiming(h.timing)}
	if h.managerOpts != nil {
		opts = append(opts, h.managerOpts(layout, uuids)...)
	}
	h.shares = stepShares{Manager: mps.NewManager(layout, running, h.modes, uuids, opts...), steps: h.steps}
	// The specs ask the current process's manager for the claims' MPS
	// client configuration, as in pkg/plugin/app/run.go.
	h.specs.MPS = h.shares
	d, err := New(context.Background(), Config{
		Inventory:  Inventory{NodeName: testNode, GPUs: testGPUs()},
		State:      h.state,
		Specs:      h.specs,
		Configs:    ResolveConfigs,
		KindConfig: KindConfig{Shares: h.shares, MIG: h.mig},
		ClaimDirs:  h.claimDirs(),
		// tangram-cdi-hook's records, swept at start-up.
		MemoryLimitRecords: h.memoryLimitRecords(),
		// The pipe directory recorded on MPS shares.
		MPSPipeDir: layout.PipeDir(),
		APIClients: APIClients{
			ListClaims: func(context.Context) ([]resourceapi.ResourceClaim, error) {
				return h.claims, h.listErr
			},
			ClaimStatus: h.status,
		},
	})
	if err != nil {
		return err
	}
	h.driver = d
	return nil
}

// claimDirs are the claims' own /dev/shm directories, under the MPS root
// as the plugin makes them (plain directories: no tmpfs in tests).
func (h *harness) claimDirs() daemon.ClaimDirs {
	return daemon.ClaimDirs{Layout: daemon.Layout{Root: filepath.Join(h.runDir, "mps")}}
}

// memoryLimitRecords are tangram-cdi-hook's records of the node, under
// the state directory as the plugin keeps them.
func (h *harness) memoryLimitRecords() records.Dir {
	return records.Dir{Path: MemoryLimitStateDir(filepath.Join(h.dir, "state"))}
}

// restart starts a new Driver as a new process would; crash hooks are off.
func (h *harness) restart() {
	h.t.Helper()
	h.steps.crashAt = ""
	h.start()
}

func (h *harness) prepare(claims ...*resourceapi.ResourceClaim) map[types.UID]kubeletplugin.PrepareResult {
	h.t.Helper()
	res, err := h.driver.PrepareResourceClaims(context.Background(), claims)
	if err != nil {
		h.t.Fatal(err)
	}
	return res
}

func (h *harness) unprepare(uids ...string) map[types.UID]error {
	h.t.Helper()
	var objs []kubeletplugin.NamespacedObject
	for _, uid := range uids {
		objs = append(objs, kubeletplugin.NamespacedObject{UID: types.UID(uid)})
	}
	res, err := h.driver.UnprepareResourceClaims(context.Background(), objs)
	if err != nil {
		h.t.Fatal(err)
	}
	return res
}

// crashing runs f and reports the step it crashed after (see steps), ""
// if it did not crash. f runs in the calling goroutine, so that the crash
// can be recovered here.
func crashing(f func()) (crashed string) {
	defer func() {
		if r := recover(); r != nil {
			sig, ok := r.(crashSignal)
			if !ok {
				panic(r)
			}
			crashed = sig.step
		}
	}()
	f()
	return ""
}

func (h *harness) prepareCrashing(claim *resourceapi.ResourceClaim) string {
	return crashing(func() {
		rec, err := h.driver.plan(claim, "")
		_ = h.driver.prepareOne(context.Background(), claim, podcheck.Result{}, plannedClaim{rec: rec, err: err})
	})
}

// startCrashing starts a new Driver, as restart does, and reports the step
// its recovery crashed after.
func (h *harness) startCrashing() string {
	return crashing(func() {
		if err := h.tryStart(); err != nil {
			h.t.Fatal(err)
		}
	})
}

func (h *harness) unprepareCrashing(uid string) string {
	return crashing(func() {
		_, _ = h.driver.UnprepareResourceClaims(context.Background(), []kubeletplugin.NamespacedObject{{UID: types.UID(uid)}})
	})
}

// assertConsistent checks the invariants that must hold between calls:
// every record is completed and has a spec, every spec has a record, MPS
// holders match the records' shares, and exactly the held cards are in
// EXCLUSIVE_PROCESS.
func (h *harness) assertConsistent() {
	h.t.Helper()
	records := h.driver.Records()
	var recordUIDs []string
	wantHolders := map[string][]string{}
	for uid, rec := range records {
		recordUIDs = append(recordUIDs, uid)
		if rec.State != prepared.PrepareCompleted {
			h.t.Errorf("claim %s left in phase %s", uid, rec.State)
		}
		for _, card := range rec.MPSCards() {
			wantHolders[card] = append(wantHolders[card], uid)
		}
	}
	sort.Strings(recordUIDs)
	specUIDs, err := h.specs.List(context.Background())
	if err != nil {
		h.t.Fatal(err)
	}
	if !reflect.DeepEqual(nilIfEmpty(specUIDs), nilIfEmpty(recordUIDs)) {
		h.t.Errorf("specs on disk %v, claim records %v: they must match", specUIDs, recordUIDs)
	}
	// Each record's /dev/shm directory and no other.
	var dirUIDs []string
	entries, err := os.ReadDir(h.claimDirs().Layout.ClaimsDir())
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		h.t.Fatal(err)
	}
	for _, e := range entries {
		dirUIDs = append(dirUIDs, e.Name())
	}
	if !reflect.DeepEqual(nilIfEmpty(dirUIDs), nilIfEmpty(recordUIDs)) {
		h.t.Errorf("claim /dev/shm directories %v, claim records %v: they must match", dirUIDs, recordUIDs)
	}
	for card := range wantHolders {
		sort.Strings(wantHolders[card])
	}
	if got := h.shares.Holders(); !reflect.DeepEqual(got, wantHolders) {
		h.t.Errorf("MPS holders %v, want %v", got, wantHolders)
	}
	for _, g := range testGPUs() {
		want := daemon.ComputeModeDefault
		if len(wantHolders[g.UUID]) > 0 {
			want = daemon.ComputeModeExclusiveProcess
		}
		if got := h.modes.Mode(g.UUID); got != want {
			h.t.Errorf("card %s compute mode %s, want %s", g.UUID, got, want)
		}
	}
	// The daemon is started and stopped in the background.
	waitCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := h.shares.WaitIdle(waitCtx); err != nil {
		h.t.Fatal(err)
	}
	if h.daemon.Running() != (len(wantHolders) > 0) {
		h.t.Errorf("MPS daemon running %v with %d shared cards", h.daemon.Running(), len(wantHolders))
	}
	h.assertMIG(records)
	// The stored checkpoint matches memory.
	stored, _, err := h.state.Load(context.Background())
	if err != nil {
		h.t.Fatal(err)
	}
	if !reflect.DeepEqual(stored, records) {
		h.t.Errorf("stored checkpoint %v differs from memory %v", stored, records)
	}
}

func nilIfEmpty(s []string) []string {
	if len(s) == 0 {
		return nil
	}
	return s
}

// assertMIG checks that the MIG card's instances are exactly those the
// records created (no orphan, none lost), besides the foreign ones (not
// Tangram's, which must be untouched), and that every instance a record
// names is the recorded one.
func (h *harness) assertMIG(records map[string]prepared.Claim, foreign ...gpu.MIGInstance) {
	h.t.Helper()
	card := testGPUs()[migCard]
	list, err := h.mig.List(context.Background(), card)
	if err != nil {
		h.t.Fatal(err)
	}
	want := map[string]bool{}
	for uid, rec := range records {
		for _, dev := range rec.Devices {
			if dev.MIG == nil {
				continue
			}
			if !dev.MIG.Created() {
				h.t.Errorf("claim %s: MIG device %s recorded without its instance", uid, dev.Device)
				continue
			}
			want[dev.MIG.UUID] = true
			if _, ok := migpartition.FindInstance(list, dev.MIG); !ok {
				h.t.Errorf("claim %s: MIG instance of %s (%+v) lost; the card has %v", uid, dev.Device, *dev.MIG, list)
			}
		}
	}
	for _, f := range foreign {
		want[f.UUID] = true
		if !slices.Contains(list, f) {
			h.t.Errorf("an instance Tangram did not create was touched: %v missing from %v", f, list)
		}
	}
	for _, inst := range list {
		if !want[inst.UUID] || inst.UUID == "" {
			h.t.Errorf("orphan MIG instance %v (UUID %q): no record names it", inst, inst.UUID)
		}
	}
}
