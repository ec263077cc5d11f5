package checkpoint

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tangram-gpu/tangram/api/gpu/v1alpha1"
	"github.com/tangram-gpu/tangram/pkg/plugin/prepared"
)

const (
	boot1 = "11111111-aaaa-bbbb-cccc-000000000001"
	boot2 = "22222222-aaaa-bbbb-cccc-000000000002"
)

var fixedNow = time.Date(2026, 11, 22, 1, 2, 3, 4, time.UTC)

func newTestStore(t *testing.T, boot *string) *Store {
	t.Helper()
	return NewStore(filepath.Join(t.TempDir(), "checkpoint.json"),
		WithBootID(func() (string, error) { return *boot, nil }),
		WithClock(func() time.Time { return fixedNow }))
}

func sample() *Checkpoint {
	pct := int32(30)
	cfg := &v1alpha1.GpuConfig{Sharing: &v1alpha1.Sharing{Backend: v1alpha1.BackendMPS,
		MPS: &v1alpha1.MPSSettings{DefaultActiveThreadPercentage: &pct}}}
	cfg.Normalize()
	cp := New()
	cp.Claims["uid-a"] = prepared.Claim{UID: "uid-a", State: prepared.PrepareCompleted, Namespace: "ml", Name: "train", Devices: []prepared.Device{{
		Request: "shared", Device: "gpu-1", GPUUUID: "GPU-1", ShareID: "share-1", Share: true,
		CDIDeviceIDs: []string{"k8s.gpu.tangram.dev/claim=uid-a-gpu-1-share-1"},
		MemoryBytes:  20 << 30, ComputePercent: 40, MPSPipeDir: "/run/mps/pipe", Config: cfg,
	}}}
	cp.Claims["uid-b"] = prepared.Claim{UID: "uid-b", State: prepared.PrepareStarted, Namespace: "ml", Name: "eval", Devices: []prepared.Device{{
		Request: "gpu", Device: "gpu-0", GPUUUID: "GPU-0", AdminAccess: true,
		CDIDeviceIDs: []string{"k8s.gpu.tangram.dev/claim=uid-b-gpu-0"},
	}}}
	return cp
}

func TestRoundTrip(t *testing.T) {
	boot := boot1
	s := newTestStore(t, &boot)
	res, err := s.Load()
	if err != nil {
		t.Fatal(err)
	}
	if res.Corrupt != nil || !res.Missing || len(res.Checkpoint.Claims) != 0 || res.Checkpoint.BootID != boot1 {
		t.Fatalf("missing file: got %+v", res)
	}
	want := sample()
	if err := s.Save(want); err != nil {
		t.Fatal(err)
	}
	res, err = s.Load()
	if err != nil {
		t.Fatal(err)
	}
	if res.Corrupt != nil || res.Dropped != nil || res.Missing {
		t.Fatalf("unexpected report: %+v", res)
	}
	want.BootID = boot1
	if !reflect.DeepEqual(res.Checkpoint, want) {
		got, _ := json.Marshal(res.Checkpoint)
		exp, _ := json.Marshal(want)
		t.Errorf("round trip\n got %s\nwant %s", got, exp)
	}
	if entries, _ := os.ReadDir(filepath.Dir(s.Path())); len(entries) != 1 {
		t.Errorf("Save left extra files: %v", entries)
	}
}

// TestSaveUnsyncedWritesTheSameFile holds that the unsynced save (a
// claim's PrepareStarted) writes what Save writes, byte for byte, and that
// a later Save replaces it: they differ only in waiting for the disk.
func TestSaveUnsyncedWritesTheSameFile(t *testing.T) {
	boot := boot1
	s := newTestStore(t, &boot)
	if err := s.Save(sample()); err != nil {
		t.Fatal(err)
	}
	synced, err := os.ReadFile(s.Path())
	if err != nil {
		t.Fatal(err)
	}
	if err := s.SaveUnsynced(New()); err != nil {
		t.Fatal(err)
	}
	if res, err := s.Load(); err != nil || res.Corrupt != nil || len(res.Checkpoint.Claims) != 0 {
		t.Fatalf("after SaveUnsynced of no claims: %+v, %v", res, err)
	}
	if err := s.SaveUnsynced(sample()); err != nil {
		t.Fatal(err)
	}
	unsynced, err := os.ReadFile(s.Path())
	if err != nil {
		t.Fatal(err)
	}
	if string(unsynced) != string(synced) {
		t.Errorf("SaveUnsynced wrote\n%s\nSave wrote\n%s", unsynced, synced)
	}
	if entries, _ := os.ReadDir(filepath.Dir(s.Path())); len(entries) != 1 {
		t.Errorf("SaveUnsynced left extra files: %v", entries)
	}
}

