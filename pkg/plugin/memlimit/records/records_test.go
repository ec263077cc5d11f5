package records

import (
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tangram-gpu/tangram/pkg/plugin/durable"
)

const (
	kept    = "11111111-2222-3333-4444-555555555555"
	gone    = "66666666-7777-8888-9999-000000000000"
	podPath = "/sys/fs/cgroup/kubepods/pod0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0"
)

// TestSaveIsDurable: a record is written through durable.WriteFile (temp
// file, fsync, rename, fsync of the directory), so a power loss cannot
// leave it torn, and it reads back.
func TestSaveIsDurable(t *testing.T) {
	r := Dir{Path: t.TempDir()}
	var written []string
	writeFile = func(path string, data []byte) error {
		written = append(written, path)
		return durable.WriteFile(path, data)
	}
	t.Cleanup(func() { writeFile = durable.WriteFile })
	rec := Claim{PodCgroup: podPath, PodUID: "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0", Limits: map[string]uint64{"GPU-a": 1 << 30}}
	if err := r.Save(kept, rec); err != nil {
		t.Fatal(err)
	}
	if want := []string{filepath.Join(r.ClaimsDir(), kept+".json")}; !reflect.DeepEqual(written, want) {
		t.Errorf("durable writes %v, want %v", written, want)
	}
	got, err := r.Load(kept)
	if err != nil || !reflect.DeepEqual(got, rec) {
		t.Errorf("Load = %+v, %v; want %+v", got, err, rec)
	}
}

// TestSweep: at start-up the plugin removes the records of claims it has
// not prepared and the temporary files of interrupted writes; it keeps
// the records of its claims (reporting those it cannot read) and files
// that are not records.
func TestSweep(t *testing.T) {
	tests := []struct {
		name           string
		files          map[string]string // under claims/
		wantLeft       []string
		wantRemoved    []string
		wantUnreadable int
	}{
		{
			name:        "records of claims not prepared go, prepared ones stay",
			files:       map[string]string{kept + ".json": `{"podCgroup":"` + podPath + `"}`, gone + ".json": `{"podCgroup":"` + podPath + `"}`},
			wantLeft:    []string{kept + ".json"},
			wantRemoved: []string{gone + ".json"},
		},
		{
			name:        "an unreadable record of a claim not prepared goes",
			files:       map[string]string{gone + ".json": `{"podCg`},
			wantRemoved: []string{gone + ".json"},
		},
		{
			name:           "an unreadable record of a prepared claim stays, reported",
			files:          map[string]string{kept + ".json": ``},
			wantLeft:       []string{kept + ".json"},
			wantUnreadable: 1,
		},
		{
			name: "temporary files of interrupted writes go, of any claim",
			files: map[string]string{kept + ".json.tmp-123": "{", gone + ".json.tmp": "{", kept + ".json" + durable.TempInfix + "9": "",
				kept + ".json": `{}`},
			wantLeft:    []string{kept + ".json"},
			wantRemoved: []string{kept + ".json.tmp-123", kept + ".json.tmp-9", gone + ".json.tmp"},
		},
		{
			name:     "files that are not records stay",
			files:    map[string]string{"README": "x", ".hidden": "x"},
			wantLeft: []string{".hidden", "README"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := Dir{Path: t.TempDir()}
			if err := os.MkdirAll(r.ClaimsDir(), 0o700); err != nil {
				t.Fatal(err)
			}
			for name, content := range tt.files {
				if err := os.WriteFile(filepath.Join(r.ClaimsDir(), name), []byte(content), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			removed, unreadable, err := r.Sweep([]string{kept}, time.Second, "test")
			if err != nil {
				t.Fatal(err)
			}
			slices.Sort(removed)
			if !reflect.DeepEqual(removed, tt.wantRemoved) {
				t.Errorf("removed %v, want %v", removed, tt.wantRemoved)
			}
			if len(unreadable) != tt.wantUnreadable {
				t.Errorf("unreadable %v, want %d", unreadable, tt.wantUnreadable)
			}
			entries, err := os.ReadDir(r.ClaimsDir())
			if err != nil {
				t.Fatal(err)
			}
			var left []string
			for _, e := range entries {
				left = append(left, e.Name())
			}
			if !reflect.DeepEqual(left, tt.wantLeft) {
				t.Errorf("left %v, want %v", left, tt.wantLeft)
			}
		})
	}
}

// TestSweepWaitsForTheLockWithADeadline: a hook holding the records lock
// (hung) makes the sweep give up, naming the lock and its holder, and
// remove nothing; with no records directory there is nothing to do.
func TestSweepWaitsForTheLockWithADeadline(t *testing.T) {
	r := Dir{Path: t.TempDir()}
	if _, _, err := (Dir{Path: filepath.Join(r.Path, "none")}).Sweep(nil, time.Second, "test"); err != nil {
		t.Fatalf("sweep without records: %v", err)
	}
	if err := r.Save(gone, Claim{PodCgroup: podPath}); err != nil {
		t.Fatal(err)
	}
	unlock, err := r.Lock(time.Second, "tangram-cdi-hook, claim "+gone)
	if err != nil {
		t.Fatal(err)
	}
	defer unlock()
	_, _, err = r.Sweep(nil, 200*time.Millisecond, "plugin")
	if err == nil || !strings.Contains(err.Error(), filepath.Join(r.Path, LockFile)+" is still held after 200ms") ||
		!strings.Contains(err.Error(), "tangram-cdi-hook, claim "+gone) {
		t.Fatalf("sweep under a held lock: %v", err)
	}
	if _, err := os.Stat(filepath.Join(r.ClaimsDir(), gone+".json")); err != nil {
		t.Errorf("record removed without the lock: %v", err)
	}
}
