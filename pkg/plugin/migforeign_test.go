package plugin

import (
	"context"
	"errors"
	"maps"
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/dynamic-resource-allocation/resourceslice"
	"k8s.io/klog/v2/ktesting"

	"github.com/tangram-gpu/tangram/pkg/device"
	"github.com/tangram-gpu/tangram/pkg/dra"
	"github.com/tangram-gpu/tangram/pkg/gpu"
	"github.com/tangram-gpu/tangram/pkg/plugin/prepared"
	"github.com/tangram-gpu/tangram/pkg/plugin/taints"
	"github.com/tangram-gpu/tangram/pkg/resourceslices"
)

// loseCheckpoint damages the checkpoint as a node can: gone (deleted, or
// a rebuild interrupted after the store moved a corrupt file aside) or
// corrupt (the store moves it aside at the next load).
var loseCheckpoint = map[string]func(t *testing.T, h *harness){
	"missing": func(t *testing.T, h *harness) {
		if err := os.Remove(h.state.Store.Path()); err != nil {
			t.Fatal(err)
		}
	},
	"corrupt": func(t *testing.T, h *harness) {
		if err := os.WriteFile(h.state.Store.Path(), []byte("{not json"), 0o600); err != nil {
			t.Fatal(err)
		}
	},
}

// TestMIGInstanceOfLostCheckpointGoesWithItsClaim: a prepare crashes after
// creating a MIG instance, before its spec, and the checkpoint that named
// the instance is then lost (missing or corrupt). The instance sits at
// exactly the placement of a partition of a claim allocated on this node
// (the API server's allocation names the partition device): start-up
// takes it for that claim's, gives the claim back its intent record and
// rolls it back, destroying the instance, as it does when the checkpoint
// survives. Nothing is left foreign: the kubelet's retry prepares the
// claim (before, it was refused, "taken by an instance Tangram did not
// create", for ever, and the instance leaked), and unprepare destroys what
// the retry made. A crash after the spec is the rebuild from the spec,
// which keeps the claim prepared with the instances it adopted.
func TestMIGInstanceOfLostCheckpointGoesWithItsClaim(t *testing.T) {
	tests := []struct {
		step string
		n    int // the n-th such step of the prepare
		// bareGI leaves a GPU instance without compute instance at the
		// 1g.10gb's placement, as a crash inside NVML's create would.
		bareGI    bool
		instances int // what the crash leaves on the card
		wantKept  bool
	}{
		{step: "save", n: 1, bareGI: true, instances: 1},
		{step: "mig-create", n: 1, instances: 1},
		{step: "save", n: 2, instances: 1},
		{step: "mig-create", n: 2, instances: 2},
		{step: "save", n: 3, instances: 2},
		{step: "spec-write", n: 1, instances: 2, wantKept: true},
	}
	for _, damage := range []string{"missing", "corrupt"} {
		for _, tt := range tests {
			name := damage + "/" + tt.step + "-" + string(rune('0'+tt.n))
			if tt.bareGI {
				name += "-bare-gpu-instance"
			}
			t.Run(name, func(t *testing.T) {
				h := newHarness(t)
				claim := migClaim("m")
				h.claims = []resourceapi.ResourceClaim{*claim}
				h.steps.crashAt, h.steps.crashN = tt.step, h.steps.count(tt.step)+tt.n
				if got := h.prepareCrashing(claim); got != tt.step {
					t.Fatalf("crashed after %q, want %q", got, tt.step)
				}
				if tt.bareGI {
					if _, err := h.mig.InjectGPUInstance(testGPUs()[migCard], 19, 0, 1, false); err != nil {
						t.Fatal(err)
					}
				}
				if got := len(h.migInstances()); got != tt.instances {
					t.Fatalf("the crash left %d instances, want %d", got, tt.instances)
				}
				loseCheckpoint[damage](t, h)
				h.restart()
				h.assertConsistent() // no instance that no record names
				rec, kept := h.driver.Records()["m"]
				if kept != tt.wantKept {
					t.Fatalf("claim kept after restart = %v (%+v), want %v", kept, rec, tt.wantKept)
				}
				if !kept && len(h.migInstances()) != 0 {
					t.Errorf("instances after start-up %v, want the claim's rolled back with it", h.migInstances())
				}
				if taints := h.driver.MIGPartitions().MIGTaints(); len(taints) != 0 {
					t.Errorf("partitions tainted %v: the claim's instances were taken for foreign", taints)
				}
				if err := h.prepare(claim)[claim.UID].Err; err != nil {
					t.Fatalf("the kubelet's retry: %v", err)
				}
				h.assertConsistent()
				if got := len(h.migInstances()); got != 2 {
					t.Errorf("%d instances after the retry, want 2", got)
				}
				if err := h.unprepare("m")["m"]; err != nil {
					t.Fatal(err)
				}
				h.assertConsistent()
				if list := h.migInstances(); len(list) != 0 {
					t.Errorf("instances after unprepare %v, want none: they leaked", list)
				}
			})
		}
	}
}

