package driver

import (
	"maps"
	"slices"
	"sort"

	configapi "github.com/tangram-gpu/tangram/api/gpu/v1alpha1"
	"github.com/tangram-gpu/tangram/pkg/sharing"
)

// This file holds the pure decisions of prepare, unprepare and start-up:
// given what the checkpoint says and what exists on disk, what to do. The
// Driver carries them out.

// Phase is how far a claim's preparation got.
type Phase string

const (
	// PhaseStarted: the claim's cards are reserved, its spec and MPS
	// accounting may be partly done. Never returned to the kubelet.
	PhaseStarted Phase = "PrepareStarted"
	// PhaseCompleted: spec written, MPS accounting done, IDs returned.
	PhaseCompleted Phase = "PrepareCompleted"
)

// ClaimRecord is what the plugin remembers about one claim.
type ClaimRecord struct {
	UID       string
	Namespace string
	Name      string
	Phase     Phase
	// Allocation is the digest of the allocation the claim was prepared
	// for (allocationDigest); empty in records of older plugins.
	Allocation string
	Devices    []PreparedDevice
}

// PreparedDevice is one allocation result as prepared.
type PreparedDevice struct {
	Request string
	Pool    string
	Device  string
	ShareID string
	UUID    string
	// Share is true when the result holds part of the card.
	Share bool
	// MPS is true when the share is enforced by the node's MPS daemon, so
	// MPS accounting was done for it.
	MPS         bool
	AdminAccess bool
	// MemoryBytes and ComputePercent are what the result consumed (the
	// card's memory for a whole card), kept for diagnosis.
	MemoryBytes    int64
	ComputePercent int64
	// CDIDeviceIDs are the fully qualified IDs given to the kubelet.
	CDIDeviceIDs []string
	// Config is the effective config the result was prepared with, kept
	// for diagnosis.
	Config *configapi.GpuConfig
}

func (r ClaimRecord) key() string { return r.Namespace + "/" + r.Name }

// mpsCards returns the sorted, unique cards the record holds MPS shares on.
func (r ClaimRecord) mpsCards() []string {
	var out []string
	for _, d := range r.Devices {
		if d.MPS {
			out = append(out, d.UUID)
		}
	}
	sort.Strings(out)
	return slices.Compact(out)
}

// mpsShares returns the record's MPS shares with the limits its MPS
// namespace gets: the consumed memory, and the consumed compute or else the
// config's default active-thread percentage (the rule of the CDI edits).
func (r ClaimRecord) mpsShares() []sharing.Share {
	var out []sharing.Share
	for _, d := range r.Devices {
		if !d.MPS {
			continue
		}
		s := sharing.Share{Card: d.UUID, MemoryBytes: d.MemoryBytes, ThreadPercent: d.ComputePercent}
		if s.ThreadPercent == 0 && d.Config != nil && d.Config.Sharing != nil && d.Config.Sharing.MPS != nil &&
			d.Config.Sharing.MPS.DefaultActiveThreadPercentage != nil {
			s.ThreadPercent = int64(*d.Config.Sharing.MPS.DefaultActiveThreadPercentage)
		}
		out = append(out, s)
	}
	return out
}

// holdings lists how the record holds its cards.
func (r ClaimRecord) holdings() []Holding {
	var out []Holding
	for _, d := range r.Devices {
		if d.AdminAccess {
			continue
		}
		out = append(out, Holding{ClaimUID: r.UID, Claim: r.key(), UUID: d.UUID, Share: d.Share, MPS: d.MPS})
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
func decidePrepare(rec *ClaimRecord, specPresent, sameAllocation bool) prepareAction {
	switch {
	case rec == nil:
		return actionPrepare
	case !sameAllocation:
		return actionRollbackThenPrepare
	case rec.Phase == PhaseCompleted && specPresent:
		return actionReturnExisting
	case rec.Phase == PhaseCompleted:
		return actionPrepare
	default:
		return actionRollbackThenPrepare
	}
}

// startupPlan is what start-up does to reach a consistent state.
type startupPlan struct {
	// Keep are completed claims whose spec exists: their MPS accounting is
	// replayed.
	Keep []ClaimRecord
	// Rollback are records to undo (spec removed, MPS released) and drop.
	Rollback []ClaimRecord
	// RemoveSpecs are claim UIDs with a spec of ours and no kept record.
	RemoveSpecs []string
}

// planStartup decides from the checkpoint's records and the claim UIDs that
// have a spec on disk. bootChanged drops every record: after a reboot no
// container from before survives, and neither does MPS state.
func planStartup(records map[string]ClaimRecord, specUIDs []string, bootChanged bool) startupPlan {
	var plan startupPlan
	hasSpec := map[string]bool{}
	for _, uid := range specUIDs {
		hasSpec[uid] = true
	}
	kept := map[string]bool{}
	for _, uid := range slices.Sorted(maps.Keys(records)) {
		rec := records[uid]
		switch {
		case bootChanged, rec.Phase != PhaseCompleted, !hasSpec[uid]:
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
func sameAllocation(have, want ClaimRecord) bool {
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
