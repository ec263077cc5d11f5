package plugin

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"testing"

	resourceapi "k8s.io/api/resource/v1"

	"github.com/tangram-gpu/tangram/pkg/plugin/cdi"
	"github.com/tangram-gpu/tangram/pkg/plugin/memlimit/records"
	"github.com/tangram-gpu/tangram/pkg/plugin/prepared"
)

func TestCrashDuringPrepareThenRestart(t *testing.T) {
	// Before the crash: start-up saves once (save 1) and a whole-card
	// claim is prepared (save 2, spec-write 1: a fresh whole card records
	// no intent). The share claim then goes: mps-acquire 1, spec-write 2,
	// save 3 (completed); a crash before save 3 leaves its spec and
	// /dev/shm with no record, which start-up removes.
	tests := []struct {
		step     string
		n        int
		wantKept bool
	}{
		{step: "mps-acquire", n: 1},
		{step: "spec-write", n: 2},
		{step: "save", n: 3, wantKept: true},
	}
	for _, tt := range tests {
		t.Run(tt.step, func(t *testing.T) {
			h := newHarness(t)
			whole := claimWith("w", wholeResult("gpu", "gpu-0"))
			if err := h.prepare(whole)[whole.UID].Err; err != nil {
				t.Fatal(err)
			}
			share := claimWith("s", shareResult("gpu", "gpu-1", "s1", "10Gi", "30"))
			h.steps.crashAt, h.steps.crashN = tt.step, tt.n
			if got := h.prepareCrashing(share); got != tt.step {
				t.Fatalf("crashed after %q, want %q", got, tt.step)
			}
			h.restart()
			h.assertConsistent()
			records := h.driver.Records()
			if _, kept := records["s"]; kept != tt.wantKept {
				t.Errorf("share claim kept after restart = %v, want %v", kept, tt.wantKept)
			}
			if _, kept := records["w"]; !kept {
				t.Error("the untouched whole-card claim was lost")
			}
			// The kubelet retries; the claim ends prepared.
			if err := h.prepare(share)[share.UID].Err; err != nil {
				t.Fatal(err)
			}
			h.assertConsistent()
		})
	}
}

func TestCrashDuringUnprepareThenRestart(t *testing.T) {
	for _, step := range []string{"spec-remove", "mps-release"} {
		t.Run(step, func(t *testing.T) {
			h := newHarness(t)
			share := claimWith("s", shareResult("gpu", "gpu-1", "s1", "10Gi", ""))
			if err := h.prepare(share)[share.UID].Err; err != nil {
				t.Fatal(err)
			}
			h.steps.crashAt, h.steps.crashN = step, 1
			if got := h.unprepareCrashing("s"); got != step {
				t.Fatalf("crashed after %q, want %q", got, step)
			}
			h.restart()
			h.assertConsistent()
			if len(h.driver.Records()) != 0 {
				t.Errorf("records after restart: %v", h.driver.Records())
			}
			if err := h.unprepare("s")["s"]; err != nil {
				t.Errorf("retried unprepare: %v", err)
			}
		})
	}
}

// Start-up recovery has side effects too: a crash after it rolled back a
// claim's spec but before it saved the checkpoint is recovered by the next
// start.
func TestCrashDuringRecoveryThenRestart(t *testing.T) {
	h := newHarness(t)
	share := claimWith("s", shareResult("gpu", "gpu-1", "s1", "10Gi", ""))
	// The claim's spec is written and it is not recorded (a fresh share
	// records no intent): start-up removes the spec, then crashes.
	h.steps.crashAt, h.steps.crashN = "spec-write", 1
	if got := h.prepareCrashing(share); got != "spec-write" {
		t.Fatalf("crashed after %q, want spec-write", got)
	}
	h.steps.crashAt, h.steps.crashN = "spec-remove", h.steps.count("spec-remove")+1
	if got := h.startCrashing(); got != "spec-remove" {
		t.Fatalf("start-up crashed after %q, want spec-remove", got)
	}
	h.restart()
	h.assertConsistent()
	if len(h.driver.Records()) != 0 {
		t.Errorf("records after restart: %v", h.driver.Records())
	}
	if err := h.prepare(share)[share.UID].Err; err != nil {
		t.Fatal(err)
	}
	h.assertConsistent()
}