// TestMIGLostCheckpointAdoptsOnlyTheExactPlacement: after a lost
// checkpoint only an instance at exactly a claim's card, profile and
// placement is the claim's. One elsewhere on the claim's card, or of
// another profile at the same start, or overlapping a partition of the
// claim, stays foreign: never destroyed, its overlapping partitions
// tainted, and the claim's retry is refused when a partition of it
// overlaps the instance, prepared otherwise. A claim whose partition
// overlaps that of a claim rebuilt from its spec (a stale allocation)
// takes nothing from it.
func TestMIGLostCheckpointAdoptsOnlyTheExactPlacement(t *testing.T) {
	card := testGPUs()[migCard]
	tests := []struct {
		name string
		// crash is the prepare step of claim m the crash follows: "save"
		// 1 leaves only its intent, "mig-create" 1 its 1g.10gb at 0.
		crash string
		// profile, start and size of the instance made after the crash.
		profile, start, size int
		wantRetryErr         string
		wantTaintedBy        string
	}{
		{name: "1g at slice 2, beside both partitions", crash: "save",
			profile: 19, start: 2, size: 1, wantTaintedBy: device.MIGDeviceName(migCard, 19, 2)},
		{name: "1g at slice 5, inside the 3g's placement", crash: "save",
			profile: 19, start: 5, size: 1, wantRetryErr: "Tangram did not create", wantTaintedBy: device.MIGDeviceName(migCard, 19, 5)},
		{name: "3g at slice 0, the 1g's start but another profile", crash: "save",
			profile: 9, start: 0, size: 4, wantRetryErr: "Tangram did not create", wantTaintedBy: device.MIGDeviceName(migCard, 9, 0)},
		{name: "7g, the whole card", crash: "save",
			profile: 0, start: 0, size: 8, wantRetryErr: "Tangram did not create", wantTaintedBy: device.MIGDeviceName(migCard, 0, 0)},
		{name: "the claim's 1g at 0 created, and a 1g at slice 2", crash: "mig-create",
			profile: 19, start: 2, size: 1, wantTaintedBy: device.MIGDeviceName(migCard, 19, 2)},
	}
	for damage := range loseCheckpoint {
		for _, tt := range tests {
			t.Run(damage+"/"+tt.name, func(t *testing.T) {
				h := newHarness(t)
				claim := migClaim("m")
				h.claims = []resourceapi.ResourceClaim{*claim}
				h.steps.crashAt, h.steps.crashN = tt.crash, h.steps.count(tt.crash)+1
				if got := h.prepareCrashing(claim); got != tt.crash {
					t.Fatalf("crashed after %q, want %q", got, tt.crash)
				}
				foreign, err := h.mig.InjectGPUInstance(card, tt.profile, tt.start, tt.size, true)
				if err != nil {
					t.Fatal(err)
				}
				loseCheckpoint[damage](t, h)
				h.restart()
				h.assertConsistentBeside(foreign)
				if len(h.driver.Records()) != 0 {
					t.Errorf("records after restart %v, want none", h.driver.Records())
				}
				taints := h.driver.MIGPartitions().MIGTaints()
				if len(taints) == 0 {
					t.Fatal("no partition tainted, want those overlapping the foreign instance")
				}
				for name, ts := range taints {
					if len(ts) != 1 || ts[0].Value != tt.wantTaintedBy {
						t.Errorf("%s tainted %+v, want by %s", name, ts, tt.wantTaintedBy)
					}
				}
				err = h.prepare(claim)[claim.UID].Err
				switch {
				case tt.wantRetryErr == "" && err != nil:
					t.Fatalf("the kubelet's retry: %v", err)
				case tt.wantRetryErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantRetryErr)):
					t.Fatalf("the kubelet's retry: %v, want a refusal with %q", err, tt.wantRetryErr)
				}
				h.assertConsistentBeside(foreign)
				if err := h.unprepare("m")["m"]; err != nil {
					t.Fatal(err)
				}
				h.restart()
				h.assertConsistentBeside(foreign)
				if list := h.migInstances(); !reflect.DeepEqual(list, []gpu.MIGInstance{foreign}) {
					t.Errorf("instances at the end %v, want the foreign one only", list)
				}
			})
		}
	}

	t.Run("stale allocation over a claim rebuilt from its spec", func(t *testing.T) {
		h := newHarness(t)
		owner := claimWith("a", wholeResult("gpu", device.MIGDeviceName(migCard, 9, 4)))
		if err := h.prepare(owner)[owner.UID].Err; err != nil {
			t.Fatal(err)
		}
		before := h.driver.Records()["a"]
		// Claim z holds the same 3g.40gb in the API server and was never
		// prepared: its allocation is stale.
		stale := claimWith("z", wholeResult("gpu", device.MIGDeviceName(migCard, 9, 4)))
		h.claims = []resourceapi.ResourceClaim{*owner, *stale}
		loseCheckpoint["missing"](t, h)
		h.restart()
		h.assertConsistent()
		records := h.driver.Records()
		if _, ok := records["z"]; ok || len(records) != 1 || !reflect.DeepEqual(records["a"], before) {
			t.Errorf("records after restart %v, want claim a's as before only", records)
		}
	})

	t.Run("a prepared claim whose rebuild fails is not rolled back with its instances", func(t *testing.T) {
		h := newHarness(t)
		claim := migClaim("m")
		if err := h.prepare(claim)[claim.UID].Err; err != nil {
			t.Fatal(err)
		}
		running := h.migInstances()
		h.claims = []resourceapi.ResourceClaim{*claim}
		loseCheckpoint["corrupt"](t, h)
		// Its spec cannot be rewritten: rebuild gives up on the claim,
		// whose containers may still run on its instances.
		h.specs.failWrite = errInjected
		h.restart()
		h.specs.failWrite = nil
		h.assertConsistentBeside(running...)
		if len(h.driver.Records()) != 0 {
			t.Errorf("records %v, want none", h.driver.Records())
		}
	})
}

