package plugin

import (
	"testing"

	resourceapi "k8s.io/api/resource/v1"

	"github.com/tangram-gpu/tangram/pkg/device"
)

// TestPrepareMakesOneDurableWrite holds the prepare of a whole card or a
// share to one checkpoint write, durable (PrepareCompleted), with no
// intent written before it (docs/prepare.md, "One durable write per
// prepare"); a MIG partition's prepare writes its intent without fsync
// and each instance's IDs durably before PrepareCompleted. A prepared
// claim asked again writes nothing, and an unprepare writes durably once.
// The crash tests hold that a crash after any write still ends consistent.
func TestPrepareMakesOneDurableWrite(t *testing.T) {
	tests := []struct {
		name  string
		claim *resourceapi.ResourceClaim
		// wantSynced and wantUnsynced are the prepare's checkpoint writes.
		wantSynced, wantUnsynced int64
	}{
		{"whole card", claimWith("w", wholeResult("gpu", "gpu-0")), 1, 0},
		{"share", claimWith("s", shareResult("gpu", "gpu-1", "s1", "10Gi", "30")), 1, 0},
		{"MIG partition", claimWith("m", wholeResult("gpu", device.MIGDeviceName(migCard, 9, 4))), 2, 1},
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
			if synced, unsynced := writes(prepare); synced != tt.wantSynced || unsynced != tt.wantUnsynced {
				t.Errorf("prepare: %d durable and %d unsynced checkpoint writes, want %d and %d", synced, unsynced, tt.wantSynced, tt.wantUnsynced)
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
