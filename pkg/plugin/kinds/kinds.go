// Package kinds is what the kubelet plugin's Driver does not know about the
// kinds of prepared device: a whole card, admin access, an MPS share, a
// share without a backend, a MIG partition. The Driver runs the lifecycle
// of a claim (lock, plan, record, apply, undo, persist) and calls, at each
// step, the Effects of every kind registered on the node
// (pkg/plugin/kinds.go); each kind's Effects look only at the devices of
// that kind in the claim's record and do nothing for a claim without any.
//
// Only the kinds that change the node beyond the claim's CDI spec have
// Effects: MPS shares (pkg/plugin/kinds/mpsshare: the MPS accounting and
// daemon) and MIG partitions (pkg/plugin/kinds/migpartition: the MIG
// instances). A whole card, admin access and a share without a backend
// are their CDI edits and status data only.
//
// docs/architecture.md ("Adding a kind") says what a new kind touches.
package kinds

import (
	"context"

	"github.com/tangram-gpu/tangram/pkg/plugin/prepared"
)

// Effects are one kind's side effects on the node. The Driver calls them
// under the state lock (the lock between the node's plugin processes), in
// registration order for Admit and SetUp and in reverse for Undo and
// RollBack, always after it removed the claim's CDI spec.
type Effects interface {
	// Kind names the kind, in logs and errors.
	Kind() string
	// Admit is called before the claim's intent is recorded and refuses
	// what SetUp would refuse for a reason the kubelet's retry does not
	// clear by itself (sharing disabled on the node, a MIG placement held
	// by an instance Tangram did not create).
	Admit(ctx context.Context, rec prepared.Claim) error
	// NeedsIntent reports whether SetUp would leave, for this claim,
	// something that outlives the process and that a restart finds only
	// through the claim's recorded intent (a MIG instance at its
	// placement). The Driver records the intent (PrepareStarted) before
	// SetUp only for such claims (and those with a record on disk
	// already): what else a crash leaves (the CDI spec, the claim's
	// /dev/shm, an MPS share's compute mode and v3 namespace) start-up,
	// or an unprepare of the claim in the other process of a rolling
	// update, removes as held by no record (Settle).
	NeedsIntent(rec prepared.Claim) bool
	// SetUp does the kind's side effects for the claim, after its intent
	// is recorded where NeedsIntent asks for it. It returns the record
	// with what was done, on error too, so that Undo finds it.
	SetUp(ctx context.Context, rec prepared.Claim) (prepared.Claim, error)
	// Undo removes what SetUp did or may have done (an interrupted SetUp);
	// nothing to remove is no error.
	Undo(ctx context.Context, rec prepared.Claim) error
	// Recover is called at start-up for each completed claim kept from the
	// checkpoint, whose containers may be running: it accounts what the
	// process keeps in memory and repairs what a reset removed, never
	// waiting long. changed reports that the record changed (the Driver
	// writes the claim's spec again).
	Recover(ctx context.Context, rec prepared.Claim) (fixed prepared.Claim, changed bool, err error)
	// RollBack is called at start-up for each claim whose preparation did
	// not complete (or whose spec is gone), before its record is dropped:
	// it removes what outlives the process; what was only in the old
	// process's memory is gone with it.
	RollBack(ctx context.Context, rec prepared.Claim) error
	// Settle is called at the end of start-up, with every record loaded
	// or rolled back, and after an unprepare removed what an interrupted
	// preparation left (a claim without a record, whose intent was not
	// needed); it may remove what no record holds.
	Settle(ctx context.Context, records map[string]prepared.Claim) error
}

// Records is the Driver's claim records as a kind may use them.
type Records interface {
	// Snapshot copies the records as the Driver holds them now.
	Snapshot() map[string]prepared.Claim
	// Save records rec (replacing the claim's record) and stores all the
	// records durably. A kind saves between side effects that must not be
	// forgotten by a crash (each MIG instance it creates).
	Save(ctx context.Context, rec prepared.Claim) error
	// Lock takes the state lock and re-reads the checkpoint, as a call of
	// the kubelet does; unlock releases it. It is for a kind's own
	// background work: the Driver holds the lock while it calls Effects,
	// and the lock is not re-entrant.
	Lock(ctx context.Context) (unlock func(), err error)
}

// The Effects of some kinds do more; the Driver looks for these
// interfaces on every registered Effects.

// Waiter is a kind that waits, before the state lock, for something its
// SetUp needs (the MPS daemon starting), so that no other call waits
// behind the lock with it.
type Waiter interface {
	// BeforeLock is called with the planned records of one prepare call;
	// done is called at the end of the call.
	BeforeLock(ctx context.Context, recs []prepared.Claim) (done func())
}

// Resyncer is a kind whose in-memory state follows the records of the
// other plugin process of a rolling update.
type Resyncer interface {
	// Resync is called, under the state lock, when the checkpoint
	// re-read at the start of a call differs from what this process held.
	Resync(ctx context.Context, before, after map[string]prepared.Claim)
}

// Rebuilder is a kind whose side effects outlive a lost checkpoint and
// tell which claim they belong to (MIG instances at a claim's placement).
type Rebuilder interface {
	// Leftovers counts what of the kind is on the node; with none, and no
	// CDI spec of ours, a missing checkpoint is a first start.
	Leftovers(ctx context.Context) int
	// Adopt takes back, for a claim rebuilt from its CDI spec, what
	// exists of it (creating what is gone), without saving.
	Adopt(ctx context.Context, rec prepared.Claim) (prepared.Claim, error)
	// Intents adds to records, for the claims planned here that have no
	// spec and no record, the intent of those whose side effects were
	// done before the crash lost it (start-up then rolls them back).
	// planned holds those claims' records as planned from the API server.
	Intents(ctx context.Context, planned []prepared.Claim, records map[string]prepared.Claim)
}