// TestMIGForeignInstancePartitionsTainted: while a MIG instance Tangram
// did not create is on a card, every partition overlapping it is published
// with a NoSchedule taint naming it (the allocator gives none of them out,
// so no pod waits in ContainerCreating for a prepare that is refused), and
// the instance is never touched; once it is gone the partitions are
// offered again. The plugin finds it at start-up (also after a lost
// checkpoint, when it is at no allocated claim's placement, or its claim
// is gone from the API server), at the poll, and at a prepare it refuses.
func TestMIGForeignInstancePartitionsTainted(t *testing.T) {
	card := testGPUs()[migCard]
	inject := func(t *testing.T, h *harness) gpu.MIGInstance {
		t.Helper()
		inst, err := h.mig.InjectGPUInstance(card, 19, 2, 1, true)
		if err != nil {
			t.Fatal(err)
		}
		return inst
	}
	// The test card's partitions overlapping memory slice 2: the 1g.10gb
	// there, the 3g.40gb at 0 and the 7g.80gb.
	at2 := []string{device.MIGDeviceName(migCard, 19, 2), device.MIGDeviceName(migCard, 9, 0), device.MIGDeviceName(migCard, 0, 0)}
	at0 := []string{device.MIGDeviceName(migCard, 19, 0), device.MIGDeviceName(migCard, 9, 0), device.MIGDeviceName(migCard, 0, 0)}
	tests := []struct {
		name string
		// setup leaves an instance no record names on the card and makes
		// the driver find it; it returns the instance.
		setup        func(t *testing.T, h *harness) gpu.MIGInstance
		wantTainted  []string
		wantRecorded []string // claims the driver holds meanwhile
	}{
		{name: "found at start-up", wantTainted: at2, setup: func(t *testing.T, h *harness) gpu.MIGInstance {
			inst := inject(t, h)
			h.restart()
			return inst
		}},
		{name: "found at the poll", wantTainted: at2, setup: func(t *testing.T, h *harness) gpu.MIGInstance {
			inst := inject(t, h)
			changed := h.driver.MIGPartitions().MIGChanged()
			h.driver.MIGPartitions().RefreshForeign(context.Background())
			select {
			case <-changed:
			default:
				t.Error("MIGChanged not closed when an instance was found")
			}
			return inst
		}},
		{name: "found by a prepare it refuses", wantTainted: at2, setup: func(t *testing.T, h *harness) gpu.MIGInstance {
			inst := inject(t, h)
			c := claimWith("o", wholeResult("gpu", device.MIGDeviceName(migCard, 9, 0)))
			if err := h.prepare(c)[c.UID].Err; err == nil {
				t.Error("prepare over the foreign instance succeeded")
			}
			return inst
		}},
		{name: "after a lost checkpoint, at no allocated claim's placement", wantTainted: at2, wantRecorded: []string{"k"},
			setup: func(t *testing.T, h *harness) gpu.MIGInstance {
				keep := claimWith("k", wholeResult("gpu", device.MIGDeviceName(migCard, 9, 4)))
				if err := h.prepare(keep)[keep.UID].Err; err != nil {
					t.Fatal(err)
				}
				inst := inject(t, h)
				h.claims = []resourceapi.ResourceClaim{*keep}
				loseCheckpoint["corrupt"](t, h)
				h.restart()
				return inst
			}},
		{name: "after a lost checkpoint, the instance of a claim gone from the API server", wantTainted: at0,
			setup: func(t *testing.T, h *harness) gpu.MIGInstance {
				claim := migClaim("m")
				h.steps.crashAt, h.steps.crashN = "mig-create", h.steps.count("mig-create")+1
				if got := h.prepareCrashing(claim); got != "mig-create" {
					t.Fatalf("crashed after %q", got)
				}
				loseCheckpoint["missing"](t, h)
				h.claims = nil
				h.restart()
				return h.migInstances()[0]
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t)
			foreign := tt.setup(t, h)
			h.assertConsistentBeside(foreign)
			if got := slices.Sorted(maps.Keys(h.driver.Records())); !slices.Equal(got, tt.wantRecorded) {
				t.Errorf("records %v, want %v", got, tt.wantRecorded)
			}
			taints := h.driver.MIGPartitions().MIGTaints()
			wantValue := device.MIGDeviceName(migCard, foreign.ProfileID, foreign.Placement.Start)
			if got := slices.Sorted(maps.Keys(taints)); !slices.Equal(got, slices.Sorted(slices.Values(tt.wantTainted))) {
				t.Errorf("tainted partitions %v, want %v", got, tt.wantTainted)
			}
			for name, ts := range taints {
				if len(ts) != 1 || ts[0].Key != device.TaintKeyMIGPlacementTaken || ts[0].Value != wantValue ||
					ts[0].Effect != resourceapi.DeviceTaintEffectNoSchedule || ts[0].TimeAdded == nil {
					t.Errorf("%s: taints %+v, want one %s=%s:NoSchedule with its time", name, ts, device.TaintKeyMIGPlacementTaken, wantValue)
				}
			}
			published := publishedDevices(t, h.driver)
			for _, name := range tt.wantTainted {
				if d, ok := published[name]; !ok || len(d.Taints) != 1 || d.Taints[0].Key != device.TaintKeyMIGPlacementTaken {
					t.Errorf("published %s: %+v, want it tainted", name, d.Taints)
				}
			}
			if d := published[device.MIGDeviceName(migCard, 19, 6)]; len(d.Taints) != 0 {
				t.Errorf("the 1g.10gb at 6, clear of the instance, published with taints %v", d.Taints)
			}

			// A restart leaves it, and its taints, as they are.
			h.restart()
			h.assertConsistentBeside(foreign)
			if got := slices.Sorted(maps.Keys(h.driver.MIGPartitions().MIGTaints())); !slices.Equal(got, slices.Sorted(slices.Values(tt.wantTainted))) {
				t.Errorf("tainted partitions after a restart %v, want %v", got, tt.wantTainted)
			}

			// The admin destroys it: the next poll offers them again.
			if err := h.mig.Partitions.Destroy(context.Background(), card, foreign.GPUInstanceID); err != nil {
				t.Fatal(err)
			}
			changed := h.driver.MIGPartitions().MIGChanged()
			h.driver.MIGPartitions().RefreshForeign(context.Background())
			select {
			case <-changed:
			default:
				t.Error("MIGChanged not closed when the instance went")
			}
			if taints := h.driver.MIGPartitions().MIGTaints(); len(taints) != 0 {
				t.Errorf("taints after the instance went: %v", taints)
			}
			for name, d := range publishedDevices(t, h.driver) {
				if len(d.Taints) != 0 {
					t.Errorf("%s still published with taints %v", name, d.Taints)
				}
			}
			h.assertConsistent()
		})
	}
}

