package plugin

import (
	"context"
	"encoding/json"
	"os"
	"strings"
	"testing"

	resourceapi "k8s.io/api/resource/v1"

	"github.com/tangram-gpu/tangram/pkg/device"
	"github.com/tangram-gpu/tangram/pkg/gpu"
	"github.com/tangram-gpu/tangram/pkg/plugin/claimstatus"
	"github.com/tangram-gpu/tangram/pkg/plugin/kinds/migpartition"
	"github.com/tangram-gpu/tangram/pkg/plugin/prepared"
)

// migClaim holds a 1g.10gb at memory slice 0 and a 3g.40gb at 4 of the MIG
// card: the demo's two partitions side by side.
func migClaim(uid string) *resourceapi.ResourceClaim {
	return claimWith(uid,
		wholeResult("small", device.MIGDeviceName(migCard, 19, 0)),
		wholeResult("large", device.MIGDeviceName(migCard, 9, 4)))
}

func (h *harness) migInstances() []gpu.MIGInstance {
	h.t.Helper()
	list, err := h.mig.List(context.Background(), testGPUs()[migCard])
	if err != nil {
		h.t.Fatal(err)
	}
	return list
}

// TestMIGPrepareAndUnprepare: prepare creates each partition's instance at
// its placement and records it (IDs, MIG UUID, profile), the CDI device
// shows the MIG UUID, prepare again returns the same, unprepare destroys
// both instances.
func TestMIGPrepareAndUnprepare(t *testing.T) {
	h := newHarness(t)
	claim := migClaim("m")
	res := h.prepare(claim)[claim.UID]
	if res.Err != nil {
		t.Fatal(res.Err)
	}
	h.assertConsistent()
	rec := h.driver.Records()["m"]
	list := h.migInstances()
	if len(list) != 2 || list[0].ProfileID != 19 || list[0].Placement.Start != 0 || list[1].ProfileID != 9 || list[1].Placement.Start != 4 {
		t.Fatalf("instances %v, want a 1g.10gb at 0 and a 3g.40gb at 4", list)
	}
	for i, dev := range rec.Devices {
		if dev.MIG == nil || dev.MIG.UUID != list[i].UUID || dev.MIG.Profile == "" || dev.Share || dev.GPUUUID != testGPUs()[migCard].UUID {
			t.Errorf("device %d recorded %+v (MIG %+v), want the instance %v of card %d, not a share", i, dev, dev.MIG, list[i], migCard)
		}
	}
	if rec.Devices[1].MemoryBytes != 40192<<20 {
		t.Errorf("3g.40gb recorded with %d bytes, want its profile's", rec.Devices[1].MemoryBytes)
	}
	env, _, err := h.specs.env(rec.Devices[0].CDIDeviceIDs)
	if err != nil {
		t.Fatal(err)
	}
	if env["NVIDIA_VISIBLE_DEVICES"] != list[0].UUID {
		t.Errorf("the 1g.10gb's container sees NVIDIA_VISIBLE_DEVICES=%q, want its MIG device %s only", env["NVIDIA_VISIBLE_DEVICES"], list[0].UUID)
	}
	if again := h.prepare(claim)[claim.UID]; again.Err != nil || len(h.migInstances()) != 2 {
		t.Errorf("prepare again: %v, %d instances", again.Err, len(h.migInstances()))
	}
	if err := h.unprepare("m")["m"]; err != nil {
		t.Fatal(err)
	}
	h.assertConsistent()
	if list := h.migInstances(); len(list) != 0 {
		t.Errorf("instances after unprepare: %v", list)
	}
}

// TestMIGOverlapRefused: the plugin re-checks what the scheduler's
// counters should have prevented: a partition over another claim's, and
// the card whole beside a partition.
func TestMIGOverlapRefused(t *testing.T) {
	h := newHarness(t)
	claim := migClaim("m")
	if err := h.prepare(claim)[claim.UID].Err; err != nil {
		t.Fatal(err)
	}
	for name, c := range map[string]*resourceapi.ResourceClaim{
		"1g.10gb inside the 3g.40gb": claimWith("o", wholeResult("gpu", device.MIGDeviceName(migCard, 19, 5))),
		"the card whole":             claimWith("w", wholeResult("gpu", device.CardDeviceName(migCard))),
	} {
		if err := h.prepare(c)[c.UID].Err; err == nil || !strings.Contains(err.Error(), "refusing") {
			t.Errorf("%s: %v, want a refusal", name, err)
		}
	}
	h.assertConsistent()
	if got := len(h.migInstances()); got != 2 {
		t.Errorf("%d instances, want the first claim's 2", got)
	}
}