func TestConfigWithoutTypeMetaAndUnknownFields(t *testing.T) {
	boot := boot1
	s := newTestStore(t, &boot)
	cp := New()
	// A config without apiVersion/kind is stamped on save so it decodes again.
	cp.Claims["u"] = prepared.Claim{State: prepared.PrepareCompleted, Devices: []prepared.Device{{Device: "gpu-0",
		Config: &v1alpha1.GpuConfig{Sharing: &v1alpha1.Sharing{Backend: v1alpha1.BackendNone}}}}}
	if err := s.Save(cp); err != nil {
		t.Fatal(err)
	}
	res, err := s.Load()
	if err != nil || res.Corrupt != nil {
		t.Fatalf("Load: %v %v", err, res.Corrupt)
	}
	if got := res.Checkpoint.Claims["u"].Devices[0].Config; got == nil || got.Sharing.Backend != v1alpha1.BackendNone {
		t.Fatalf("config lost: %v", got)
	}

	// A field written by a newer plugin inside the config is ignored.
	var d prepared.Device
	raw := `{"request":"r","device":"gpu-0","config":{"apiVersion":"gpu.tangram.dev/v1alpha1","kind":"GpuConfig","sharing":{"backend":"none","newKnob":1}}}`
	if err := json.Unmarshal([]byte(raw), &d); err != nil {
		t.Fatalf("lenient config decode: %v", err)
	}
	if d.Config.Sharing.Backend != v1alpha1.BackendNone {
		t.Errorf("backend = %q", d.Config.Sharing.Backend)
	}
}

func writeEnvelope(t *testing.T, path string, env envelope) {
	t.Helper()
	raw, err := json.Marshal(env)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, raw, 0o600); err != nil {
		t.Fatal(err)
	}
}

func TestCorruptFilesAreMovedAside(t *testing.T) {
	goodData := []byte(`{"bootID":"` + boot1 + `","claims":{}}`)
	tests := []struct {
		name    string
		write   func(t *testing.T, path string, valid []byte)
		wantErr string
	}{
		{
			name:    "garbage bytes",
			write:   func(t *testing.T, p string, _ []byte) { writeFile(t, p, []byte("\x00\xffnot json")) },
			wantErr: "not a checkpoint file: invalid character '\\x00' looking for beginning of value",
		},
		{
			name:    "truncated",
			write:   func(t *testing.T, p string, valid []byte) { writeFile(t, p, valid[:len(valid)/2]) },
			wantErr: "not a checkpoint file: unexpected end of JSON input",
		},
		{
			name:    "empty file",
			write:   func(t *testing.T, p string, _ []byte) { writeFile(t, p, nil) },
			wantErr: "not a checkpoint file: unexpected end of JSON input",
		},
		{
			name: "wrong checksum",
			write: func(t *testing.T, p string, _ []byte) {
				writeEnvelope(t, p, envelope{Version: Version, Checksum: "sha256:00", Data: goodData})
			},
			wantErr: `checksum mismatch: file says "sha256:00", content has "` + checksum(goodData) + `"`,
		},
		{
			name: "flipped byte in data",
			write: func(t *testing.T, p string, valid []byte) {
				b := append([]byte(nil), valid...)
				i := strings.Index(string(b), `"claims"`)
				b[i+2] = 'X' // "cXaims": still JSON, checksum no longer matches
				writeFile(t, p, b)
			},
			wantErr: "checksum mismatch",
		},
		{
			name: "unknown version",
			write: func(t *testing.T, p string, _ []byte) {
				writeEnvelope(t, p, envelope{Version: "v2", Checksum: checksum(goodData), Data: goodData})
			},
			wantErr: `unsupported version "v2" (this plugin reads "v1")`,
		},
		{
			name: "unknown claim state",
			write: func(t *testing.T, p string, _ []byte) {
				data := []byte(`{"bootID":"` + boot1 + `","claims":{"u":{"state":"Half"}}}`)
				writeEnvelope(t, p, envelope{Version: Version, Checksum: checksum(data), Data: data})
			},
			wantErr: `claim u has unknown state "Half"`,
		},
		{
			name: "config of the wrong kind",
			write: func(t *testing.T, p string, _ []byte) {
				data := []byte(`{"bootID":"` + boot1 + `","claims":{"u":{"state":"PrepareCompleted","devices":[{"device":"gpu-0","config":{"apiVersion":"x/v1","kind":"GpuConfig"}}]}}}`)
				writeEnvelope(t, p, envelope{Version: Version, Checksum: checksum(data), Data: data})
			},
			wantErr: `decoding claims: config of device gpu-0: apiVersion: Unsupported value: "x/v1": supported values: "gpu.tangram.dev/v1alpha1"`,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			boot := boot1
			s := newTestStore(t, &boot)
			if err := s.Save(sample()); err != nil {
				t.Fatal(err)
			}
			valid, err := os.ReadFile(s.Path())
			if err != nil {
				t.Fatal(err)
			}
			tc.write(t, s.Path(), valid)
			bad, _ := os.ReadFile(s.Path())

			res, err := s.Load()
			if err != nil {
				t.Fatalf("Load failed instead of reporting: %v", err)
			}
			if res.Corrupt == nil {
				t.Fatalf("corruption not reported; got %d claims", len(res.Checkpoint.Claims))
			}
			if !strings.Contains(res.Corrupt.Err.Error(), tc.wantErr) {
				t.Errorf("reason = %q, want it to contain %q", res.Corrupt.Err, tc.wantErr)
			}
			wantMoved := s.Path() + ".corrupt-20261122T010203.000000004Z"
			if res.Corrupt.MovedTo != wantMoved {
				t.Errorf("MovedTo = %q, want %q", res.Corrupt.MovedTo, wantMoved)
			}
			if kept, _ := os.ReadFile(wantMoved); string(kept) != string(bad) {
				t.Error("moved-aside file does not hold the bad content")
			}
			if len(res.Checkpoint.Claims) != 0 || res.Checkpoint.BootID != boot1 {
				t.Errorf("want an empty checkpoint to rebuild, got %+v", res.Checkpoint)
			}
			if _, err := os.Stat(s.Path()); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("corrupt file still in place: %v", err)
			}
			// The rebuilt state can be saved and read back.
			if err := s.Save(sample()); err != nil {
				t.Fatal(err)
			}
			if res, err := s.Load(); err != nil || res.Corrupt != nil || len(res.Checkpoint.Claims) != 2 {
				t.Errorf("after rebuild: %v %+v", err, res)
			}
		})
	}
}

