package plugin

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"

	configapi "github.com/tangram-gpu/tangram/api/gpu/v1alpha1"
	"github.com/tangram-gpu/tangram/pkg/config"
	"github.com/tangram-gpu/tangram/pkg/device"
	"github.com/tangram-gpu/tangram/pkg/plugin/claimstatus"
	"github.com/tangram-gpu/tangram/pkg/plugin/mps/daemon"
)

func cdiIDs(res kubeletplugin.PrepareResult) []string {
	var out []string
	for _, d := range res.Devices {
		out = append(out, d.CDIDeviceIDs...)
	}
	return out
}

func TestPrepareShapes(t *testing.T) {
	tests := []struct {
		name        string
		claim       *resourceapi.ResourceClaim
		wantIDs     []string
		wantHolders map[string][]string
		// Expected CDI environment.
		wantBackends, wantMemLimit, wantThreads string
	}{
		{
			name:         "whole card never touches MPS",
			claim:        claimWith("c1", wholeResult("gpu", "gpu-0")),
			wantIDs:      []string{"k8s.gpu.tangram.dev/claim=c1-gpu-0"},
			wantHolders:  map[string][]string{},
			wantBackends: "exclusive",
		},
		{
			name:         "share with memory only",
			claim:        claimWith("c2", shareResult("gpu", "gpu-1", "s1", "20Gi", "")),
			wantIDs:      []string{"k8s.gpu.tangram.dev/claim=c2-gpu-1-s1"},
			wantHolders:  map[string][]string{"GPU-1": {"c2"}},
			wantBackends: "mps", wantMemLimit: "GPU-1=20480M",
		},
		{
			name:         "share with memory and compute",
			claim:        claimWith("c3", shareResult("gpu", "gpu-1", "s2", "20Gi", "40")),
			wantIDs:      []string{"k8s.gpu.tangram.dev/claim=c3-gpu-1-s2"},
			wantHolders:  map[string][]string{"GPU-1": {"c3"}},
			wantBackends: "mps", wantMemLimit: "GPU-1=20480M", wantThreads: "40",
		},
		{
			name:         "all memory of a shareable card is a whole card",
			claim:        claimWith("c4", shareResult("gpu", "gpu-2", "s3", "80Gi", "40")),
			wantIDs:      []string{"k8s.gpu.tangram.dev/claim=c4-gpu-2-s3"},
			wantHolders:  map[string][]string{},
			wantBackends: "exclusive",
		},
		{
			name: "several devices in one claim, shares on two cards",
			claim: claimWith("c5", wholeResult("big", "gpu-0"),
				shareResult("small", "gpu-1", "s4", "10Gi", ""), shareResult("small", "gpu-2", "s5", "10Gi", "")),
			wantIDs: []string{"k8s.gpu.tangram.dev/claim=c5-gpu-0", "k8s.gpu.tangram.dev/claim=c5-gpu-1-s4",
				"k8s.gpu.tangram.dev/claim=c5-gpu-2-s5", "k8s.gpu.tangram.dev/claim=c5-claim"},
			wantHolders:  map[string][]string{"GPU-1": {"c5"}, "GPU-2": {"c5"}},
			wantBackends: "exclusive,mps,mps", wantMemLimit: "GPU-1=10240M,GPU-2=10240M",
		},
		{
			name: "backend none accounts shares without MPS",
			claim: withConfig(claimWith("c6", shareResult("gpu", "gpu-3", "s6", "10Gi", "")),
				resourceapi.AllocationConfigSourceClass, `{"apiVersion":"gpu.tangram.dev/v1alpha1","kind":"GpuConfig","sharing":{"backend":"none"}}`),
			wantIDs:      []string{"k8s.gpu.tangram.dev/claim=c6-gpu-3-s6"},
			wantHolders:  map[string][]string{},
			wantBackends: "none",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t)
			res := h.prepare(tt.claim)[tt.claim.UID]
			if res.Err != nil {
				t.Fatal(res.Err)
			}
			if got := cdiIDs(res); !reflect.DeepEqual(got, tt.wantIDs) {
				t.Errorf("CDI IDs %v, want %v", got, tt.wantIDs)
			}
			if got := h.shares.Holders(); !reflect.DeepEqual(got, tt.wantHolders) {
				t.Errorf("MPS holders %v, want %v", got, tt.wantHolders)
			}
			env, mounts, err := h.specs.env(cdiIDs(res))
			if err != nil {
				t.Fatal(err)
			}
			if got := env["TANGRAM_SHARING_BACKEND"]; got != tt.wantBackends {
				t.Errorf("TANGRAM_SHARING_BACKEND=%q, want %q", got, tt.wantBackends)
			}
			if got := env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"]; got != tt.wantMemLimit {
				t.Errorf("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=%q, want %q", got, tt.wantMemLimit)
			}
			if got := env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"]; got != tt.wantThreads {
				t.Errorf("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=%q, want %q", got, tt.wantThreads)
			}
			mps := h.shares.ClientConfig(string(tt.claim.UID))
			// Every claim gets its own /dev/shm; with classic MPS shares
			// beside the daemon's pipe directory.
			wantMounts := []string{h.claimDirs().ShmDir(string(tt.claim.UID)) + ":/dev/shm"}
			if len(tt.wantHolders) > 0 {
				wantMounts = nil
				for _, m := range mps.Mounts {
					wantMounts = append(wantMounts, m.HostPath+":"+m.ContainerPath)
				}
				if got, want := env["CUDA_MPS_PIPE_DIRECTORY"], mps.Mounts[0].HostPath; got != want {
					t.Errorf("CUDA_MPS_PIPE_DIRECTORY=%q, want %q", got, want)
				}
			}
			// The runtime orders mounts by path; the order carries no meaning.
			slices.Sort(mounts)
			slices.Sort(wantMounts)
			if !reflect.DeepEqual(mounts, wantMounts) {
				t.Errorf("mounts %v, want %v", mounts, wantMounts)
			}
			if len(tt.wantHolders) == 0 && (h.steps.count("mps-acquire") > 0 || h.daemon.Starts() > 0) {
				t.Errorf("a claim without MPS shares touched MPS: acquires %d, daemon starts %d",
					h.steps.count("mps-acquire"), h.daemon.Starts())
			}
			h.assertConsistent()
			if err := h.unprepare(string(tt.claim.UID))[tt.claim.UID]; err != nil {
				t.Fatal(err)
			}
			h.assertConsistent()
			if len(h.driver.Records()) != 0 {
				t.Errorf("records left after unprepare: %v", h.driver.Records())
			}
		})
	}
}

