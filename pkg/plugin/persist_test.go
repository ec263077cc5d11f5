package plugin

import (
	"testing"

	resourceapi "k8s.io/api/resource/v1"
)

// TestPrepareMakesOneDurableWrite holds the prepare to one durable
// checkpoint write (PrepareCompleted), its PrepareStarted written without
// fsync (docs/prepare.md, "One durable write per prepare"); a prepared
// claim asked again writes nothing, and an unprepare writes durably once.
// The crash tests hold that both writes are still saves a crash can follow.
func TestPrepareMakesOneDurableWrite(t *testing.T) {
	tests := []struct {
		name  string
		claim *resourceapi.ResourceClaim
	}{
		{"whole card", claimWith("w", wholeResult("gpu", "gpu-0"))},
		{"share", claimWith("s", shareResult("gpu", "gpu-1", "s1", "10Gi", "30"))},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t)
			// writes runs step and returns the durable and unsynced
			// checkpoint writes it made.
			writes := func(step func()) (synced, unsynced int64) {
				s0, u0 := h.state.synced.Load(), h.state.unsynced.Load()
				step()
				return h.state.synced.Load() - s0, h.state.unsynced.Load() - u0
			}
			prepare := func() {
				if err := h.prepare(tt.claim)[tt.claim.UID].Err; err != nil {
					t.Fatal(err)
				}
			}
			if synced, unsynced := writes(prepare); synced != 1 || unsynced != 1 {
				t.Errorf("prepare: %d durable and %d unsynced checkpoint writes, want 1 and 1", synced, unsynced)
			}
			if synced, unsynced := writes(prepare); synced != 0 || unsynced != 0 {
				t.Errorf("prepare of a prepared claim: %d durable and %d unsynced writes, want none", synced, unsynced)
			}
			unprepare := func() {
				if err := h.unprepare(string(tt.claim.UID))[tt.claim.UID]; err != nil {
					t.Fatal(err)
				}
			}
			if synced, unsynced := writes(unprepare); synced != 1 || unsynced != 0 {
				t.Errorf("unprepare: %d durable and %d unsynced writes, want 1 and 0", synced, unsynced)
			}
		})
	}
}