// TestCrashDuringMIGPrepareThenRestart: a crash after every step of a MIG
// prepare (intent recorded, each instance created, each recorded, spec
// written, completed recorded), then a restart, leaves no orphan instance
// and no lost one; the kubelet's retry then prepares the claim. A crash
// inside a create (the GPU instance made, not its compute instance) is the
// crash after the intent with a bare GPU instance at the placement.
func TestCrashDuringMIGPrepareThenRestart(t *testing.T) {
	tests := []struct {
		step string
		n    int // the n-th such step of the prepare
		// bareGI leaves a GPU instance without compute instance at the
		// 1g.10gb's placement, as a crash inside NVML's create would.
		bareGI   bool
		wantKept bool
	}{
		{step: "save", n: 1},
		{step: "save", n: 1, bareGI: true},
		{step: "mig-create", n: 1},
		{step: "save", n: 2},
		{step: "mig-create", n: 2},
		{step: "save", n: 3},
		{step: "spec-write", n: 1},
		{step: "save", n: 4, wantKept: true},
	}
	for _, tt := range tests {
		name := tt.step + "-" + string(rune('0'+tt.n))
		if tt.bareGI {
			name += "-bare-gpu-instance"
		}
		t.Run(name, func(t *testing.T) {
			h := newHarness(t)
			claim := migClaim("m")
			h.steps.crashAt, h.steps.crashN = tt.step, h.steps.count(tt.step)+tt.n
			if got := h.prepareCrashing(claim); got != tt.step {
				t.Fatalf("crashed after %q, want %q", got, tt.step)
			}
			if tt.bareGI {
				if _, err := h.mig.InjectGPUInstance(testGPUs()[migCard], 19, 0, 1, false); err != nil {
					t.Fatal(err)
				}
			}
			h.restart()
			h.assertConsistent()
			if _, kept := h.driver.Records()["m"]; kept != tt.wantKept {
				t.Errorf("claim kept after restart = %v, want %v", kept, tt.wantKept)
			}
			if err := h.prepare(claim)[claim.UID].Err; err != nil {
				t.Fatal(err)
			}
			h.assertConsistent()
			if got := len(h.migInstances()); got != 2 {
				t.Errorf("%d instances after the retry, want 2", got)
			}
		})
	}
}

// TestCrashDuringMIGUnprepareThenRestart: a crash after every step of a
// MIG unprepare (spec removed, each instance destroyed, record removed)
// leaves, after a restart and the kubelet's retry, no instance and no
// record.
func TestCrashDuringMIGUnprepareThenRestart(t *testing.T) {
	for _, tt := range []struct {
		step string
		n    int
	}{{"spec-remove", 1}, {"mig-destroy", 1}, {"mig-destroy", 2}, {"save", 1}} {
		t.Run(tt.step+"-"+string(rune('0'+tt.n)), func(t *testing.T) {
			h := newHarness(t)
			claim := migClaim("m")
			if err := h.prepare(claim)[claim.UID].Err; err != nil {
				t.Fatal(err)
			}
			h.steps.crashAt, h.steps.crashN = tt.step, h.steps.count(tt.step)+tt.n
			if got := h.unprepareCrashing("m"); got != tt.step {
				t.Fatalf("crashed after %q, want %q", got, tt.step)
			}
			h.restart()
			h.assertConsistent()
			if err := h.unprepare("m")["m"]; err != nil {
				t.Errorf("retried unprepare: %v", err)
			}
			h.assertConsistent()
			if list := h.migInstances(); len(list) != 0 || len(h.driver.Records()) != 0 {
				t.Errorf("after unprepare: instances %v, records %v", list, h.driver.Records())
			}
		})
	}
}