func TestPrepareRefusesOverlap(t *testing.T) {
	tests := []struct {
		name    string
		first   *resourceapi.ResourceClaim
		second  *resourceapi.ResourceClaim
		wantErr string
	}{
		{
			name:    "whole card held whole by another claim",
			first:   claimWith("a", wholeResult("gpu", "gpu-0")),
			second:  claimWith("b", wholeResult("gpu", "gpu-0")),
			wantErr: "preparing claim default/claim-b: refusing to give gpu-0 (GPU-0) whole to claim default/claim-b: claim default/claim-a already holds it whole; the kubelet retries, and this clears once that claim is unprepared (e.g. its pod was just force-deleted); if it lasts, the allocation is stale or wrong: delete and recreate the claim",
		},
		{
			name:    "whole card while another claim holds a share",
			first:   claimWith("a", shareResult("gpu", "gpu-1", "s1", "10Gi", "")),
			second:  claimWith("b", wholeResult("gpu", "gpu-1")),
			wantErr: "preparing claim default/claim-b: refusing to give gpu-1 (GPU-1) whole to claim default/claim-b: claim default/claim-a holds a share of it; the kubelet retries, and this clears once that claim is unprepared (e.g. its pod was just force-deleted); if it lasts, the allocation is stale or wrong: delete and recreate the claim",
		},
		{
			name:    "share on a card held whole",
			first:   claimWith("a", wholeResult("gpu", "gpu-2")),
			second:  claimWith("b", shareResult("gpu", "gpu-2", "s1", "10Gi", "")),
			wantErr: "preparing claim default/claim-b: refusing a share of gpu-2 (GPU-2) to claim default/claim-b: claim default/claim-a holds the card whole; the kubelet retries, and this clears once that claim is unprepared (e.g. its pod was just force-deleted); if it lasts, the allocation is stale or wrong: delete and recreate the claim",
		},
		{
			name:   "two shares on one card coexist",
			first:  claimWith("a", shareResult("gpu", "gpu-3", "s1", "10Gi", "")),
			second: claimWith("b", shareResult("gpu", "gpu-3", "s2", "10Gi", "50")),
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t)
			if err := h.prepare(tt.first)[tt.first.UID].Err; err != nil {
				t.Fatal(err)
			}
			err := h.prepare(tt.second)[tt.second.UID].Err
			if got := errString(err); got != tt.wantErr {
				t.Fatalf("error %q\nwant  %q", got, tt.wantErr)
			}
			// A refused claim leaves nothing behind.
			h.assertConsistent()
			if _, found := h.driver.Records()[string(tt.second.UID)]; found != (tt.wantErr == "") {
				t.Errorf("record of the second claim present = %v", found)
			}
		})
	}
}

