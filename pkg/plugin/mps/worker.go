package mps

// The daemon's lifecycle as shares come and go: the worker that starts,
// checks and stops the node's daemon, and the waits for it.

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"k8s.io/klog/v2"

	"github.com/tangram-gpu/tangram/pkg/plugin/mps/daemon"
)

// AwaitDaemon waits until the daemon is ready for a share, for at most
// Timing.StartWait and half of what is left of ctx's deadline, holding no
// lock of the Manager meanwhile: the worker starts or checks the daemon.
// The driver calls it for a call with shares before it takes the node's
// state lock, so that a share whose daemon is starting waits for it (no
// retryable error, no kubelet back-off) without holding up any other
// call; Acquire, under that lock, then finds the daemon ready.
//
// The daemon stays wanted until the caller calls done (never nil), after
// its call: between the wait and Acquire's accounting the daemon must not
// be stopped for want of shares. A non-nil error says it is not ready
// (yet); the caller goes on, and Acquire answers the share with a
// DaemonNotReadyError.
func (m *Manager) AwaitDaemon(ctx context.Context) (done func(), err error) {
	m.startWorker(ctx)
	wait := m.timing.StartWait
	if deadline, ok := ctx.Deadline(); ok {
		wait = min(wait, time.Until(deadline)/2)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.sup.awaiting++
	var once sync.Once
	done = func() {
		once.Do(func() {
			m.mu.Lock()
			defer m.mu.Unlock()
			m.sup.awaiting--
			// No longer wanted, perhaps: the worker decides.
			m.kickWorker()
		})
	}
	if !m.control.unresponsiveSince.IsZero() {
		// Known hung: waiting would only delay the call; Acquire refuses
		// the share at once and the worker probes.
		return done, m.control.lastTimeout
	}
	fresh := m.sup.guard != nil && !m.book.inUse()
	err = m.waitReadyLocked(ctx, fresh, wait, false)
	if errors.Is(err, errStillStarting) {
		err = fmt.Errorf("the node's MPS daemon is not ready after waiting %s", wait.Round(time.Millisecond))
	}
	return done, err
}

// waitReadyLocked waits, with m.mu released meanwhile, until the worker
// has the daemon running, for at most wait. It returns nil when ready; with
// failFast, the worker's failure when an attempt made after the call
// failed (otherwise it waits on through the worker's retries); a wait that
// times out returns errStillStarting. fresh asks for an Ensure begun after
// this call: what the worker saw before may be stale.
func (m *Manager) waitReadyLocked(ctx context.Context, fresh bool, wait time.Duration, failFast bool) error {
	if m.sup.ready && !fresh {
		// Running; let the worker check it in the background once the
		// last check is Timing.Recheck old.
		m.sup.recheck = true
		m.kickWorker()
		return nil
	}
	after := m.sup.ensureRounds
	ready := func() bool { return m.sup.ready && (!fresh || m.sup.readyRound > after) }
	m.sup.verify = true
	m.kickWorker()
	since := m.sup.ops.attempts
	timer := time.NewTimer(wait)
	defer timer.Stop()
	for !ready() {
		if failFast && m.sup.ops.attempts > since && m.sup.ops.lastErr != nil {
			return m.sup.ops.lastErr
		}
		changed := m.changed
		m.mu.Unlock()
		var done bool
		select {
		case <-changed:
		case <-timer.C:
			done = true
		case <-ctx.Done():
			done = true
		}
		m.mu.Lock()
		if done && !ready() {
			if m.sup.ops.attempts > since && m.sup.ops.lastErr != nil {
				return m.sup.ops.lastErr
			}
			return errStillStarting
		}
	}
	return nil
}

var errStillStarting = errors.New("still starting")

// Reconcile is called at start-up, after the checkpoint's shares have been
// restored: every shareable card without a share goes back to DEFAULT (a
// previous process may have died between switching a card and recording
// the share), and the worker stops a daemon left running for shares that
// are gone, or adopts the one running shares use. It does not wait.
//
// In v3 mode the worker also deletes the namespaces of ours no claim owns.
// The claims' /dev/shm directories are not the Manager's to sweep: every
// claim has one, whole cards too, and the driver removes those of claims
// no record holds (pkg/plugin recover.go).
func (m *Manager) Reconcile(ctx context.Context) error {
	m.startWorker(ctx)
	m.mu.Lock()
	defer m.mu.Unlock()
	m.book.settled = true
	var errs []error
	if m.v3 != nil {
		// Sync again now that unowned namespaces may be deleted.
		m.sup.verify = true
	}
	for _, uuid := range slices.Sorted(maps.Keys(m.shareable)) {
		if len(m.book.holders[uuid]) > 0 {
			continue
		}
		if err := m.computeMode.SetComputeMode(ctx, uuid, daemon.ComputeModeDefault); err != nil {
			errs = append(errs, fmt.Errorf("restoring compute mode of idle card %s: %w", uuid, err))
		}
	}
	m.kickWorker()
	return errors.Join(errs...)
}

// Resync forgets what the Manager believes about the daemon: during a
// rolling update another plugin process on the node may have started or
// stopped it since. The worker looks again, starting or adopting it if
// shares want it and stopping it otherwise. It does not wait.
func (m *Manager) Resync(ctx context.Context) {
	m.startWorker(ctx)
	m.mu.Lock()
	defer m.mu.Unlock()
	m.sup.ready, m.sup.stopped = false, false
	m.kickWorker()
}

// WaitIdle waits until the worker has nothing left to do: the daemon runs
// if wanted and is stopped otherwise, no compute mode is pending, and no
// failure awaits a retry. For tests and orderly shutdown.
func (m *Manager) WaitIdle(ctx context.Context) error {
	for {
		m.mu.Lock()
		want := m.wantedLocked(time.Now())
		idle := !m.sup.busy && !m.sup.kicked && len(m.book.pendingModes) == 0 && m.sup.ops.lastErr == nil &&
			((want && m.sup.ready) || (!want && (m.sup.stopped || m.sup.ops.attempts == 0)))
		changed := m.changed
		m.mu.Unlock()
		if idle {
			return nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return fmt.Errorf("waiting for the MPS worker: %w", ctx.Err())
		}
	}
}

func (m *Manager) wantedLocked(now time.Time) bool {
	return len(m.book.holders) > 0 || m.sup.awaiting > 0 || now.Before(m.sup.wantUntil) || now.Before(m.sup.idleUntil)
}

// keptUntilLocked is when the daemon stops being wanted without shares.
func (m *Manager) keptUntilLocked() time.Time {
	if m.sup.idleUntil.After(m.sup.wantUntil) {
		return m.sup.idleUntil
	}
	return m.sup.wantUntil
}

func (m *Manager) changedLocked() {
	close(m.changed)
	m.changed = make(chan struct{})
}

func (m *Manager) recordLocked(err error) {
	m.sup.ops.failures++
	m.sup.ops.lastErr, m.sup.ops.lastErrAt = err, time.Now()
	m.changedLocked()
}

// kickWorker asks the worker for a round. Call with m.mu held.
func (m *Manager) kickWorker() {
	m.sup.kicked = true
	select {
	case m.loop.kick <- struct{}{}:
	default:
	}
}

// startWorker starts the worker on first use, with the caller's logger.
func (m *Manager) startWorker(ctx context.Context) {
	m.loop.startOnce.Do(func() {
		wctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
		m.loop.cancel, m.loop.done = cancel, make(chan struct{})
		go m.work(klog.NewContext(wctx, klog.FromContext(ctx).WithName("mps-worker")))
	})
}

// work brings the daemon to what the accounting wants, one operation at a
// time, so Ensure and Stop never overlap and nobody holds m.mu meanwhile.
// Failures are retried with exponential back-off.
func (m *Manager) work(ctx context.Context) {
	defer close(m.loop.done)
	logger := klog.FromContext(ctx)
	backoff := m.timing.RetryMin
	// Nothing to do until asked: the caller that started the worker may
	// not have recorded its share yet, and an empty accounting would
	// read as "stop the daemon".
	select {
	case <-ctx.Done():
		return
	case <-m.loop.kick:
	}
	for {
		r := m.nextRound(time.Now())
		failed := m.restoreModes(ctx, r.modes)
		switch r.act {
		case "ensure":
			if err := m.ensureDaemon(ctx, r); err != nil {
				failed = err
			}
		case "stop":
			again, err := m.stop(ctx)
			if ctx.Err() != nil {
				return
			}
			if again {
				// Decide afresh: work was asked for meanwhile.
				m.mu.Lock()
				m.sup.busy = false
				m.changedLocked()
				m.mu.Unlock()
				continue
			}
			if err := m.recordStop(err); err != nil {
				failed = err
			}
		}
		if failed != nil {
			logger.Error(failed, "MPS daemon or compute mode operation failed; retrying", "operation", r.act, "retryIn", backoff)
		}

		m.mu.Lock()
		// Done with this round: idle unless more is due.
		m.sup.busy = false
		m.changedLocked()
		m.mu.Unlock()
		var wait <-chan time.Time
		switch {
		case failed != nil:
			wait = time.After(backoff)
			backoff = min(2*backoff, m.timing.RetryMax)
		case r.act != "" || len(r.modes) > 0:
			// Look again at once: the wanted state may have changed.
			backoff = m.timing.RetryMin
			continue
		case r.lingerLeft > 0 || r.recheckIn > 0:
			wait = time.After(minPositive(r.lingerLeft, r.recheckIn))
		}
		select {
		case <-ctx.Done():
			return
		case <-m.loop.kick:
		case <-wait:
		}
	}
}

// round is what one turn of the worker does, decided under the lock.
type round struct {
	// act is "ensure", "stop" or "" (nothing to do for the daemon).
	act string
	// n numbers the ensure rounds (readyRound).
	n int
	// unused: no share is in use, so a daemon may be replaced.
	unused bool
	// modes are cards whose EXCLUSIVE_PROCESS is still to be restored.
	modes []string
	// lingerLeft is how much longer an unheld daemon stays wanted.
	lingerLeft time.Duration
	// recheckIn is when a routine check of the ready daemon is due.
	recheckIn time.Duration
}

// nextRound decides the worker's next round and marks the Manager busy
// when it has work.
func (m *Manager) nextRound(now time.Time) round {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.sup.kicked = false
	want := m.wantedLocked(now)
	r := round{}
	recheckAt := m.sup.readyAt.Add(m.timing.Recheck)
	switch {
	case want && (!m.sup.ready || m.sup.verify || m.sup.recheck && !now.Before(recheckAt)):
		r.act = "ensure"
	case want && m.sup.recheck:
		// Checked a moment ago: once more when that check is old.
		r.recheckIn = recheckAt.Sub(now)
	case !want && !m.sup.stopped:
		r.act = "stop"
		// From now on a share must not count on the daemon.
		m.sup.ready = false
	}
	m.sup.verify = false
	m.sup.recheck = r.recheckIn > 0
	r.n = m.sup.ensureRounds
	if r.act == "ensure" {
		m.sup.ensureRounds++
		r.n = m.sup.ensureRounds
	}
	r.unused = m.book.settled && !m.book.inUse()
	r.modes = slices.Sorted(maps.Keys(m.book.pendingModes))
	if want && len(m.book.holders) == 0 {
		r.lingerLeft = m.keptUntilLocked().Sub(now)
	}
	m.sup.busy = r.act != "" || len(r.modes) > 0
	return r
}

// restoreModes sets EXCLUSIVE_PROCESS again on cards with shares whose
// mode was lost; it returns the last failure.
func (m *Manager) restoreModes(ctx context.Context, modes []string) error {
	var failed error
	for _, uuid := range modes {
		err := m.computeMode.SetComputeMode(ctx, uuid, daemon.ComputeModeExclusiveProcess)
		m.mu.Lock()
		if err != nil {
			m.recordLocked(fmt.Errorf("restoring compute mode of card %s: %w", uuid, err))
			failed = err
		} else {
			klog.FromContext(ctx).Info("Restored EXCLUSIVE_PROCESS of a card with shares", "card", uuid)
			delete(m.book.pendingModes, uuid)
			m.changedLocked()
		}
		m.mu.Unlock()
	}
	return failed
}

// ensureDaemon starts or checks the daemon (replacing it only when no
// share is in use) and, in v3 mode, syncs the namespaces; it records the
// outcome.
func (m *Manager) ensureDaemon(ctx context.Context, r round) error {
	ensure := m.daemon.Ensure
	if u, ok := m.daemon.(UnusedEnsurer); ok && r.unused {
		ensure = u.EnsureUnused
	}
	err := ensure(ctx)
	if err == nil && m.v3 != nil {
		err = m.syncNamespaces(ctx)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.sup.ops.attempts++
	if err != nil {
		m.sup.ready = false
		m.recordLocked(err)
		return err
	}
	m.sup.ready, m.sup.stopped, m.sup.ops.lastErr = true, false, nil
	m.sup.readyRound, m.sup.readyAt = r.n, time.Now()
	m.changedLocked()
	return nil
}

// recordStop records the outcome of a stop that was not to be decided
// afresh, and returns its error.
func (m *Manager) recordStop(err error) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.sup.ops.attempts++
	if err != nil {
		m.recordLocked(err)
		return err
	}
	m.sup.ready, m.sup.stopped, m.sup.ops.lastErr = false, true, nil
	m.changedLocked()
	return nil
}

// stop stops the daemon. With a StopGuard it does so only under the
// node's state lock, and only when no plugin process records a share:
// otherwise the process whose shares use the daemon stops it after its
// last one, and stop returns without stopping. again reports that the
// round must be decided afresh: work was asked for while it waited for
// the lock (a call of this process may hold it and wait for the daemon),
// or a share of this process wants the daemon now.
func (m *Manager) stop(ctx context.Context) (again bool, err error) {
	m.mu.Lock()
	guard := m.sup.guard
	m.mu.Unlock()
	if guard == nil {
		return false, m.stopDaemon(ctx)
	}
	unlock, noShares, again, err := m.lockForStop(ctx, guard)
	if again || err != nil {
		return again, err
	}
	defer unlock()
	m.mu.Lock()
	wanted := m.wantedLocked(time.Now())
	m.mu.Unlock()
	if wanted || ctx.Err() != nil {
		return true, nil
	}
	if !noShares {
		klog.FromContext(ctx).V(2).Info("Leaving the MPS daemon running: another plugin process of the node records shares; it stops the daemon after their last one")
		return false, nil
	}
	return false, m.stopDaemon(ctx)
}

// lockForStop waits for the guard's lock unless work is asked for first:
// a call of this process may hold the lock while it waits for the worker.
func (m *Manager) lockForStop(ctx context.Context, guard StopGuard) (unlock func(), noShares, again bool, err error) {
	lockCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	type locked struct {
		unlock   func()
		noShares bool
		err      error
	}
	got := make(chan locked, 1)
	go func() {
		unlock, noShares, err := guard.LockForStop(lockCtx)
		got <- locked{unlock, noShares, err}
	}()
	select {
	case l := <-got:
		if l.err != nil {
			return nil, false, false, fmt.Errorf("not stopping the idle MPS daemon: %w", l.err)
		}
		return l.unlock, l.noShares, false, nil
	case <-m.loop.kick:
		cancel()
		if l := <-got; l.unlock != nil {
			l.unlock()
		}
		return nil, false, true, nil
	}
}

// stopDaemon stops the daemon and, in classic mode, clears its /dev/shm.
func (m *Manager) stopDaemon(ctx context.Context) error {
	stopCtx, cancel := context.WithTimeout(ctx, m.timing.StopTimeout)
	defer cancel()
	err := m.daemon.Stop(stopCtx)
	if err != nil && errors.Is(stopCtx.Err(), context.DeadlineExceeded) && ctx.Err() == nil {
		err = fmt.Errorf("stopping the MPS daemon took longer than %s: %w", m.timing.StopTimeout, err)
	}
	if err == nil && m.v3 == nil {
		// Classic mode: the daemon and its servers are gone, so what they
		// left in the daemon's own /dev/shm is litter.
		err = clearDir(m.layout.ShmDir())
	}
	return err
}

// clearDir removes what dir holds, leaving dir itself.
func clearDir(dir string) error {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("clearing %s: %w", dir, err)
	}
	var errs []error
	for _, e := range entries {
		if err := os.RemoveAll(filepath.Join(dir, e.Name())); err != nil {
			errs = append(errs, fmt.Errorf("clearing %s: %w", dir, err))
		}
	}
	return errors.Join(errs...)
}

// minPositive is the smaller of a and b that is above zero.
func minPositive(a, b time.Duration) time.Duration {
	switch {
	case a <= 0:
		return b
	case b <= 0:
		return a
	}
	return min(a, b)
}