// TestMIGTaintedPartitionsAreNotAllocated: what the publisher publishes
// while an instance Tangram did not create holds memory slice 2 keeps
// kube-scheduler's allocator off every partition overlapping it (the
// second 3g.40gb does not fit), and the publisher republishes when the
// instance goes, after which the allocator gives out both 3g.40gbs.
func TestMIGTaintedPartitionsAreNotAllocated(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	h := newHarness(t)
	card := testGPUs()[migCard]
	foreign, err := h.mig.InjectGPUInstance(card, 19, 2, 1, true)
	if err != nil {
		t.Fatal(err)
	}
	h.driver.MIGPartitions().RefreshForeign(ctx)
	base, err := resourceslices.DriverResources(testGPUs(), resourceslices.Options{NodeName: testNode})
	if err != nil {
		t.Fatal(err)
	}
	publishedCh := make(chan resourceslice.DriverResources, 10)
	pub := &taints.Publisher{Node: testNode, Resources: base, MIG: h.driver.MIGPartitions(), Metrics: NewMetrics(),
		Publish: func(_ context.Context, res resourceslice.DriverResources) error {
			publishedCh <- res
			return nil
		}}
	go pub.Run(ctx)

	allocate3g := func(res resourceslice.DriverResources) (got []string, err error) {
		node := &dra.Node{Name: testNode, Slices: resourceslices.ResourceSlices(testNode, &res), Classes: device.DeviceClasses()}
		for _, s := range node.Slices {
			if err := resourceslices.ValidateResourceSlice(s); err != nil {
				t.Fatalf("published slice invalid: %v", err)
			}
		}
		for _, name := range []string{"first", "second"} {
			a, err := node.Allocate(ctx, dra.Claim(name, nil, dra.MIGPartition("mig", "3g.40gb")))
			if err != nil {
				return got, err
			}
			got = append(got, dra.Devices(a.Status.Allocation)...)
		}
		return got, nil
	}
	got, err := allocate3g(<-publishedCh)
	if !errors.Is(err, dra.ErrUnschedulable) || !slices.Equal(got, []string{device.MIGDeviceName(migCard, 9, 4)}) {
		t.Errorf("while slice 2 is taken: allocated %v (%v), want the 3g.40gb at 4 only, then unschedulable", got, err)
	}

	if err := h.mig.Partitions.Destroy(ctx, card, foreign.GPUInstanceID); err != nil {
		t.Fatal(err)
	}
	h.driver.MIGPartitions().RefreshForeign(ctx)
	select {
	case res := <-publishedCh:
		got, err := allocate3g(res)
		if err != nil || len(got) != 2 {
			t.Errorf("once the instance is gone: allocated %v (%v), want both 3g.40gbs", got, err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("not republished after the instance went")
	}
}

// publishedDevices are the devices the taint publisher would publish now
// for the test inventory, by name.
func publishedDevices(t *testing.T, d *Driver) map[string]resourceapi.Device {
	t.Helper()
	base, err := resourceslices.DriverResources(testGPUs(), resourceslices.Options{NodeName: testNode})
	if err != nil {
		t.Fatal(err)
	}
	res, _, _ := (&taints.Publisher{Node: testNode, Resources: base, MIG: d.MIGPartitions(), Metrics: NewMetrics()}).Tainted()
	out := map[string]resourceapi.Device{}
	for _, s := range res.Pools[testNode].Slices {
		for _, dev := range s.Devices {
			out[dev.Name] = dev
		}
	}
	return out
}

// assertConsistentBeside is assertConsistent on a card that also holds
// instances Tangram did not create, which must be untouched: every record
// completed with its spec and each spec a record's, the stored checkpoint
// as in memory, and the card's instances exactly the records' and these.
func (h *harness) assertConsistentBeside(foreign ...gpu.MIGInstance) {
	h.t.Helper()
	records := h.driver.Records()
	var uids []string
	for uid, rec := range records {
		uids = append(uids, uid)
		if rec.State != prepared.PrepareCompleted {
			h.t.Errorf("claim %s left in phase %s", uid, rec.State)
		}
	}
	specs, err := h.specs.List(context.Background())
	if err != nil {
		h.t.Fatal(err)
	}
	if !slices.Equal(slices.Sorted(slices.Values(specs)), slices.Sorted(slices.Values(uids))) {
		h.t.Errorf("specs on disk %v, claim records %v: they must match", specs, uids)
	}
	stored, _, err := h.state.Load(context.Background())
	if err != nil {
		h.t.Fatal(err)
	}
	if !reflect.DeepEqual(stored, records) {
		h.t.Errorf("stored checkpoint %v differs from memory %v", stored, records)
	}
	h.assertMIG(records, foreign...)
}

// TestTaintPublisherMergesXIDAndMIGTaints: a partition over an instance
// Tangram did not create, on a card with a card-wide XID, carries both
// taints, one per key; a partition clear of the instance only the XID's;
// the card's recovery leaves the MIG taint.
func TestTaintPublisherMergesXIDAndMIGTaints(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	h := newHarness(t)
	if _, err := h.mig.InjectGPUInstance(testGPUs()[migCard], 19, 2, 1, true); err != nil {
		t.Fatal(err)
	}
	h.driver.MIGPartitions().RefreshForeign(ctx)
	monitor := newTestMonitor(t)
	base, err := resourceslices.DriverResources(testGPUs(), resourceslices.Options{NodeName: testNode})
	if err != nil {
		t.Fatal(err)
	}
	pub := &taints.Publisher{Node: testNode, Resources: base, Health: monitor, MIG: h.driver.MIGPartitions(), Metrics: NewMetrics()}
	keys := func(name string) []string {
		res, _, _ := pub.Tainted()
		var out []string
		for _, s := range res.Pools[testNode].Slices {
			for _, d := range s.Devices {
				if d.Name == name {
					for _, taint := range d.Taints {
						out = append(out, taint.Key)
					}
				}
			}
		}
		return out
	}
	monitor.Handle(ctx, gpu.HealthEvent{Index: migCard, Kind: gpu.HealthEventXID, XID: 79})
	over, clear := device.MIGDeviceName(migCard, 9, 0), device.MIGDeviceName(migCard, 9, 4)
	if got, want := keys(over), []string{device.TaintKeyMIGPlacementTaken, "gpu.tangram.dev/xid"}; !slices.Equal(got, want) {
		t.Errorf("%s taints %v, want %v", over, got, want)
	}
	if got, want := keys(clear), []string{"gpu.tangram.dev/xid"}; !slices.Equal(got, want) {
		t.Errorf("%s taints %v, want %v", clear, got, want)
	}
	monitor.Handle(ctx, gpu.HealthEvent{Index: migCard, Kind: gpu.HealthEventRecovered})
	if got, want := keys(over), []string{device.TaintKeyMIGPlacementTaken}; !slices.Equal(got, want) {
		t.Errorf("%s taints after the card's recovery %v, want %v", over, got, want)
	}
	if got := keys(clear); len(got) != 0 {
		t.Errorf("%s taints after the card's recovery %v, want none", clear, got)
	}
}
