package plugin

import (
	"os"
	"path/filepath"
	"slices"
	"testing"

	"k8s.io/apimachinery/pkg/types"
)

// TestClaimShmDirs: each prepared claim (whole cards here) gets a /dev/shm
// directory of its own, which every CDI device of the claim mounts at
// /dev/shm: the containers of all pods of the claim share it, a tenant of
// another claim never sees it. Unprepare removes it with what the claim's
// containers left there; the other claim's stays.
func TestClaimShmDirs(t *testing.T) {
	h := newHarness(t)
	dirs := h.claimDirs()
	for _, c := range []string{"a", "b"} {
		res := h.prepare(claimWith(c, wholeResult("gpu", "gpu-"+map[string]string{"a": "0", "b": "1"}[c])))[types.UID(c)]
		if res.Err != nil {
			t.Fatal(res.Err)
		}
		_, mounts, err := h.specs.env(cdiIDs(res))
		if err != nil {
			t.Fatal(err)
		}
		if want := []string{dirs.ShmDir(c) + ":/dev/shm"}; !slices.Equal(mounts, want) {
			t.Errorf("claim %s: mounts %v, want %v", c, mounts, want)
		}
		if fi, err := os.Stat(dirs.ShmDir(c)); err != nil || !fi.IsDir() || fi.Mode().Perm() != 0o777 || fi.Mode()&os.ModeSticky == 0 {
			t.Errorf("claim %s's /dev/shm: %v, %v; want a world-writable sticky directory like /dev/shm", c, fi, err)
		}
	}
	if dirs.ShmDir("a") == dirs.ShmDir("b") {
		t.Fatalf("two claims share %s", dirs.ShmDir("a"))
	}
	// What one claim's containers leave is not the other's.
	if err := os.WriteFile(filepath.Join(dirs.ShmDir("a"), "segment"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dirs.ShmDir("b"), "segment")); !os.IsNotExist(err) {
		t.Errorf("claim b sees claim a's segment: %v", err)
	}
	if err := h.unprepare("a")[types.UID("a")]; err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Dir(dirs.ShmDir("a"))); !os.IsNotExist(err) {
		t.Errorf("claim a's directory is left after unprepare: %v", err)
	}
	if _, err := os.Stat(dirs.ShmDir("b")); err != nil {
		t.Errorf("claim b's /dev/shm went with claim a's: %v", err)
	}
	h.assertConsistent()
}

// TestRecoverSweepsClaimDirs: at start-up the directories of claims no
// record holds (unprepared while the plugin was down, or left by a crash
// between creating one and recording the claim completed) are removed;
// those of prepared claims stay, with their contents.
func TestRecoverSweepsClaimDirs(t *testing.T) {
	h := newHarness(t)
	dirs := h.claimDirs()
	if err := h.prepare(claimWith("kept", wholeResult("gpu", "gpu-0")))[types.UID("kept")].Err; err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dirs.ShmDir("kept"), "segment"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(dirs.ShmDir("orphan"), 0o755); err != nil {
		t.Fatal(err)
	}
	// A crash after the directory was made, before the claim was
	// recorded completed: the record is rolled back at start-up.
	h.steps.crashAt, h.steps.crashN = "spec-write", h.steps.count("spec-write")+1
	if got := h.prepareCrashing(claimWith("crashed", wholeResult("gpu", "gpu-1"))); got != "spec-write" {
		t.Fatalf("crashed after %q, want spec-write", got)
	}
	if _, err := os.Stat(dirs.ShmDir("crashed")); err != nil {
		t.Fatalf("the crashed claim's directory was not made before its spec: %v", err)
	}
	h.restart()
	for _, gone := range []string{"orphan", "crashed"} {
		if _, err := os.Stat(filepath.Dir(dirs.ShmDir(gone))); !os.IsNotExist(err) {
			t.Errorf("the directory of %s, a claim not prepared, is left after start-up: %v", gone, err)
		}
	}
	if _, err := os.Stat(filepath.Join(dirs.ShmDir("kept"), "segment")); err != nil {
		t.Errorf("the prepared claim's /dev/shm lost its contents at start-up: %v", err)
	}
	if _, ok := h.driver.Records()["crashed"]; ok {
		t.Error("the crashed claim is still recorded")
	}
	h.assertConsistent()
}
