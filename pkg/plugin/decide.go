package plugin

import (
	"maps"
	"slices"

	"github.com/tangram-gpu/tangram/pkg/gpu"
	"github.com/tangram-gpu/tangram/pkg/plugin/prepared"
)

// This file holds the pure decisions of prepare, unprepare and start-up:
// given what the checkpoint says and what exists on disk, what to do. The
// Driver carries them out.

// holdings lists how the record holds its cards.
func holdings(r prepared.Claim) []Holding {
	var out []Holding
	for _, d := range r.Devices {
		if d.AdminAccess {
			continue
		}
		h := Holding{ClaimUID: r.UID, Claim: r.Key(), UUID: d.GPUUUID, Share: d.Share, MPS: d.UsesMPS()}
		if d.MIG != nil {
			h.MIG = &gpu.MIGPlacement{Start: d.MIG.Start, Size: d.MIG.Size}
		}
		out = append(out, h)
	}
	return out
}

// prepareAction is what Prepare does with a claim given its record.
type prepareAction int

const (
	// actionPrepare: no record, prepare from scratch.
	actionPrepare prepareAction = iota
	// actionReturnExisting: completed earlier, return the same IDs.
	actionReturnExisting
	// actionRollbackThenPrepare: a previous attempt stopped half-way.
	actionRollbackThenPrepare
)

// decidePrepare: specPresent reports whether the claim's CDI spec is on
// disk, sameAllocation whether the record was prepared for the allocation
// now asked for. A completed claim whose spec vanished (someone cleaned the
// CDI directory) is prepared again in place rather than handing out IDs
// nothing defines; its MPS accounting is idempotent, so a running daemon is
// not disturbed. A record of another allocation of the same claim UID (the
// claim was deallocated and allocated again while the plugin missed the
// unprepare) is stale: it is undone and the new allocation prepared.
func decidePrepare(rec *prepared.Claim, specPresent, sameAllocation bool) prepareAction {
	switch {
	case rec == nil:
		return actionPrepare
	case !sameAllocation:
		return actionRollbackThenPrepare
	case rec.State == prepared.PrepareCompleted && specPresent:
		return actionReturnExisting
	case rec.State == prepared.PrepareCompleted:
		return actionPrepare
	default:
		return actionRollbackThenPrepare
	}
}

// startupPlan is what start-up does to reach a consistent state.
type startupPlan struct {
	// Keep are completed claims whose spec exists: their MPS accounting is
	// replayed.
	Keep []prepared.Claim
	// Rollback are records to undo (spec removed, MPS released) and drop.
	Rollback []prepared.Claim
	// RemoveSpecs are claim UIDs with a spec of ours and no kept record.
	RemoveSpecs []string
}

// planStartup decides from the checkpoint's records and the claim UIDs that
// have a spec on disk. bootChanged drops every record: after a reboot no
// container from before survives, and neither does MPS state.
func planStartup(records map[string]prepared.Claim, specUIDs []string, bootChanged bool) startupPlan {
	var plan startupPlan
	hasSpec := map[string]bool{}
	for _, uid := range specUIDs {
		hasSpec[uid] = true
	}
	kept := map[string]bool{}
	for _, uid := range slices.Sorted(maps.Keys(records)) {
		rec := records[uid]
		switch {
		case bootChanged, rec.State != prepared.PrepareCompleted, !hasSpec[uid]:
			// A completed record without its spec cannot be used by a new
			// container; the kubelet prepares again before starting one.
			plan.Rollback = append(plan.Rollback, rec)
		default:
			plan.Keep = append(plan.Keep, rec)
			kept[uid] = true
		}
	}
	for _, uid := range specUIDs {
		if !kept[uid] {
			plan.RemoveSpecs = append(plan.RemoveSpecs, uid)
		}
	}
	return plan
}

// sameAllocation reports whether a record was prepared for the allocation
// of want (a record just built from the claim). Records of older plugins
// have no digest; their devices are compared instead.
func sameAllocation(have, want prepared.Claim) bool {
	if have.Allocation != "" && want.Allocation != "" {
		return have.Allocation == want.Allocation
	}
	if len(have.Devices) != len(want.Devices) {
		return false
	}
	for i, h := range have.Devices {
		w := want.Devices[i]
		if h.Request != w.Request || h.Device != w.Device || h.ShareID != w.ShareID || h.Share != w.Share ||
			h.AdminAccess != w.AdminAccess || h.MemoryBytes != w.MemoryBytes || h.ComputePercent != w.ComputePercent {
			return false
		}
	}
	return true
}