func TestPrepareErrorsLeaveNothing(t *testing.T) {
	tests := []struct {
		name    string
		claim   *resourceapi.ResourceClaim
		setup   func(h *harness)
		wantErr string
	}{
		{
			name: "invalid GpuConfig names the field",
			claim: withConfig(claimWith("c1", shareResult("gpu", "gpu-0", "s1", "10Gi", "")),
				resourceapi.AllocationConfigSourceClaim, `{"apiVersion":"gpu.tangram.dev/v1alpha1","kind":"GpuConfig","sharing":{"backend":"hami"}}`),
			wantErr: "sharing.backend",
		},
		{
			name:    "device not on this node",
			claim:   claimWith("c2", wholeResult("gpu", "gpu-9")),
			wantErr: `request "gpu": device gpu-9 is not a GPU of this node (it has gpu-0, gpu-1, gpu-2, gpu-3)`,
		},
		{
			name:    "spec write fails after MPS was acquired",
			claim:   claimWith("c3", shareResult("gpu", "gpu-0", "s1", "10Gi", "")),
			setup:   func(h *harness) { h.specs.failWrite = errInjected },
			wantErr: "writing the CDI spec: injected failure",
		},
		{
			name:  "compute mode cannot be set",
			claim: claimWith("c4", shareResult("gpu", "gpu-0", "s1", "10Gi", "")),
			setup: func(h *harness) {
				h.modes.Fail = func(string, daemon.ComputeMode) error { return errInjected }
			},
			wantErr: "preparing card GPU-0 for MPS shares: injected failure",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t)
			if tt.setup != nil {
				tt.setup(h)
			}
			err := h.prepare(tt.claim)[tt.claim.UID].Err
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("error %v, want one containing %q", err, tt.wantErr)
			}
			h.modes.Fail = nil
			h.assertConsistent()
			if len(h.driver.Records()) != 0 {
				t.Errorf("records left after a failed prepare: %v", h.driver.Records())
			}
		})
	}
}