// TestMIGRecordedButGoneIsRecreated: a prepared claim's instance that is
// gone at start-up (the card was reset) is created again at its placement
// and the record and spec repaired; one whose compute instance alone is
// gone gets it back.
func TestMIGRecordedButGoneIsRecreated(t *testing.T) {
	for _, tt := range []struct {
		name   string
		damage func(h *harness)
	}{
		{"card reset: every instance gone", func(h *harness) {
			if err := os.Remove(h.mig.Path()); err != nil {
				t.Fatal(err)
			}
		}},
		{"the 3g.40gb destroyed, then its GPU instance back without compute instance", func(h *harness) {
			card := testGPUs()[migCard]
			inst := h.migInstances()[1]
			if err := h.mig.Partitions.Destroy(context.Background(), card, inst.GPUInstanceID); err != nil {
				t.Fatal(err)
			}
			if _, err := h.mig.InjectGPUInstance(card, 9, 4, 4, false); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t)
			claim := migClaim("m")
			if err := h.prepare(claim)[claim.UID].Err; err != nil {
				t.Fatal(err)
			}
			before := h.driver.Records()["m"]
			tt.damage(h)
			rs := &recordingStatus{}
			h.status = rs
			h.restart()
			h.assertConsistent()
			after, kept := h.driver.Records()["m"]
			if !kept || after.State != prepared.PrepareCompleted {
				t.Fatalf("claim after restart: %+v kept=%v, want it completed", after, kept)
			}
			for i := range after.Devices {
				if got, want := after.Devices[i].CDIDeviceIDs, before.Devices[i].CDIDeviceIDs; strings.Join(got, ",") != strings.Join(want, ",") {
					t.Errorf("device %d CDI IDs %v, want the same as before %v", i, got, want)
				}
			}
			env, _, err := h.specs.env(after.Devices[1].CDIDeviceIDs)
			if err != nil {
				t.Fatal(err)
			}
			if env["NVIDIA_VISIBLE_DEVICES"] != after.Devices[1].MIG.UUID {
				t.Errorf("spec names %q, want the re-created instance %s", env["NVIDIA_VISIBLE_DEVICES"], after.Devices[1].MIG.UUID)
			}
			statuses := rs.claims[claim.Namespace+"/"+claim.Name]
			if len(statuses) != 2 {
				t.Fatalf("status rewritten with %d devices, want 2", len(statuses))
			}
			var data claimstatus.DeviceData
			if err := json.Unmarshal(statuses[1].Data.Raw, &data); err != nil || data.UUID != after.Devices[1].MIG.UUID {
				t.Errorf("status.devices names %q (%v), want the re-created instance %s", data.UUID, err, after.Devices[1].MIG.UUID)
			}
		})
	}
}

// TestMIGForeignInstanceNeverTouched: an instance no record names (an
// admin's) is never destroyed: a partition overlapping it is refused with
// a message that says whose it is and what to do, nothing else is
// disturbed, and restarts leave it alone.
func TestMIGForeignInstanceNeverTouched(t *testing.T) {
	h := newHarness(t)
	card := testGPUs()[migCard]
	foreign, err := h.mig.InjectGPUInstance(card, 19, 0, 1, true)
	if err != nil {
		t.Fatal(err)
	}
	claim := migClaim("m") // its 1g.10gb is at 0, the admin's
	err = h.prepare(claim)[claim.UID].Err
	if err == nil || !strings.Contains(err.Error(), "Tangram did not create") || !strings.Contains(err.Error(), "nvidia-smi mig") {
		t.Errorf("prepare over a foreign instance: %v, want a refusal naming it and saying what to do", err)
	}
	h.assertMIG(h.driver.Records(), foreign)
	other := claimWith("o", wholeResult("gpu", device.MIGDeviceName(migCard, 9, 4)))
	if err := h.prepare(other)[other.UID].Err; err != nil {
		t.Fatal(err)
	}
	h.restart()
	h.assertMIG(h.driver.Records(), foreign)
	if err := h.unprepare("o")["o"]; err != nil {
		t.Fatal(err)
	}
	h.restart()
	h.assertMIG(h.driver.Records(), foreign)
}