func writeFile(t *testing.T, path string, data []byte) {
	t.Helper()
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
}

func TestUnreadableFileIsReported(t *testing.T) {
	boot := boot1
	s := newTestStore(t, &boot)
	// A directory where the file should be cannot be read as a file.
	if err := os.Mkdir(s.Path(), 0o700); err != nil {
		t.Fatal(err)
	}
	res, err := s.Load()
	if err != nil {
		t.Fatal(err)
	}
	if res.Corrupt == nil || !strings.HasPrefix(res.Corrupt.Err.Error(), "reading: ") || res.Corrupt.MovedTo == "" {
		t.Errorf("unreadable file not reported and moved: %+v", res.Corrupt)
	}
}

func TestBootIDChangeDropsClaims(t *testing.T) {
	boot := boot1
	s := newTestStore(t, &boot)
	if err := s.Save(sample()); err != nil {
		t.Fatal(err)
	}
	boot = boot2
	res, err := s.Load()
	if err != nil {
		t.Fatal(err)
	}
	if res.Corrupt != nil {
		t.Fatalf("reboot reported as corruption: %v", res.Corrupt)
	}
	want := []DroppedClaim{
		{UID: "uid-a", Namespace: "ml", Name: "train", State: prepared.PrepareCompleted},
		{UID: "uid-b", Namespace: "ml", Name: "eval", State: prepared.PrepareStarted},
	}
	if !reflect.DeepEqual(res.Dropped, want) {
		t.Errorf("Dropped = %+v, want %+v", res.Dropped, want)
	}
	if res.PreviousBootID != boot1 || res.Checkpoint.BootID != boot2 || len(res.Checkpoint.Claims) != 0 {
		t.Errorf("after reboot: previous %q, checkpoint %+v", res.PreviousBootID, res.Checkpoint)
	}
}

// TestOnceBootID: the store reads the boot ID once per process, but
// again after a failed read.
func TestOnceBootID(t *testing.T) {
	for _, tc := range []struct {
		name string
		// results are what successive reads return ("" fails).
		results []string
		// want is what each call returns ("" an error); reads how many
		// reads the calls made.
		want  []string
		reads int
	}{
		{"read once", []string{"a", "b"}, []string{"a", "a", "a"}, 1},
		{"error not kept", []string{"", "a", "b"}, []string{"", "a", "a"}, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			reads := 0
			get := onceBootID(func() (string, error) {
				r := tc.results[reads]
				reads++
				if r == "" {
					return "", errors.New("unreadable")
				}
				return r, nil
			})
			for i, want := range tc.want {
				got, err := get()
				if want == "" && err == nil || want != "" && (err != nil || got != want) {
					t.Errorf("call %d: got %q, %v; want %q", i, got, err, want)
				}
			}
			if reads != tc.reads {
				t.Errorf("read %d times, want %d", reads, tc.reads)
			}
		})
	}
}

