package mps

// Share accounting: which claims hold shares on which cards, and the
// cards' compute modes (EXCLUSIVE_PROCESS while a share holds one).

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"k8s.io/klog/v2"

	"github.com/tangram-gpu/tangram/pkg/plugin/mps/daemon"
	"github.com/tangram-gpu/tangram/pkg/plugin/mps/mpsv3"
)

// Acquire records that claim holds shares and, for cards that had no share
// yet, sets EXCLUSIVE_PROCESS; the daemon must be running. It waits at most
// Timing.ReadyWait for the daemon and otherwise returns a
// *DaemonNotReadyError at once, while the worker keeps starting it; while
// the control daemon is known unresponsive (a command got no answer) it
// returns one at once, naming that command, and sends nothing. In v3
// mode it then creates the claim's /dev/shm and namespace, with the
// shares' limits; a server not listed as running is a *DaemonNotReadyError
// too. Acquiring again for the same claim changes nothing. On error nothing
// is recorded and compute modes it changed are restored.
func (m *Manager) Acquire(ctx context.Context, claim string, shares []Share) error {
	// Not under the claim's namespace lock: the wait for the daemon must
	// let the worker sync.
	added, err := m.acquire(ctx, claim, shares)
	if err != nil || m.v3 == nil {
		return err
	}
	// The claim is recorded, so a sync from now on keeps its namespace.
	unlock, err := m.ns.lock(ctx, mpsv3.NamespaceName(claim))
	if err != nil {
		if added {
			err = errors.Join(err, m.release(ctx, claim))
		}
		return fmt.Errorf("preparing the MPS v3 namespace of claim %s: %w", claim, err)
	}
	defer unlock(true)
	if err := m.prepareNamespace(ctx, claim, shares); err != nil {
		if added {
			// Undo this call only: a claim held before (in use) keeps
			// its share.
			err = errors.Join(err, m.dirs.Remove(ctx, claim), m.release(ctx, claim))
		}
		return err
	}
	return nil
}

func shareCards(shares []Share) []string {
	cards := make([]string, 0, len(shares))
	for _, s := range shares {
		cards = append(cards, s.Card)
	}
	return uniqueSorted(cards)
}

// acquire does the accounting; added reports whether this call recorded
// the claim (false when it was held already).
func (m *Manager) acquire(ctx context.Context, claim string, shares []Share) (bool, error) {
	logger := klog.FromContext(ctx)
	m.startWorker(ctx)
	m.mu.Lock()
	defer m.mu.Unlock()
	cards := shareCards(shares)
	for _, uuid := range cards {
		if !m.shareable[uuid] {
			return false, fmt.Errorf("share of claim %s on card %s: %w; only cards published as shareable can hold shares", claim, uuid, errNotShareable)
		}
	}
	if len(cards) == 0 {
		return false, nil
	}
	if !m.control.unresponsiveSince.IsZero() {
		// A control command got no answer: refuse at once, sending none,
		// rather than wait a deadline under the caller's state lock that
		// whole cards queue behind. Only the worker probes the daemon.
		m.sup.verify = true
		m.kickWorker()
		return false, &DaemonNotReadyError{Claim: claim, Cause: m.control.lastTimeout}
	}
	var switched, added []string
	for _, uuid := range cards {
		if _, held := m.book.holders[uuid][claim]; held {
			continue
		}
		if len(m.book.holders[uuid]) == 0 {
			if err := m.computeMode.SetComputeMode(ctx, uuid, daemon.ComputeModeExclusiveProcess); err != nil {
				m.restoreModesLocked(ctx, switched)
				return false, fmt.Errorf("preparing card %s for MPS shares: %w", uuid, err)
			}
			switched = append(switched, uuid)
		}
		added = append(added, uuid)
	}
	if len(added) == 0 {
		// Held already (a claim prepared again): in use, nothing to wait
		// for; failing here would make the caller drop a running share.
		return false, nil
	}
	m.book.shares[claim] = slices.Clone(shares)
	// Held but not yet in use: a concurrent release of another claim must
	// not stop the daemon this share is waiting for.
	for _, uuid := range added {
		m.book.hold(claim, uuid, false)
	}
	// With no other share in use, another plugin process may have stopped
	// the daemon since this one last saw it running.
	fresh := m.sup.guard != nil && !m.book.inUse()
	waitFrom := time.Now()
	if err := m.waitReadyLocked(ctx, fresh, m.timing.ReadyWait, true); err != nil {
		for _, uuid := range added {
			m.book.drop(claim, uuid)
		}
		m.restoreModesLocked(ctx, switched)
		m.sup.wantUntil = time.Now().Add(m.timing.Linger)
		m.kickWorker()
		if errors.Is(err, errStillStarting) {
			// Not starting but hung, if a command timed out meanwhile:
			// say which, rather than "still starting".
			err = m.control.waitingOn(waitFrom, m.timing.ControlTimeout)
		}
		return false, &DaemonNotReadyError{Claim: claim, Cause: err}
	}
	for _, uuid := range cards {
		m.book.holders[uuid][claim] = true
	}
	// The share the daemon was kept for has arrived (or another did).
	m.sup.wantUntil = time.Time{}
	if len(switched) > 0 {
		logger.V(2).Info("Cards switched to MPS", "claim", claim, "cards", switched)
	}
	return true, nil
}