func TestPrepareIsIdempotent(t *testing.T) {
	h := newHarness(t)
	claim := claimWith("c1", shareResult("gpu", "gpu-0", "s1", "10Gi", "20"))
	first := h.prepare(claim)[claim.UID]
	second := h.prepare(claim)[claim.UID]
	if first.Err != nil || second.Err != nil {
		t.Fatal(first.Err, second.Err)
	}
	if !reflect.DeepEqual(first, second) {
		t.Errorf("second prepare returned %+v, first %+v", second, first)
	}
	if n := h.steps.count("spec-write"); n != 1 {
		t.Errorf("spec written %d times, want 1", n)
	}
	if n := h.steps.count("mps-acquire"); n != 1 {
		t.Errorf("MPS acquired %d times, want 1", n)
	}
	// The answer survives a restart too.
	h.restart()
	third := h.prepare(claim)[claim.UID]
	if !reflect.DeepEqual(first, third) {
		t.Errorf("prepare after restart returned %+v, want %+v", third, first)
	}
	h.assertConsistent()
	for range 2 {
		if err := h.unprepare("c1")[types.UID("c1")]; err != nil {
			t.Fatal(err)
		}
	}
	if err := h.unprepare("never-prepared")[types.UID("never-prepared")]; err != nil {
		t.Errorf("unpreparing an unknown claim: %v", err)
	}
	h.assertConsistent()
}

func TestSharingDisabledRefusesShares(t *testing.T) {
	h := newHarness(t)
	d, err := New(context.Background(), Config{Inventory: Inventory{NodeName: testNode, GPUs: testGPUs()}, State: h.state, Specs: h.specs, Configs: ResolveConfigs,
		MPSPipeDir: daemon.Layout{Root: filepath.Join(h.runDir, "mps")}.PipeDir()})
	if err != nil {
		t.Fatal(err)
	}
	claim := claimWith("c1", shareResult("gpu", "gpu-0", "s1", "10Gi", ""))
	res, _ := d.PrepareResourceClaims(context.Background(), []*resourceapi.ResourceClaim{claim})
	want := "preparing claim default/claim-c1: the claim holds shares of [GPU-0], but sharing is disabled on node node-a; use a whole card or a node with --sharing=enabled"
	if got := errString(res[claim.UID].Err); got != want {
		t.Errorf("error %q, want %q", got, want)
	}
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// A call prepares each of its claims on its own: a refused one does not
// affect the others.
func TestPrepareBatch(t *testing.T) {
	h := newHarness(t)
	var claims []*resourceapi.ResourceClaim
	for i := range 20 {
		claims = append(claims, claimWith(fmt.Sprintf("share-%d", i), shareResult("gpu", fmt.Sprintf("gpu-%d", 1+i%3), "s", "2Gi", "")))
	}
	// Two claims of the same whole card: exactly one may have it.
	claims = append(claims, claimWith("whole-a", wholeResult("gpu", "gpu-0")), claimWith("whole-b", wholeResult("gpu", "gpu-0")))
	res := h.prepare(claims...)
	if len(res) != len(claims) {
		t.Fatalf("%d results for %d claims", len(res), len(claims))
	}
	for i := range 20 {
		if err := res[types.UID(fmt.Sprintf("share-%d", i))].Err; err != nil {
			t.Errorf("share-%d: %v", i, err)
		}
	}
	errA, errB := res["whole-a"].Err, res["whole-b"].Err
	if (errA == nil) == (errB == nil) {
		t.Errorf("whole-a error %v, whole-b error %v: exactly one must be refused", errA, errB)
	}
	h.assertConsistent()
	h.restart()
	h.assertConsistent()
	if got := len(h.driver.Records()); got != 21 {
		t.Errorf("%d records after restart, want 21", got)
	}
}

// A claim UID prepared once and then allocated again differently (the
// claim was deallocated and reallocated while the plugin missed the
// unprepare) must be prepared for its new allocation, not answered with the
// devices of the old one; the old one's spec and MPS shares are released.
// Also across a restart, where the record comes from the checkpoint.
func TestPrepareWithAnotherAllocationOfTheSameUID(t *testing.T) {
	tests := []struct {
		name    string
		first   *resourceapi.ResourceClaim
		second  *resourceapi.ResourceClaim
		restart bool
	}{
		{
			name:   "share moved to another card",
			first:  claimWith("c1", shareResult("gpu", "gpu-0", "s1", "10Gi", "")),
			second: claimWith("c1", shareResult("gpu", "gpu-1", "s2", "10Gi", "")),
		},
		{
			name:   "share became a whole card",
			first:  claimWith("c1", shareResult("gpu", "gpu-0", "s1", "10Gi", "")),
			second: claimWith("c1", wholeResult("gpu", "gpu-2")),
		},
		{
			name:    "same share ID, other memory, after a restart",
			first:   claimWith("c1", shareResult("gpu", "gpu-0", "s1", "10Gi", "")),
			second:  claimWith("c1", shareResult("gpu", "gpu-0", "s1", "20Gi", "")),
			restart: true,
		},
		{
			name:   "same card, other config",
			first:  claimWith("c1", shareResult("gpu", "gpu-0", "s1", "10Gi", "")),
			second: withConfig(claimWith("c1", shareResult("gpu", "gpu-0", "s1", "10Gi", "")), resourceapi.AllocationConfigSourceClass, `{"apiVersion":"gpu.tangram.dev/v1alpha1","kind":"GpuConfig","sharing":{"backend":"none"}}`),
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t)
			if err := h.prepare(tt.first)["c1"].Err; err != nil {
				t.Fatal(err)
			}
			if tt.restart {
				h.restart()
			}
			got := h.prepare(tt.second)["c1"]
			if got.Err != nil {
				t.Fatal(got.Err)
			}
			fresh := newHarness(t)
			want := fresh.prepare(tt.second)["c1"]
			if !reflect.DeepEqual(got, want) {
				t.Errorf("re-prepare with a new allocation returned %+v, want what a first prepare of it returns, %+v", got, want)
			}
			gotSpec, err := h.specs.Store.Read("c1")
			if err != nil {
				t.Fatal(err)
			}
			wantSpec, err := fresh.specs.Store.Read("c1")
			if err != nil {
				t.Fatal(err)
			}
			// The harnesses differ only in their directories.
			gotJSON, _ := json.Marshal(gotSpec.Devices)
			wantJSON, _ := json.Marshal(wantSpec.Devices)
			if got, want := string(gotJSON), strings.ReplaceAll(string(wantJSON), fresh.dir, h.dir); got != want {
				t.Errorf("spec devices\n%s\nwant those of the new allocation\n%s", got, want)
			}
			h.assertConsistent()
			// The same allocation again is idempotent.
			writes := h.steps.count("spec-write")
			if again := h.prepare(tt.second)["c1"]; !reflect.DeepEqual(again, want) {
				t.Errorf("third prepare returned %+v, want %+v", again, want)
			}
			if n := h.steps.count("spec-write"); n != writes {
				t.Errorf("the same allocation again wrote the spec %d more times", n-writes)
			}
		})
	}
}

