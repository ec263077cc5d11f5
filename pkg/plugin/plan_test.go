package plugin

import (
	"context"
	"errors"
	"fmt"
	"os"
	"reflect"
	"slices"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/utils/ptr"

	"github.com/tangram-gpu/tangram/pkg/gpu"
	"github.com/tangram-gpu/tangram/pkg/plugin/prepared"
)

func TestPlanClaim(t *testing.T) {
	cards := map[string]gpu.GPU{}
	for _, g := range testGPUs() {
		cards["gpu-"+string(rune('0'+g.Index))] = g
	}
	foreign := wholeResult("nic", "eth0")
	foreign.Driver = "net.example.com"
	otherPool := wholeResult("gpu", "gpu-0")
	otherPool.Pool = "node-b"
	tooMuch := shareResult("gpu", "gpu-0", "s", "81Gi", "")
	badCompute := shareResult("gpu", "gpu-0", "s", "1Gi", "101")
	// (2^64+1) Gi in bytes: Quantity.Value() wraps it to 1 Gi. (Written
	// "18446744073709551617Gi" it is clamped to 2^63-1 when parsed.)
	hugeMemory := shareResult("gpu", "gpu-0", "s", "19807040628566084399459729408", "")
	// 2^64+50: Quantity.Value() wraps it to 50.
	hugeCompute := shareResult("gpu", "gpu-0", "s", "1Gi", "18446744073709551666")
	negativeMemory := shareResult("gpu", "gpu-0", "s", "-1Gi", "")
	admin := wholeResult("gpu", "gpu-3")
	admin.AdminAccess = ptr.To(true)
	adminNoMemory := shareResult("monitor", "gpu-0", "m", "0", "")
	adminNoMemory.AdminAccess = ptr.To(true)
	noMemory := shareResult("gpu", "gpu-0", "s", "0", "")
	tests := []struct {
		name      string
		claim     *resourceapi.ResourceClaim
		wantErr   string
		wantShare []bool
		wantAdmin []bool
	}{
		{name: "results of other drivers are ignored", claim: claimWith("c", foreign, wholeResult("gpu", "gpu-1")), wantShare: []bool{false}, wantAdmin: []bool{false}},
		{name: "share and whole", claim: claimWith("c", shareResult("a", "gpu-0", "s", "1Gi", "10"), wholeResult("b", "gpu-1")), wantShare: []bool{true, false}, wantAdmin: []bool{false, false}},
		{name: "admin access", claim: claimWith("c", admin), wantShare: []bool{false}, wantAdmin: []bool{true}},
		{name: "admin access asking for no memory", claim: claimWith("c", adminNoMemory), wantShare: []bool{false}, wantAdmin: []bool{true}},
		{name: "no memory without admin access", claim: claimWith("c", noMemory), wantErr: `request "gpu": consumed no memory on gpu-0; memory 0 is only for admin access (monitoring), ask for at least one memory step (e.g. 256Mi) or no memory for a whole card, then recreate the claim`},
		{name: "another node's pool", claim: claimWith("c", otherPool), wantErr: `request "gpu": device gpu-0 is in pool "node-b", but this node's pool is "node-a"; the claim was allocated for another node`},
		{name: "more memory than the card", claim: claimWith("c", tooMuch), wantErr: `request "gpu": consumed memory 81Gi on gpu-0 is outside 1..85899345920 bytes, the card's memory; the claim was allocated against a different inventory, delete and recreate it`},
		{name: "memory beyond 64 bits", claim: claimWith("c", hugeMemory), wantErr: `request "gpu": consumed memory 19807040628566084399459729408 on gpu-0: beyond the largest number this plugin handles (9223372036854775807); the allocation is wrong, delete and recreate the claim`},
		{name: "negative memory", claim: claimWith("c", negativeMemory), wantErr: `request "gpu": consumed memory -1Gi on gpu-0 is outside 1..85899345920 bytes, the card's memory; the claim was allocated against a different inventory, delete and recreate it`},
		{name: "compute beyond 64 bits", claim: claimWith("c", hugeCompute), wantErr: `request "gpu": consumed compute 18446744073709551666 on gpu-0: beyond the largest number this plugin handles (9223372036854775807); the allocation is wrong, delete and recreate the claim`},
		{name: "compute over 100", claim: claimWith("c", badCompute), wantErr: `request "gpu": consumed compute 101 on gpu-0 is outside 0..100 percent; the claim was allocated against a different inventory, delete and recreate it`},
		{name: "not allocated", claim: func() *resourceapi.ResourceClaim { c := claimWith("c"); c.Status.Allocation = nil; return c }(), wantErr: "claim default/claim-c is not allocated"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			plan, err := planClaim(tt.claim, testNode, cards, nil)
			if got := errString(err); got != tt.wantErr {
				t.Fatalf("error %q\nwant  %q", got, tt.wantErr)
			}
			if err != nil {
				return
			}
			var shares, admins []bool
			for _, p := range plan.Devices {
				shares = append(shares, p.Share)
				admins = append(admins, p.AdminAccess)
			}
			if !equalBools(shares, tt.wantShare) || !equalBools(admins, tt.wantAdmin) {
				t.Errorf("share flags %v admin flags %v, want %v %v", shares, admins, tt.wantShare, tt.wantAdmin)
			}
		})
	}
}

