package checkpoint

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// FuzzLoad feeds arbitrary file content to Load: it must never panic or
// fail, and anything it accepts must save and load back unchanged. Random
// content almost never passes the checksum, so FuzzLoadClaims covers what
// lies behind it.
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
		loadAndRoundTrip(t, content, boot1)
	})
}

// FuzzLoadClaims fuzzes the checkpoint's payload (the claims, their
// devices and configs) and wraps it in an envelope with the right version
// and checksum, so that every input reaches claim decoding. The boot ID is
// taken from the payload when it has one, so that inputs are not merely
// dropped as another boot's.
func FuzzLoadClaims(f *testing.F) {
	for _, seed := range claimSeeds(f) {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		loadAndRoundTrip(t, envelopeFor(data), bootOf(data))
	})
}

// claimSeeds are payloads: the sample checkpoint, a config without type
// metadata, one of a newer plugin with unknown fields, and invalid ones.
func claimSeeds(tb testing.TB) [][]byte {
	tb.Helper()
	cp := sample()
	cp.BootID = boot1
	valid, err := json.Marshal(cp)
	if err != nil {
		tb.Fatal(err)
	}
	return [][]byte{
		valid,
		[]byte(`{"bootID":"` + boot1 + `","claims":{"u":{"state":"PrepareCompleted","allocation":"sha256:00","devices":[{"device":"gpu-0","share":true,"memoryBytes":1073741824,"config":{"sharing":{"backend":"mps"}}}]}}}`),
		[]byte(`{"bootID":"` + boot1 + `","future":1,"claims":{"u":{"state":"PrepareStarted","devices":[{"device":"gpu-0","config":{"apiVersion":"gpu.tangram.dev/v1alpha1","kind":"GpuConfig","newField":true}}]}}}`),
		[]byte(`{"bootID":"` + boot1 + `","claims":{"u":{"state":"Half"}}}`),
		[]byte(`{"bootID":"` + boot1 + `","claims":{"u":{"state":"PrepareCompleted","devices":[{"config":{"apiVersion":"x/v1","kind":"GpuConfig"}}]}}}`),
		[]byte(`{"bootID":"` + boot1 + `","claims":null}`),
	}
}

// envelopeFor wraps a payload as Save would, checksum included.
func envelopeFor(data []byte) []byte {
	file := []byte(`{"version":"` + Version + `","checksum":"` + checksum(data) + `","data":`)
	file = append(file, data...)
	return append(file, '}')
}

func bootOf(data []byte) string {
	var in struct {
		BootID string `json:"bootID"`
	}
	if json.Unmarshal(data, &in) != nil || in.BootID == "" {
		return boot1
	}
	return in.BootID
}

// loadAndRoundTrip loads content: Load must not fail; what it accepts must
// survive Save and Load, and a second round trip must change nothing.
func loadAndRoundTrip(t *testing.T, content []byte, boot string) *LoadResult {
	t.Helper()
	s := NewStore(filepath.Join(t.TempDir(), "checkpoint.json"), WithBootID(func() (string, error) { return boot, nil }))
	if err := os.WriteFile(s.Path(), content, 0o600); err != nil {
		t.Fatal(err)
	}
	res, err := s.Load()
	if err != nil {
		t.Fatalf("Load failed: %v", err)
	}
	if res.Corrupt != nil || res.Dropped != nil {
		return res
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
	// Saving may normalize (invalid UTF-8, config type metadata) once;
	// after that a round trip is exact.
	if err := s.Save(again.Checkpoint); err != nil {
		t.Fatal(err)
	}
	third, err := s.Load()
	if err != nil || third.Corrupt != nil {
		t.Fatalf("second reload: %v %v", err, third.Corrupt)
	}
	if !reflect.DeepEqual(third.Checkpoint, again.Checkpoint) {
		t.Fatalf("second round trip changed the checkpoint:\n%+v\n%+v", third.Checkpoint, again.Checkpoint)
	}
	return res
}

// The payload fuzzer gets past the checksum: its seeds are decoded as
// claims (accepted with claims, or refused for what the claims say, never
// for the checksum).
func TestFuzzLoadClaimsReachesClaimDecoding(t *testing.T) {
	var accepted, refusedForClaims int
	for _, seed := range claimSeeds(t) {
		res := loadAndRoundTrip(t, envelopeFor(seed), bootOf(seed))
		switch {
		case res.Corrupt == nil && len(res.Checkpoint.Claims) > 0:
			accepted++
		case res.Corrupt != nil && strings.Contains(res.Corrupt.Error(), "checksum"):
			t.Errorf("seed refused at the checksum: %v", res.Corrupt)
		case res.Corrupt != nil:
			refusedForClaims++
		}
	}
	if accepted < 3 || refusedForClaims < 2 {
		t.Errorf("%d seeds accepted with claims, %d refused for their claims; want at least 3 and 2", accepted, refusedForClaims)
	}
}