func TestCorruptCheckpointIsRebuilt(t *testing.T) {
	h := newHarness(t)
	whole := claimWith("w", wholeResult("gpu", "gpu-0"))
	share := claimWith("s", shareResult("gpu", "gpu-1", "s1", "10Gi", "25"))
	gone := claimWith("g", wholeResult("gpu", "gpu-2"))
	for _, c := range []*resourceapi.ResourceClaim{whole, share, gone} {
		if err := h.prepare(c)[c.UID].Err; err != nil {
			t.Fatal(err)
		}
	}
	before := h.driver.Records()
	// The API server still has two of the three claims.
	h.claims = []resourceapi.ResourceClaim{*whole, *share}
	path := h.state.Store.Path()
	if err := os.WriteFile(path, []byte("{not json"), 0o600); err != nil {
		t.Fatal(err)
	}
	h.restart()
	h.assertConsistent()
	if moved, _ := filepath.Glob(path + ".corrupt-*"); len(moved) != 1 {
		t.Errorf("corrupt checkpoint was not moved aside: %v", moved)
	}
	after := h.driver.Records()
	want := map[string]prepared.Claim{"w": before["w"], "s": before["s"]}
	if !reflect.DeepEqual(after, want) {
		t.Errorf("rebuilt records\n%v\nwant\n%v", after, want)
	}
}

// The corrupt checkpoint is moved aside before the state is rebuilt; if the
// rebuild cannot finish (API server unreachable, or the process dies), the
// next start finds no checkpoint but our specs. It must rebuild again, not
// take the specs of running claims for orphans and remove them.
func TestInterruptedRebuildIsRetried(t *testing.T) {
	h := newHarness(t)
	whole := claimWith("w", wholeResult("gpu", "gpu-0"))
	share := claimWith("s", shareResult("gpu", "gpu-1", "s1", "10Gi", "25"))
	for _, c := range []*resourceapi.ResourceClaim{whole, share} {
		if err := h.prepare(c)[c.UID].Err; err != nil {
			t.Fatal(err)
		}
	}
	before := h.driver.Records()
	h.claims = []resourceapi.ResourceClaim{*whole, *share}
	if err := os.WriteFile(h.state.Store.Path(), []byte("{not json"), 0o600); err != nil {
		t.Fatal(err)
	}
	h.listErr = errInjected
	if err := h.tryStart(); !errors.Is(err, errInjected) {
		t.Fatalf("start with the API server unreachable: error %v, want the injected failure", err)
	}
	h.listErr = nil
	h.restart()
	h.assertConsistent()
	if after := h.driver.Records(); !reflect.DeepEqual(after, before) {
		t.Errorf("records after the retried rebuild\n%v\nwant\n%v", after, before)
	}
}

func TestRebootDropsState(t *testing.T) {
	h := newHarness(t)
	for _, c := range []*resourceapi.ResourceClaim{
		claimWith("w", wholeResult("gpu", "gpu-0")),
		claimWith("s", shareResult("gpu", "gpu-1", "s1", "10Gi", "")),
	} {
		if err := h.prepare(c)[c.UID].Err; err != nil {
			t.Fatal(err)
		}
	}
	h.bootID = "boot-2"
	h.restart()
	h.assertConsistent()
	if len(h.driver.Records()) != 0 {
		t.Errorf("records survived a reboot: %v", h.driver.Records())
	}
}

func TestOrphanSpecsRemovedAtStartup(t *testing.T) {
	h := newHarness(t)
	keep := claimWith("k", wholeResult("gpu", "gpu-0"))
	if err := h.prepare(keep)[keep.UID].Err; err != nil {
		t.Fatal(err)
	}
	orphan := filepath.Join(h.specs.dir(), cdi.SpecName("orphan")+".json")
	if err := os.WriteFile(orphan, []byte("{}"), 0o644); err != nil {
		t.Fatal(err)
	}
	h.restart()
	h.assertConsistent()
	uids, _ := h.specs.List(t.Context())
	sort.Strings(uids)
	if !reflect.DeepEqual(uids, []string{"k"}) {
		t.Errorf("specs after restart %v, want [k]", uids)
	}
}