func TestAdminAccessIsNotAHolder(t *testing.T) {
	h := newHarness(t)
	if err := h.prepare(claimWith("w", wholeResult("gpu", "gpu-3")))["w"].Err; err != nil {
		t.Fatal(err)
	}
	admin := wholeResult("gpu", "gpu-3")
	admin.AdminAccess = ptr.To(true)
	if err := h.prepare(claimWith("monitor", admin))["monitor"].Err; err != nil {
		t.Errorf("admin access to a card held whole was refused: %v", err)
	}
}

// An admin-access result must not become a holder of its card when the
// plugin restarts from its checkpoint.
func TestAdminAccessSurvivesRestart(t *testing.T) {
	h := newHarness(t)
	admin := wholeResult("gpu", "gpu-3")
	admin.AdminAccess = ptr.To(true)
	if err := h.prepare(claimWith("monitor", admin))["monitor"].Err; err != nil {
		t.Fatal(err)
	}
	h.restart()
	h.assertConsistent()
	if !h.driver.Records()["monitor"].Devices[0].AdminAccess {
		t.Fatal("restored record lost its admin access flag")
	}
	if err := h.prepare(claimWith("w", wholeResult("gpu", "gpu-3")))["w"].Err; err != nil {
		t.Errorf("after a restart, a whole card was refused because of an admin-access claim: %v", err)
	}
}

// Admin access to a shareable card that names a memory amount is not a
// share: it gets the card without MPS limits and needs no MPS daemon.
func TestAdminAccessToAShareableCard(t *testing.T) {
	h := newHarness(t)
	admin := shareResult("gpu", "gpu-2", "a1", "10Gi", "")
	admin.AdminAccess = ptr.To(true)
	res := h.prepare(claimWith("monitor", admin))["monitor"]
	if res.Err != nil {
		t.Fatal(res.Err)
	}
	h.assertConsistent()
	env, mounts, err := h.specs.env(cdiIDs(res))
	if err != nil {
		t.Fatal(err)
	}
	// No MPS: only the claim's own /dev/shm.
	if _, ok := env["CUDA_MPS_PIPE_DIRECTORY"]; ok || !slices.Equal(mounts, []string{h.claimDirs().ShmDir("monitor") + ":/dev/shm"}) {
		t.Errorf("admin access got MPS edits: env %v mounts %v", env, mounts)
	}
	if got := env["TANGRAM_SHARING_BACKEND"]; got != "exclusive" {
		t.Errorf("TANGRAM_SHARING_BACKEND = %q, want exclusive", got)
	}
}

