// Package mpsshare is the MPS share kind of the kubelet plugin: the
// accounting of each claim's shares with the node's MPS daemon (which
// decides when the daemon runs and which cards are in EXCLUSIVE_PROCESS)
// at prepare, unprepare and start-up, and in step with the other plugin
// process of a rolling update. The daemon itself is pkg/plugin/mps's.
package mpsshare

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"time"

	"k8s.io/klog/v2"

	"github.com/tangram-gpu/tangram/pkg/plugin/kinds"
	"github.com/tangram-gpu/tangram/pkg/plugin/mps"
	"github.com/tangram-gpu/tangram/pkg/plugin/prepared"
)

// Shares is the MPS accounting the kind needs (mps.Manager). None of its
// calls waits long on the MPS daemon.
type Shares interface {
	// Acquire accounts a new claim's shares; an error wrapping
	// *mps.DaemonNotReadyError means the daemon is not ready yet and
	// the kubelet should retry.
	Acquire(ctx context.Context, claimUID string, shares []mps.Share) error
	// AwaitDaemon waits, bounded by its own limit and ctx, for the daemon
	// to be ready for a share; it holds no lock others need, and is
	// called before the state lock. The daemon stays wanted until done
	// is called, after the call. An error only says the daemon is not
	// ready: Acquire then answers the share.
	AwaitDaemon(ctx context.Context) (done func(), err error)
	// Restore accounts, at start-up, shares that may be running; it never
	// fails, so nothing a running share uses is torn down.
	Restore(ctx context.Context, claimUID string, shares []mps.Share)
	Release(ctx context.Context, claimUID string) error
	Reconcile(ctx context.Context) error
	// Resync makes the accounting look at the daemon again: another plugin
	// process may have started or stopped it.
	Resync(ctx context.Context)
	// GuardStops makes the daemon stop only under g: see mps.StopGuard.
	GuardStops(g mps.StopGuard)
}

// Checkpoint is the plugin's state store as the daemon's stop guard reads
// it (plugin.StateStore).
type Checkpoint interface {
	Lock(ctx context.Context) (unlock func(), err error)
	Load(ctx context.Context) (records map[string]prepared.Claim, bootChanged bool, err error)
}

// Effects are the MPS share kind's effects: the accounting of the claims'
// shares enforced by MPS (prepared.Device.UsesMPS).
type Effects struct {
	// shares is nil on a node with sharing disabled, where a claim with
	// MPS shares is refused.
	shares Shares
	node   string
}

var (
	_ kinds.Effects  = (*Effects)(nil)
	_ kinds.Waiter   = (*Effects)(nil)
	_ kinds.Resyncer = (*Effects)(nil)
)

// New returns the MPS share kind of node; shares nil (sharing disabled)
// refuses every MPS share. The daemon is let stop only under the state
// lock and while state records no share (stopGuard).
func New(shares Shares, node string, state Checkpoint) *Effects {
	if shares != nil {
		// Before start-up's Settle lets the worker stop an idle daemon.
		shares.GuardStops(stopGuard{state: state})
	}
	return &Effects{shares: shares, node: node}
}

// Kind names the kind.
func (e *Effects) Kind() string { return "MPS share" }

// Admit refuses MPS shares on a node with sharing disabled.
func (e *Effects) Admit(_ context.Context, rec prepared.Claim) error {
	if cards := rec.MPSCards(); len(cards) > 0 && e.shares == nil {
		return fmt.Errorf("the claim holds shares of %v, but sharing is disabled on node %s; use a whole card or a node with --sharing=enabled",
			cards, e.node)
	}
	return nil
}

// BeforeLock waits for the MPS daemon when one of the call's claims holds
// an MPS share, holding no lock: the kubelet's calls are not serialized by
// the helper (pkg/plugin/app/run.go), so whole-card calls go on meanwhile. The wait is
// bounded by the Manager's StartWait and the call's deadline; a daemon
// still not ready is SetUp's to answer. done lets the daemon go when no
// share holds it.
func (e *Effects) BeforeLock(ctx context.Context, recs []prepared.Claim) (done func()) {
	if e.shares == nil || !slices.ContainsFunc(recs, func(rec prepared.Claim) bool { return len(rec.MPSCards()) > 0 }) {
		return func() {}
	}
	start := time.Now()
	done, err := e.shares.AwaitDaemon(ctx)
	logger := klog.FromContext(ctx)
	if err != nil {
		logger.Info("MPS daemon not ready after waiting; the shares' prepares say so and the kubelet retries", "waited", time.Since(start).Round(time.Millisecond), "err", err)
		return done
	}
	logger.V(3).Info("MPS daemon ready for the call's shares", "waited", time.Since(start).Round(time.Millisecond))
	return done
}