// TestMIGDeviceStatus: the claim's status.devices names each partition's
// MIG device UUID (what nvidia-smi and CUDA name), its profile, placement,
// instance IDs and parent card, its profile's memory, and says the GPU
// holds its limits in hardware.
func TestMIGDeviceStatus(t *testing.T) {
	h := newHarness(t)
	rs := &recordingStatus{}
	h.driver.cfg.ClaimStatus = rs
	claim := migClaim("m")
	if err := h.prepare(claim)[claim.UID].Err; err != nil {
		t.Fatal(err)
	}
	list := h.migInstances()
	statuses := rs.claims[claim.Namespace+"/"+claim.Name]
	if len(statuses) != 2 {
		t.Fatalf("%d status entries, want 2", len(statuses))
	}
	for i, want := range []struct {
		device, profile string
		start, size     int
		memory          string
	}{{device.MIGDeviceName(migCard, 19, 0), "1g.10gb", 0, 1, "9856Mi"}, {device.MIGDeviceName(migCard, 9, 4), "3g.40gb", 4, 4, "40192Mi"}} {
		st := statuses[i]
		var data claimstatus.DeviceData
		if err := json.Unmarshal(st.Data.Raw, &data); err != nil {
			t.Fatal(err)
		}
		wantMIG := claimstatus.MIGData{Profile: want.profile, ProfileID: list[i].ProfileID, PlacementStart: want.start, PlacementSize: want.size,
			GPUInstanceID: list[i].GPUInstanceID, ComputeInstanceID: list[i].ComputeInstanceID, ParentUUID: testGPUs()[migCard].UUID}
		if st.Device != want.device || data.UUID != list[i].UUID || data.MIG == nil || *data.MIG != wantMIG || data.Memory != want.memory || data.Enforcement != claimstatus.EnforcementMIG {
			t.Errorf("status %d: device %s data %+v (MIG %+v), want %s with UUID %s, %s memory, MIG %+v", i, st.Device, data, data.MIG, want.device, list[i].UUID, want.memory, wantMIG)
		}
	}
}

// TestMIGDeviceOf: the health monitor finds the partition of an event's
// GPU instance: a prepared one, one no claim holds (still a partition of
// the card), none for an unknown instance or a card not in MIG mode.
func TestMIGDeviceOf(t *testing.T) {
	h := newHarness(t)
	claim := migClaim("m")
	if err := h.prepare(claim)[claim.UID].Err; err != nil {
		t.Fatal(err)
	}
	other, err := h.mig.InjectGPUInstance(testGPUs()[migCard], 19, 2, 1, true)
	if err != nil {
		t.Fatal(err)
	}
	list := h.migInstances()
	tests := []struct {
		index, gi int
		want      string
	}{
		{migCard, list[0].GPUInstanceID, device.MIGDeviceName(migCard, 19, 0)},
		{migCard, h.driver.Records()["m"].Devices[1].MIG.GPUInstanceIDValue(), device.MIGDeviceName(migCard, 9, 4)},
		{migCard, other.GPUInstanceID, device.MIGDeviceName(migCard, 19, 2)},
		{migCard, 99, ""},
		{0, 1, ""},
	}
	for _, tt := range tests {
		got, ok := h.driver.MIGPartitions().MIGDeviceOf(tt.index, tt.gi)
		if got != tt.want || ok != (tt.want != "") {
			t.Errorf("MIGDeviceOf(%d, %d) = %q %v, want %q", tt.index, tt.gi, got, ok, tt.want)
		}
	}
}