// restoreModesLocked sets cards switched by a failed Acquire back to
// DEFAULT, unless another share arrived on them meanwhile.
func (m *Manager) restoreModesLocked(ctx context.Context, cards []string) {
	for _, uuid := range cards {
		if len(m.book.holders[uuid]) > 0 {
			continue
		}
		if err := m.computeMode.SetComputeMode(ctx, uuid, daemon.ComputeModeDefault); err != nil {
			klog.FromContext(ctx).Error(err, "Restoring compute mode after a failed share", "card", uuid)
		}
	}
}

// Restore records, at start-up, a share the checkpoint says is prepared
// and in use. It never fails and never waits: the share's container may be
// running, so its accounting is kept whatever else goes wrong (otherwise
// start-up would take the card and daemon for idle and tear them down).
// The card's EXCLUSIVE_PROCESS is asserted again, and the daemon adopted or
// started by the worker, with retries; Status reports what failed.
//
// In v3 mode the claim's namespace is recreated or adopted by the worker
// once the daemon answers.
func (m *Manager) Restore(ctx context.Context, claim string, shares []Share) {
	logger := klog.FromContext(ctx)
	m.startWorker(ctx)
	m.mu.Lock()
	defer m.mu.Unlock()
	m.book.shares[claim] = slices.Clone(shares)
	for _, uuid := range shareCards(shares) {
		if !m.shareable[uuid] {
			// Kept all the same: the share may be running.
			logger.Info("Warning: restoring a share on a card not published as shareable any more", "claim", claim, "card", uuid)
		}
		first := len(m.book.holders[uuid]) == 0
		m.book.hold(claim, uuid, true)
		if !first {
			continue
		}
		if err := m.computeMode.SetComputeMode(ctx, uuid, daemon.ComputeModeExclusiveProcess); err != nil {
			logger.Error(err, "Restoring EXCLUSIVE_PROCESS of a card with shares failed; retrying in the background", "card", uuid)
			m.book.pendingModes[uuid] = true
			m.recordLocked(fmt.Errorf("restoring compute mode of card %s: %w", uuid, err))
		}
	}
	m.kickWorker()
}

// Release drops every share of claim. A card left without shares goes back
// to DEFAULT; with no share left on the node the worker stops the daemon in
// the background. A card whose compute mode cannot be restored stays
// recorded for the claim, so a retried Release tries again. Releasing an
// unknown claim succeeds.
//
// In v3 mode the claim's namespace and /dev/shm go first; if that fails
// the shares stay recorded, so a retried Release tries again.
func (m *Manager) Release(ctx context.Context, claim string) error {
	if m.v3 != nil {
		unlock, err := m.ns.lock(ctx, mpsv3.NamespaceName(claim))
		if err != nil {
			return fmt.Errorf("releasing MPS shares of claim %s: %w", claim, err)
		}
		defer unlock(true)
		if err := m.dropNamespace(ctx, claim); err != nil {
			return fmt.Errorf("releasing MPS shares of claim %s: %w", claim, err)
		}
	}
	return m.release(ctx, claim)
}

func (m *Manager) release(ctx context.Context, claim string) error {
	m.startWorker(ctx)
	m.mu.Lock()
	defer m.mu.Unlock()
	var errs []error
	dropped := len(m.book.claims[claim]) > 0
	for _, uuid := range slices.Sorted(maps.Keys(m.book.claims[claim])) {
		if len(m.book.holders[uuid]) == 1 {
			if err := m.computeMode.SetComputeMode(ctx, uuid, daemon.ComputeModeDefault); err != nil {
				errs = append(errs, fmt.Errorf("restoring compute mode of card %s: %w", uuid, err))
				continue
			}
			delete(m.book.pendingModes, uuid)
		}
		m.book.drop(claim, uuid)
	}
	if len(m.book.claims[claim]) == 0 {
		delete(m.book.shares, claim)
	}
	if len(m.book.holders) == 0 {
		if m.timing.IdleGrace > 0 && dropped {
			// A share arriving soon finds the daemon ready.
			m.sup.idleUntil = time.Now().Add(m.timing.IdleGrace)
		}
		m.kickWorker()
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("releasing MPS shares of claim %s: %w", claim, err)
	}
	return nil
}

var errNotShareable = errors.New("card is not shareable on this node")