func TestBootIDErrors(t *testing.T) {
	s := NewStore(filepath.Join(t.TempDir(), "cp.json"),
		WithBootID(func() (string, error) { return "", errors.New("no /proc") }))
	if _, err := s.Load(); err == nil || !strings.Contains(err.Error(), "no /proc") {
		t.Errorf("Load error = %v", err)
	}
	if err := s.Save(New()); err == nil || !strings.Contains(err.Error(), "no /proc") {
		t.Errorf("Save error = %v", err)
	}
}

func TestLoadRemovesStaleTempFiles(t *testing.T) {
	boot := boot1
	s := newTestStore(t, &boot)
	stale := s.Path() + tempInfix + "12345"
	writeFile(t, stale, []byte("half"))
	if _, err := s.Load(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(stale); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("stale temp file survived: %v", err)
	}
}

// TestLoadSweepsHourly: a Load within sweepInterval of the last sweep
// (one per kubelet call) does not scan the directory; the first Load after
// it removes the stale temp files again.
func TestLoadSweepsHourly(t *testing.T) {
	now := fixedNow
	s := NewStore(filepath.Join(t.TempDir(), "checkpoint.json"),
		WithBootID(func() (string, error) { return boot1, nil }),
		WithClock(func() time.Time { return now }))
	if _, err := s.Load(); err != nil {
		t.Fatal(err)
	}
	stale := s.Path() + tempInfix + "12345"
	writeFile(t, stale, []byte("half"))
	now = now.Add(sweepInterval - time.Second)
	if _, err := s.Load(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(stale); err != nil {
		t.Errorf("swept within the interval: %v", err)
	}
	now = now.Add(time.Second)
	if _, err := s.Load(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(stale); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("stale temp file survived the hourly sweep: %v", err)
	}
}

func TestConcurrentSave(t *testing.T) {
	boot := boot1
	s := newTestStore(t, &boot)
	shared := sample()
	var wg sync.WaitGroup
	for i := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cp := shared
			if i%2 == 1 {
				cp = New()
				cp.Claims[fmt.Sprintf("uid-%d", i)] = prepared.Claim{State: prepared.PrepareStarted}
			}
			if err := s.Save(cp); err != nil {
				t.Errorf("Save %d: %v", i, err)
			}
		}()
	}
	wg.Wait()
	res, err := s.Load()
	if err != nil || res.Corrupt != nil {
		t.Fatalf("after concurrent saves: %v %v", err, res.Corrupt)
	}
	if n := len(res.Checkpoint.Claims); n != 1 && n != 2 {
		t.Errorf("file holds %d claims, want one of the saved checkpoints", n)
	}
	if entries, _ := os.ReadDir(filepath.Dir(s.Path())); len(entries) != 1 {
		t.Errorf("concurrent saves left extra files: %d entries", len(entries))
	}
}

func TestDeepCopyIsIndependent(t *testing.T) {
	orig := sample()
	cp := orig.DeepCopy()
	if !reflect.DeepEqual(orig, cp) {
		t.Fatal("copy differs")
	}
	d := cp.Claims["uid-a"].Devices
	d[0].CDIDeviceIDs[0] = "changed"
	d[0].Config.Sharing.Backend = "changed"
	d[0].Device = "changed"
	o := orig.Claims["uid-a"].Devices[0]
	if o.CDIDeviceIDs[0] == "changed" || o.Config.Sharing.Backend == "changed" || o.Device == "changed" {
		t.Error("changing the copy changed the original")
	}
}

// BenchmarkSave measures one checkpoint write including both fsyncs, with
// 1 and 100 prepared claims in the file.
func BenchmarkSave(b *testing.B) {
	for _, claims := range []int{1, 100} {
		b.Run(fmt.Sprintf("claims=%d", claims), func(b *testing.B) {
			s := NewStore(filepath.Join(b.TempDir(), "checkpoint.json"),
				WithBootID(func() (string, error) { return boot1, nil }))
			cp := New()
			base := sample().Claims["uid-a"]
			for i := range claims {
				cp.Claims[fmt.Sprintf("claim-%03d", i)] = base
			}
			for b.Loop() {
				if err := s.Save(cp); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkLoad measures reading and verifying a file with 100 claims.
func BenchmarkLoad(b *testing.B) {
	s := NewStore(filepath.Join(b.TempDir(), "checkpoint.json"),
		WithBootID(func() (string, error) { return boot1, nil }))
	cp := New()
	base := sample().Claims["uid-a"]
	for i := range 100 {
		cp.Claims[fmt.Sprintf("claim-%03d", i)] = base
	}
	if err := s.Save(cp); err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		res, err := s.Load()
		if err != nil || res.Corrupt != nil || len(res.Checkpoint.Claims) != 100 {
			b.Fatalf("Load: %v %+v", err, res)
		}
	}
}