// TestResolveMIGDevice: a partition's device name resolves to its card,
// profile and placement; a name the card cannot hold now is refused with
// what changed and what to do.
func TestResolveMIGDevice(t *testing.T) {
	cards := CardsByDevice(testGPUs())
	off := testGPUs()
	off[migCard].MIG.Enabled = false
	tests := []struct {
		name    string
		cards   map[string]gpu.GPU
		device  string
		want    *prepared.MIG
		wantErr string
	}{
		{name: "3g at 4", cards: cards, device: "gpu-3-mig-9-4",
			want: &prepared.MIG{ParentIndex: 3, ProfileID: 9, Profile: "3g.40gb", Start: 4, Size: 4}},
		{name: "card left MIG mode", cards: CardsByDevice(off), device: "gpu-3-mig-9-4", wantErr: "not in MIG mode now"},
		{name: "no such profile", cards: cards, device: "gpu-3-mig-14-0", wantErr: "has no MIG profile 14"},
		{name: "no such placement", cards: cards, device: "gpu-3-mig-9-2", wantErr: "has no placement at memory slice 2"},
		{name: "no such card", cards: cards, device: "gpu-9-mig-9-0", wantErr: "not a GPU of this node"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			card, mig, err := resolveDevice(tt.cards, tt.device)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil || card.Index != migCard || mig == nil || *mig != *tt.want {
				t.Errorf("resolveDevice = %d %+v %v, want card %d and %+v", card.Index, mig, err, migCard, tt.want)
			}
		})
	}
}

// TestCrashDuringMIGRecreateThenRestart: a start-up that re-creates the
// instances of a card reset and crashes before it saved their new GPU
// instance IDs (right after a create, or after the first save) leaves
// records naming the old IDs beside the new instances. The next start-up
// takes each for its record's (same card, profile and placement) instead
// of failing on it as a taken placement, and unprepare destroys them:
// nothing leaks. Claim "o", prepared first, holds the lowest GPU instance
// ID before the reset, so that "m"'s instances come back under other IDs.
// Each re-created instance is saved before the next create: the checkpoint
// the crash leaves names the ones before it, and keeps claim "o".
func TestCrashDuringMIGRecreateThenRestart(t *testing.T) {
	for _, tt := range []struct {
		step  string
		n     int
		saved int // "m"'s re-created instances the checkpoint names
	}{{"mig-create", 1, 0}, {"mig-create", 2, 1}, {"save", 1, 1}} {
		t.Run(tt.step+"-"+string(rune('0'+tt.n)), func(t *testing.T) {
			h := newHarness(t)
			other := claimWith("o", wholeResult("gpu", device.MIGDeviceName(migCard, 19, 1)))
			claim := migClaim("m")
			for _, c := range []*resourceapi.ResourceClaim{other, claim} {
				if err := h.prepare(c)[c.UID].Err; err != nil {
					t.Fatal(err)
				}
			}
			before := h.driver.Records()["m"]
			if err := os.Remove(h.mig.Path()); err != nil {
				t.Fatal(err)
			}
			h.steps.crashAt, h.steps.crashN = tt.step, h.steps.count(tt.step)+tt.n
			if got := h.startCrashing(); got != tt.step {
				t.Fatalf("start-up crashed after %q, want %q", got, tt.step)
			}
			saved, _, err := h.state.Load(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if _, ok := saved["o"]; !ok {
				t.Errorf("the checkpoint the crash left lost claim o: %v", saved)
			}
			list := h.migInstances()
			for i, dev := range saved["m"].Devices {
				inst, found := migpartition.FindInstance(list, &prepared.MIG{ProfileID: dev.MIG.ProfileID, Start: dev.MIG.Start})
				if recorded := found && dev.MIG.GPUInstanceIDValue() == inst.GPUInstanceID; recorded != (i < tt.saved) {
					t.Errorf("the checkpoint names %s's re-created instance: %v, want %v (recorded %+v, card %v)", dev.Device, recorded, i < tt.saved, dev.MIG, list)
				}
			}
			h.restart()
			h.assertConsistent()
			after := h.driver.Records()["m"]
			if *after.Devices[0].MIG.GPUInstanceID == *before.Devices[0].MIG.GPUInstanceID {
				t.Fatalf("the 1g.10gb came back under its old GPU instance ID %d: the test needs another", *before.Devices[0].MIG.GPUInstanceID)
			}
			if err := h.unprepare("m", "o"); err["m"] != nil || err["o"] != nil {
				t.Fatal(err)
			}
			h.assertConsistent()
			if list := h.migInstances(); len(list) != 0 {
				t.Errorf("instances after unprepare %v, want none", list)
			}
		})
	}
}
