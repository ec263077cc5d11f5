package checkpoint

import (
	"os"
	"path/filepath"
	"testing"
)

// FuzzLoad feeds arbitrary file content to Load: it must never panic or
// fail, and anything it accepts must save and load back unchanged.
func FuzzLoad(f *testing.F) {
	dir := f.TempDir()
	seedStore := NewStore(filepath.Join(dir, "seed.json"), WithBootID(func() (string, error) { return boot1, nil }))
	if err := seedStore.Save(sample()); err != nil {
		f.Fatal(err)
	}
	seed, err := os.ReadFile(seedStore.Path())
	if err != nil {
		f.Fatal(err)
	}
	f.Add(seed)
	f.Add([]byte(`{"version":"v1","checksum":"sha256:","data":null}`))
	f.Add([]byte(`{}`))
	f.Fuzz(func(t *testing.T, content []byte) {
		s := NewStore(filepath.Join(t.TempDir(), "checkpoint.json"), WithBootID(func() (string, error) { return boot1, nil }))
		if err := os.WriteFile(s.Path(), content, 0o600); err != nil {
			t.Fatal(err)
		}
		res, err := s.Load()
		if err != nil {
			t.Fatalf("Load failed: %v", err)
		}
		if res.Corrupt != nil || res.Dropped != nil {
			return
		}
		if err := s.Save(res.Checkpoint); err != nil {
			t.Fatalf("Save of accepted checkpoint: %v", err)
		}
		again, err := s.Load()
		if err != nil || again.Corrupt != nil {
			t.Fatalf("reload: %v %v", err, again.Corrupt)
		}
		if len(again.Checkpoint.Claims) != len(res.Checkpoint.Claims) {
			t.Fatalf("reload has %d claims, want %d", len(again.Checkpoint.Claims), len(res.Checkpoint.Claims))
		}
	})
}