// Admin access (memory 0, as the published policy allows) to a card held
// whole and to one held in MPS shares is prepared beside the holders: no MPS
// accounting, no limits, and the holders' records stay as they were.
func TestAdminAccessOnBusyCards(t *testing.T) {
	h := newHarness(t)
	for _, c := range []*resourceapi.ResourceClaim{
		claimWith("holder", wholeResult("gpu", "gpu-0")),
		claimWith("tenant", shareResult("gpu", "gpu-1", "s1", "40Gi", "50")),
	} {
		if err := h.prepare(c)[c.UID].Err; err != nil {
			t.Fatal(err)
		}
	}
	before := h.driver.Records()
	acquires := h.steps.count("mps-acquire")
	for _, device := range []string{"gpu-0", "gpu-1"} {
		admin := shareResult("monitor", device, "m-"+device, "0", "")
		admin.AdminAccess = ptr.To(true)
		claim := claimWith("monitor-"+device, admin)
		res := h.prepare(claim)[claim.UID]
		if res.Err != nil {
			t.Fatalf("admin access to busy %s: %v", device, res.Err)
		}
		env, mounts, err := h.specs.env(cdiIDs(res))
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := env["CUDA_MPS_PIPE_DIRECTORY"]; ok || !slices.Equal(mounts, []string{h.claimDirs().ShmDir(string(claim.UID)) + ":/dev/shm"}) {
			t.Errorf("admin access to %s got MPS edits: env %v mounts %v", device, env, mounts)
		}
		if got := env["TANGRAM_SHARING_BACKEND"]; got != "exclusive" {
			t.Errorf("admin access to %s: TANGRAM_SHARING_BACKEND = %q, want exclusive (no limits)", device, got)
		}
	}
	if got := h.steps.count("mps-acquire"); got != acquires {
		t.Errorf("admin access touched MPS: %d acquires, want %d", got, acquires)
	}
	after := h.driver.Records()
	for uid, rec := range before {
		if !reflect.DeepEqual(after[uid], rec) {
			t.Errorf("holder %s changed:\n got %+v\nwant %+v", uid, after[uid], rec)
		}
	}
	h.assertConsistent()
}

// Redoing a completed claim whose spec vanished must not forget the claim
// when the checkpoint cannot be written: its MPS share is still held, and
// only its record lets unprepare release it.
func TestFailedRedoKeepsTheCompletedRecord(t *testing.T) {
	h := newHarness(t)
	claim := claimWith("c1", shareResult("gpu", "gpu-0", "s1", "1Gi", ""))
	if err := h.prepare(claim)[claim.UID].Err; err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(h.specs.Store.Path("c1")); err != nil {
		t.Fatal(err)
	}
	h.state.beforeSave = func() error { return errInjected }
	if err := h.prepare(claim)[claim.UID].Err; !errors.Is(err, errInjected) {
		t.Fatalf("prepare with a failing checkpoint: error %v, want the injected failure", err)
	}
	h.state.beforeSave = nil
	if err := h.unprepare("c1")["c1"]; err != nil {
		t.Fatal(err)
	}
	h.assertConsistent()
}

func TestDecidePrepare(t *testing.T) {
	completed := &prepared.Claim{State: prepared.PrepareCompleted}
	started := &prepared.Claim{State: prepared.PrepareStarted}
	tests := []struct {
		rec            *prepared.Claim
		specPresent    bool
		sameAllocation bool
		want           prepareAction
	}{
		{nil, false, false, actionPrepare},
		{completed, true, true, actionReturnExisting},
		{completed, false, true, actionPrepare},
		{started, true, true, actionRollbackThenPrepare},
		{completed, true, false, actionRollbackThenPrepare},
	}
	for _, tt := range tests {
		if got := decidePrepare(tt.rec, tt.specPresent, tt.sameAllocation); got != tt.want {
			t.Errorf("decidePrepare(%v, spec %v, same allocation %v) = %v, want %v", tt.rec, tt.specPresent, tt.sameAllocation, got, tt.want)
		}
	}
}

func TestMetrics(t *testing.T) {
	h := newHarness(t)
	h.prepare(claimWith("w", wholeResult("gpu", "gpu-0")), claimWith("s", shareResult("gpu", "gpu-1", "s", "1Gi", "")),
		claimWith("bad", wholeResult("gpu", "gpu-7")))
	h.unprepare("w")
	families, err := h.driver.cfg.Metrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	// name{label=value} -> value; histograms by sample count.
	got := map[string]float64{}
	for _, f := range families {
		for _, m := range f.GetMetric() {
			key := f.GetName()
			for _, l := range m.GetLabel() {
				key += "{" + l.GetName() + "=" + l.GetValue() + "}"
			}
			switch {
			case m.Counter != nil:
				got[key] = m.GetCounter().GetValue()
			case m.Gauge != nil:
				got[key] = m.GetGauge().GetValue()
			case m.Histogram != nil:
				got[key] = float64(m.GetHistogram().GetSampleCount())
			}
		}
	}
	want := map[string]float64{
		"tangram_kubelet_plugin_prepare_claims_total{result=success}":   2,
		"tangram_kubelet_plugin_prepare_claims_total{result=error}":     1,
		"tangram_kubelet_plugin_unprepare_claims_total{result=success}": 1,
		"tangram_kubelet_plugin_prepare_duration_seconds":               3,
		"tangram_kubelet_plugin_unprepare_duration_seconds":             1,
		"tangram_kubelet_plugin_prepared_claims":                        1,
		"tangram_kubelet_plugin_prepared_devices{kind=whole}":           0,
		"tangram_kubelet_plugin_prepared_devices{kind=share}":           1,
	}
	for key, w := range want {
		if g, ok := got[key]; !ok || g != w {
			t.Errorf("%s = %v (present %v), want %v", key, g, ok, w)
		}
	}
}

