package cdi

import (
	"fmt"
	"testing"
)

// BenchmarkComputeClaimEdits is the pure part of prepare for a claim with
// shares on two cards.
func BenchmarkComputeClaimEdits(b *testing.B) {
	results := []testResult{
		share("gpu-0", testGPU(0, uuid0), share1, "10Gi", "30", nil),
		share("gpu-1", testGPU(1, uuid1), share2, "20Gi", "50", nil),
	}
	for b.Loop() {
		if _, err := run(testClaim, results); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkWriteSpec is edits + spec + the CDI library's validated,
// atomic write of one claim's spec (no fsync, see SpecStore).
func BenchmarkWriteSpec(b *testing.B) {
	store, err := NewSpecStore(b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	results := mixedResults()
	i := 0
	for b.Loop() {
		claim := testClaim
		claim.UID = fmt.Sprintf("uid-%d", i%100)
		i++
		edits, err := run(claim, results)
		if err != nil {
			b.Fatal(err)
		}
		spec, err := build(edits, claim, results, NoHardware{})
		if err != nil {
			b.Fatal(err)
		}
		if err := store.Write(claim.UID, spec); err != nil {
			b.Fatal(err)
		}
	}
}