// SetUp accounts the claim's MPS shares; never a long wait under the state
// lock: the wait for a starting daemon was BeforeLock's, and every control
// command has a deadline (mps.Manager).
func (e *Effects) SetUp(ctx context.Context, rec prepared.Claim) (prepared.Claim, error) {
	if len(rec.MPSCards()) == 0 {
		return rec, nil
	}
	if err := e.Admit(ctx, rec); err != nil {
		return rec, err
	}
	return rec, e.shares.Acquire(ctx, rec.UID, rec.MPSShares())
}

// NeedsIntent is false: the accounting is in this process's memory, and
// what a share leaves on the node (its card's compute mode, the daemon, a
// v3 namespace) Settle puts in line with the records that hold shares.
func (e *Effects) NeedsIntent(prepared.Claim) bool { return false }

// Undo releases the claim's MPS shares.
func (e *Effects) Undo(ctx context.Context, rec prepared.Claim) error {
	if len(rec.MPSCards()) == 0 || e.shares == nil {
		return nil
	}
	return e.shares.Release(ctx, rec.UID)
}

// RollBack does nothing: the accounting of an interrupted preparation was
// in the old process's memory, and what it left with the daemon (a v3
// namespace) is Settle's reconcile to remove.
func (e *Effects) RollBack(context.Context, prepared.Claim) error { return nil }

// Recover accounts a kept claim's shares, unconditionally and without
// waiting for the daemon: the claim's containers may be running on it.
func (e *Effects) Recover(ctx context.Context, rec prepared.Claim) (prepared.Claim, bool, error) {
	if len(rec.MPSCards()) == 0 {
		return rec, false, nil
	}
	if e.shares == nil {
		return rec, false, fmt.Errorf("claim %s holds MPS shares but the plugin now runs with --sharing=disabled; restart it with --sharing=enabled until the claim's pods are gone", rec.Key())
	}
	e.shares.Restore(ctx, rec.UID, rec.MPSShares())
	return rec, false, nil
}

// Settle stops a daemon nobody needs any more and brings the cards'
// compute modes and v3 namespaces in line with the accounting. The daemon
// is looked at again (Resync): a process that died preparing a share may
// have started it.
func (e *Effects) Settle(ctx context.Context, _ map[string]prepared.Claim) error {
	if e.shares == nil {
		return nil
	}
	err := e.shares.Reconcile(ctx)
	e.shares.Resync(ctx)
	return err
}

// Resync tells the accounting about shares another plugin process
// prepared or unprepared: the accounting decides when the daemon is
// needed and which cards are in EXCLUSIVE_PROCESS.
func (e *Effects) Resync(ctx context.Context, before, after map[string]prepared.Claim) {
	if e.shares == nil {
		return
	}
	logger := klog.FromContext(ctx)
	changed := false
	uids := slices.Sorted(maps.Keys(before))
	for uid := range after {
		if _, ok := before[uid]; !ok {
			uids = append(uids, uid)
		}
	}
	for _, uid := range uids {
		had, has := before[uid].MPSCards(), after[uid].MPSCards()
		if slices.Equal(had, has) {
			continue
		}
		logger.V(2).Info("Another plugin process changed the claim's MPS shares; accounting them here too", "claimUID", uid, "before", had, "after", has)
		changed = true
		if len(had) > 0 {
			if err := e.shares.Release(ctx, uid); err != nil {
				logger.Error(err, "Releasing MPS shares another plugin process released", "claimUID", uid)
			}
		}
		if len(has) > 0 {
			e.shares.Restore(ctx, uid, after[uid].MPSShares())
		}
	}
	if changed {
		// The other process may have started or stopped the daemon too.
		e.shares.Resync(ctx)
	}
}