func equalBools(a, b []bool) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestPrepareClaimWithoutOurDevices(t *testing.T) {
	h := newHarness(t)
	foreign := wholeResult("nic", "eth0")
	foreign.Driver = "net.example.com"
	res := h.prepare(claimWith("other", foreign))["other"]
	if res.Err != nil || len(res.Devices) != 0 {
		t.Errorf("result %+v, want no devices and no error", res)
	}
	h.assertConsistent()
	if len(h.driver.Records()) != 0 {
		t.Errorf("records %v, want none", h.driver.Records())
	}
}

func TestPrepareRedoesAClaimWhoseSpecVanished(t *testing.T) {
	h := newHarness(t)
	claim := claimWith("c1", shareResult("gpu", "gpu-0", "s1", "1Gi", ""))
	first := h.prepare(claim)[claim.UID]
	if first.Err != nil {
		t.Fatal(first.Err)
	}
	if err := os.Remove(h.specs.Store.Path("c1")); err != nil {
		t.Fatal(err)
	}
	second := h.prepare(claim)[claim.UID]
	if second.Err != nil {
		t.Fatal(second.Err)
	}
	if !reflect.DeepEqual(first, second) {
		t.Errorf("redone prepare returned %+v, want %+v", second, first)
	}
	if n := h.steps.count("spec-write"); n != 2 {
		t.Errorf("spec written %d times, want 2", n)
	}
	// The share stayed accounted throughout: no release, no daemon restart.
	if n, starts := h.steps.count("mps-release"), h.daemon.Starts(); n != 0 || starts != 1 {
		t.Errorf("MPS released %d times and daemon started %d times, want 0 and 1", n, starts)
	}
	h.assertConsistent()
}

func TestHandleError(t *testing.T) {
	h := newHarness(t)
	var fatal []error
	h.driver.cfg.OnFatal = func(err error) { fatal = append(fatal, err) }
	ctx := context.Background()
	// What the ResourceSlice controller reports is wrapped as recoverable.
	h.driver.HandleError(ctx, fmt.Errorf("wrapped: %w", kubeletplugin.ErrRecoverable), "publishing")
	if len(fatal) != 0 {
		t.Errorf("a recoverable error was fatal: %v", fatal)
	}
	h.driver.HandleError(ctx, errors.New("socket gone"), "DRA gRPC server failed")
	if len(fatal) != 1 || fatal[0].Error() != "DRA gRPC server failed: socket gone" {
		t.Errorf("fatal errors %v, want the gRPC failure", fatal)
	}
}