// TestPrepareRefusesMixedBackendsOnACard: on a node that names no backend
// (older wiring), DeviceClass configs decide, and a card whose shares would
// mix mps and none across claims is refused here, naming both claims; the
// same backend, another card, or the first claim gone are fine. Nodes
// with --share-backend never get that far (TestPrepareNodeBackend).
func TestPrepareRefusesMixedBackendsOnACard(t *testing.T) {
	const none = `{"apiVersion":"gpu.tangram.dev/v1alpha1","kind":"GpuConfig","sharing":{"backend":"none"}}`
	mps := func(name, device, share string) *resourceapi.ResourceClaim {
		return claimWith(name, shareResult("gpu", device, share, "10Gi", ""))
	}
	noneShare := func(name, device, share string) *resourceapi.ResourceClaim {
		return withConfig(mps(name, device, share), resourceapi.AllocationConfigSourceClass, none)
	}
	tests := []struct {
		name          string
		first, second *resourceapi.ResourceClaim
		wantErr       string
	}{
		{name: "none beside mps", first: mps("c1", "gpu-0", "s1"), second: noneShare("c2", "gpu-0", "s2"),
			wantErr: "refusing a none share of gpu-0 (GPU-0) to claim default/claim-c2: claim default/claim-c1 holds a mps share of the same card"},
		{name: "mps beside none", first: noneShare("c1", "gpu-0", "s1"), second: mps("c2", "gpu-0", "s2"),
			wantErr: "refusing a mps share of gpu-0 (GPU-0) to claim default/claim-c2: claim default/claim-c1 holds a none share of the same card"},
		{name: "both mps", first: mps("c1", "gpu-0", "s1"), second: mps("c2", "gpu-0", "s2")},
		{name: "both none", first: noneShare("c1", "gpu-0", "s1"), second: noneShare("c2", "gpu-0", "s2")},
		{name: "other cards", first: mps("c1", "gpu-0", "s1"), second: noneShare("c2", "gpu-1", "s2")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t)
			if err := h.prepare(tt.first)["c1"].Err; err != nil {
				t.Fatal(err)
			}
			err := h.prepare(tt.second)["c2"].Err
			if tt.wantErr == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) || !strings.Contains(err.Error(), "same sharing.backend") {
				t.Fatalf("prepare c2: %v, want %q and how to fix it", err, tt.wantErr)
			}
			if _, ok := h.driver.Records()["c2"]; ok {
				t.Error("the refused claim was recorded")
			}
			// Once the first claim is gone the second is prepared.
			if err := h.unprepare("c1")["c1"]; err != nil {
				t.Fatal(err)
			}
			if err := h.prepare(tt.second)["c2"].Err; err != nil {
				t.Errorf("prepare c2 after c1 is gone: %v", err)
			}
		})
	}
}