func TestPlanStartup(t *testing.T) {
	completed := func(uid string) prepared.Claim { return prepared.Claim{UID: uid, State: prepared.PrepareCompleted} }
	started := func(uid string) prepared.Claim { return prepared.Claim{UID: uid, State: prepared.PrepareStarted} }
	tests := []struct {
		name    string
		records map[string]prepared.Claim
		specs   []string
		reboot  bool
		want    startupPlan
	}{
		{
			name:    "completed with spec is kept, started is rolled back, orphan spec removed",
			records: map[string]prepared.Claim{"a": completed("a"), "b": started("b")},
			specs:   []string{"a", "b", "c"},
			want:    startupPlan{Keep: []prepared.Claim{completed("a")}, Rollback: []prepared.Claim{started("b")}, RemoveSpecs: []string{"b", "c"}},
		},
		{
			name:    "completed without spec is rolled back",
			records: map[string]prepared.Claim{"a": completed("a")},
			want:    startupPlan{Rollback: []prepared.Claim{completed("a")}},
		},
		{
			name:    "reboot drops everything",
			records: map[string]prepared.Claim{"a": completed("a")},
			specs:   []string{"a"},
			reboot:  true,
			want:    startupPlan{Rollback: []prepared.Claim{completed("a")}, RemoveSpecs: []string{"a"}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := planStartup(tt.records, tt.specs, tt.reboot); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("planStartup() = %+v, want %+v", got, tt.want)
			}
		})
	}
}

// The checkpoint keeps the config each result was prepared with.
func TestConfigSurvivesRestart(t *testing.T) {
	h := newHarness(t)
	claim := withConfig(claimWith("c", shareResult("gpu", "gpu-1", "s1", "10Gi", "")), resourceapi.AllocationConfigSourceClaim,
		`{"apiVersion":"gpu.tangram.dev/v1alpha1","kind":"GpuConfig","sharing":{"mps":{"defaultActiveThreadPercentage":40}}}`)
	if err := h.prepare(claim)[claim.UID].Err; err != nil {
		t.Fatal(err)
	}
	h.restart()
	h.assertConsistent()
	cfg := h.driver.Records()["c"].Devices[0].Config
	if cfg == nil || cfg.Sharing == nil || cfg.Sharing.MPS == nil || cfg.Sharing.MPS.DefaultActiveThreadPercentage == nil ||
		*cfg.Sharing.MPS.DefaultActiveThreadPercentage != 40 {
		t.Errorf("config after restart %v, want the claim's defaultActiveThreadPercentage 40", cfg)
	}
}

// TestMemoryLimitRecordsSweptAtStartup: tangram-cdi-hook's records of
// claims the plugin has not prepared (unprepared while it was down, or
// dropped by a reboot) and the temporary files of interrupted writes are
// removed at start-up; those of prepared claims stay.
func TestMemoryLimitRecordsSweptAtStartup(t *testing.T) {
	tests := []struct {
		name     string
		reboot   bool
		stray    []string // more files under claims/
		wantLeft []string
	}{
		{"records of claims not prepared go", false, []string{"gone.json"}, []string{"k.json", "s.json"}},
		{"a torn record of a claim not prepared goes, and temporary files", false,
			[]string{"gone.json", "k.json.tmp-42", "gone.json.tmp"}, []string{"k.json", "s.json"}},
		{"after a reboot no claim is prepared: every record goes", true, []string{"gone.json"}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t)
			recs := h.memoryLimitRecords()
			for _, c := range []*resourceapi.ResourceClaim{
				claimWith("k", wholeResult("gpu", "gpu-0")),
				claimWith("s", shareResult("gpu", "gpu-1", "s1", "10Gi", "")),
			} {
				if err := h.prepare(c)[c.UID].Err; err != nil {
					t.Fatal(err)
				}
				if err := recs.Save(string(c.UID), records.Claim{PodCgroup: "/sys/fs/cgroup/kubepods/pod1", PodUID: "1"}); err != nil {
					t.Fatal(err)
				}
			}
			for _, name := range tt.stray {
				if err := os.WriteFile(filepath.Join(recs.ClaimsDir(), name), []byte("{"), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			if tt.reboot {
				h.bootID = "boot-2"
			}
			h.restart()
			entries, err := os.ReadDir(recs.ClaimsDir())
			if err != nil {
				t.Fatal(err)
			}
			var left []string
			for _, e := range entries {
				left = append(left, e.Name())
			}
			if !reflect.DeepEqual(left, tt.wantLeft) {
				t.Errorf("records after restart %v, want %v", left, tt.wantLeft)
			}
		})
	}
}