// Records written by a plugin without allocation digests are compared by
// their devices.
func TestSameAllocation(t *testing.T) {
	dev := prepared.Device{Request: "gpu", Device: "gpu-0", ShareID: "s1", Share: true, MemoryBytes: 10 << 30, ComputePercent: 20}
	other := func(f func(*prepared.Device)) prepared.Claim {
		d := dev
		f(&d)
		return prepared.Claim{Devices: []prepared.Device{d}}
	}
	legacy := prepared.Claim{Devices: []prepared.Device{dev}}
	tests := []struct {
		name       string
		have, want prepared.Claim
		same       bool
	}{
		{"equal digests", prepared.Claim{Allocation: "a"}, prepared.Claim{Allocation: "a"}, true},
		{"different digests, same devices", prepared.Claim{Allocation: "a", Devices: legacy.Devices}, prepared.Claim{Allocation: "b", Devices: legacy.Devices}, false},
		{"legacy record, same devices", legacy, prepared.Claim{Allocation: "b", Devices: legacy.Devices}, true},
		{"legacy record, other card", legacy, other(func(d *prepared.Device) { d.Device = "gpu-1" }), false},
		{"legacy record, other share", legacy, other(func(d *prepared.Device) { d.ShareID = "s2" }), false},
		{"legacy record, other memory", legacy, other(func(d *prepared.Device) { d.MemoryBytes = 20 << 30 }), false},
		{"legacy record, other compute", legacy, other(func(d *prepared.Device) { d.ComputePercent = 30 }), false},
		{"legacy record, more devices", legacy, prepared.Claim{Devices: []prepared.Device{dev, dev}}, false},
	}
	for _, tt := range tests {
		if got := sameAllocation(tt.have, tt.want); got != tt.same {
			t.Errorf("%s: sameAllocation = %v, want %v", tt.name, got, tt.same)
		}
	}
}

// isShare is the one definition of "share" (device.HoldsWholeCard) that
// the accounting, the CDI edits and the checkpoint use.
func TestIsShare(t *testing.T) {
	card := gpu.GPU{UUID: "GPU-0", MemoryBytes: 80 << 30}
	oddCard := gpu.GPU{UUID: "GPU-0", MemoryBytes: 81559 << 20}
	noMemory := wholeResult("gpu", "gpu-0")
	noMemory.ShareID = ptr.To(types.UID("s1"))
	admin := shareResult("gpu", "gpu-0", "s1", "20Gi", "")
	admin.AdminAccess = ptr.To(true)
	tests := []struct {
		name        string
		r           resourceapi.DeviceRequestAllocationResult
		card        gpu.GPU
		allocatable int64
		want        bool
	}{
		{"no share ID", wholeResult("gpu", "gpu-0"), card, 0, false},
		{"part of the memory", shareResult("gpu", "gpu-0", "s1", "20Gi", ""), card, 0, true},
		{"all of the memory", shareResult("gpu", "gpu-0", "s1", "80Gi", ""), card, 0, false},
		{"compute only: no memory recorded", noMemory, card, 0, false},
		{"card memory unknown", shareResult("gpu", "gpu-0", "s1", "20Gi", ""), gpu.GPU{UUID: "GPU-0"}, 0, true},
		{"all of the allocatable memory of a card that is not a whole number of steps", shareResult("gpu", "gpu-0", "s1", "81408Mi", ""), oddCard, 81408 << 20, false},
		{"one step less than the allocatable memory", shareResult("gpu", "gpu-0", "s1", "81152Mi", ""), oddCard, 81408 << 20, true},
		{"admin access to part of the memory", admin, card, 0, false},
	}
	for _, tt := range tests {
		if got := isShare(tt.r, tt.card, tt.allocatable); got != tt.want {
			t.Errorf("%s: isShare = %v, want %v", tt.name, got, tt.want)
		}
	}
}

// A real card's memory is rarely a whole number of share steps (an H100
// reports 81559 MiB, of which 81408 MiB can be allocated: the app's
// TestAllocatableMemoryOfAnUnevenCard); a claim that names no memory gets
// the published default, which is less than the card's memory, and must
// still be prepared as a whole card: no MPS limits, no share accounting.
func TestWholeMemoryOfAnUnevenCardIsAWholeCard(t *testing.T) {
	card := gpu.GPU{Index: 0, UUID: "GPU-0", MemoryBytes: 81559 << 20}
	allocatable := map[string]int64{"gpu-0": 81408 << 20}
	cards := map[string]gpu.GPU{"gpu-0": card}
	for _, tc := range []struct {
		memory    string
		wantShare bool
	}{
		{memory: "81408Mi", wantShare: false},
		{memory: "81152Mi", wantShare: true},
	} {
		plan, err := planClaim(claimWith("c", shareResult("gpu", "gpu-0", "s1", tc.memory, "")), testNode, cards, allocatable)
		if err != nil {
			t.Fatal(err)
		}
		if plan.Devices[0].Share != tc.wantShare {
			t.Errorf("consumed %s: share = %v, want %v", tc.memory, plan.Devices[0].Share, tc.wantShare)
		}
	}
}