// TestPrepareNodeBackend: on a node with --share-backend, every share uses
// the node's backend; a claim's config naming any backend is refused
// before anything is reserved (defence in depth behind admission), and so
// is a DeviceClass config naming another backend than the node's. Before,
// a tenant's "none" claim config was prepared beside other tenants' MPS
// shares of the card (or made theirs fail).
func TestPrepareNodeBackend(t *testing.T) {
	const (
		none = `{"apiVersion":"gpu.tangram.dev/v1alpha1","kind":"GpuConfig","sharing":{"backend":"none"}}`
		mps  = `{"apiVersion":"gpu.tangram.dev/v1alpha1","kind":"GpuConfig","sharing":{"backend":"mps"}}`
		tune = `{"apiVersion":"gpu.tangram.dev/v1alpha1","kind":"GpuConfig","sharing":{"mps":{"defaultActiveThreadPercentage":30}}}`
	)
	share := func() *resourceapi.ResourceClaim {
		return claimWith("c1", shareResult("gpu", "gpu-0", "s1", "10Gi", ""))
	}
	tests := []struct {
		name     string
		node     string
		claim    *resourceapi.ResourceClaim
		wantErr  string
		wantMPS  bool
		wantBack configapi.SharingBackend
	}{
		{name: "mps node, no config", node: "mps", claim: share(), wantMPS: true, wantBack: configapi.BackendMPS},
		{name: "none node, no config", node: "none", claim: share(), wantBack: configapi.BackendNone},
		{name: "none node, the class's MPS tuning is dropped", node: "none", claim: withConfig(share(), resourceapi.AllocationConfigSourceClass, tune), wantBack: configapi.BackendNone},
		{name: "mps node, the claim tunes MPS", node: "mps", claim: withConfig(share(), resourceapi.AllocationConfigSourceClaim, tune), wantMPS: true, wantBack: configapi.BackendMPS},
		{name: "mps node, the claim names none", node: "mps", claim: withConfig(share(), resourceapi.AllocationConfigSourceClaim, none),
			wantErr: `names sharing.backend "none": ` + config.TenantBackendDetail},
		{name: "none node, the claim names mps", node: "none", claim: withConfig(share(), resourceapi.AllocationConfigSourceClaim, mps),
			wantErr: `names sharing.backend "mps": ` + config.TenantBackendDetail},
		{name: "mps node, a class names none", node: "mps", claim: withConfig(share(), resourceapi.AllocationConfigSourceClass, none),
			wantErr: `names sharing.backend "none", but node node-a shares its cards with backend "mps"`},
		{name: "mps node, a class names mps", node: "mps", claim: withConfig(share(), resourceapi.AllocationConfigSourceClass, mps), wantMPS: true, wantBack: configapi.BackendMPS},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t)
			h.driver.cfg.ShareBackend = tt.node
			err := h.prepare(tt.claim)["c1"].Err
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("prepare: %v, want an error containing %q", err, tt.wantErr)
				}
				if _, ok := h.driver.Records()["c1"]; ok {
					t.Error("the refused claim was recorded")
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			dev := h.driver.Records()["c1"].Devices[0]
			if dev.UsesMPS() != tt.wantMPS || dev.Config.Sharing.Backend != tt.wantBack {
				t.Errorf("recorded share uses MPS %v with backend %q, want %v and %q", dev.UsesMPS(), dev.Config.Sharing.Backend, tt.wantMPS, tt.wantBack)
			}
		})
	}
}

// TestPrepareWarnsPodsOfUnenforcedShares: a share on a node whose
// shareEnforcement is below hard gets a Warning event on each pod
// reserving its claim, naming the level, the reason and the strict class;
// a whole card, a hard node, or a claim already prepared get none.
func TestPrepareWarnsPodsOfUnenforcedShares(t *testing.T) {
	reserved := func(c *resourceapi.ResourceClaim, pods ...string) *resourceapi.ResourceClaim {
		for _, p := range pods {
			c.Status.ReservedFor = append(c.Status.ReservedFor, resourceapi.ResourceClaimConsumerReference{Resource: "pods", Name: p, UID: types.UID(p + "-uid")})
		}
		return c
	}
	tests := []struct {
		name       string
		level      string
		reason     string
		claim      *resourceapi.ResourceClaim
		wantEvents int
		wantText   []string
	}{
		{name: "advisory share, two pods", level: "advisory", reason: device.ReasonDriverBefore615,
			claim: reserved(claimWith("c1", shareResult("gpu", "gpu-1", "s1", "20Gi", "")), "p1", "p2"), wantEvents: 2,
			wantText: []string{"Warning " + claimstatus.ReasonShareNotEnforced, "claim default/claim-c1", "gpu-1", "advisory", device.ShareEnforcementReasonText(device.ReasonDriverBefore615), device.HardSharedDeviceClassName}},
		{name: "compute-only share", level: "compute-only", reason: device.ReasonNotCgroupV2,
			claim: reserved(claimWith("c1", shareResult("gpu", "gpu-1", "s1", "20Gi", "")), "p1"), wantEvents: 1,
			wantText: []string{"compute-only", "memory is not limited per pod"}},
		{name: "hard share", level: "hard", claim: reserved(claimWith("c1", shareResult("gpu", "gpu-1", "s1", "20Gi", "")), "p1")},
		{name: "whole card on an advisory node", level: "advisory", reason: device.ReasonDriverBefore615,
			claim: reserved(claimWith("c1", wholeResult("gpu", "gpu-1")), "p1")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t)
			rec := record.NewFakeRecorder(10)
			h.driver.cfg.Events, h.driver.cfg.ShareStatus.Level, h.driver.cfg.ShareStatus.Reason = rec, tt.level, tt.reason
			if err := h.prepare(tt.claim)["c1"].Err; err != nil {
				t.Fatal(err)
			}
			// Prepared again (a kubelet retry): no second event.
			if err := h.prepare(tt.claim)["c1"].Err; err != nil {
				t.Fatal(err)
			}
			close(rec.Events)
			var events []string
			for e := range rec.Events {
				events = append(events, e)
			}
			if len(events) != tt.wantEvents {
				t.Fatalf("events %q, want %d", events, tt.wantEvents)
			}
			for _, e := range events {
				for _, want := range tt.wantText {
					if !strings.Contains(e, want) {
						t.Errorf("event %q does not say %q", e, want)
					}
				}
			}
		})
	}
}
