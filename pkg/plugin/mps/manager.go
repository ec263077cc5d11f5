// Package mps enforces memory and compute shares of a GPU with NVIDIA MPS.
//
// One MPS control daemon serves the whole node. A container can reach only
// one MPS pipe directory, so per-card daemons would make a claim with shares
// on two cards impossible; a single daemon whose server sees every shareable
// card (CUDA_VISIBLE_DEVICES = their UUIDs) lets such a claim work, and the
// per-client limits (CUDA_MPS_PINNED_DEVICE_MEM_LIMIT per device,
// CUDA_MPS_ACTIVE_THREAD_PERCENTAGE) keep each share in its bounds.
//
// The Manager does per-card accounting: the first share on a card switches
// it to EXCLUSIVE_PROCESS and starts the daemon if needed; the last share
// leaving a card switches it back to DEFAULT; when no share remains anywhere
// the daemon is stopped, after Timing.IdleGrace. Whole-card claims never
// come here.
package mps

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"k8s.io/klog/v2"
)

// Mount is a host directory a share's container must see.
type Mount struct {
	HostPath      string
	ContainerPath string
	// ReadOnly mounts it read-only.
	ReadOnly bool
}

// ClientConfig is what a share's container needs to reach the daemon.
type ClientConfig struct {
	// PipeDir is the daemon's pipe directory, CUDA_MPS_PIPE_DIRECTORY in
	// the container, where it is mounted at the same path.
	PipeDir string
	// PipeReadOnly mounts the pipe directory read-only (classic MPS: the
	// node daemon's directory, shared by every share of the node; a client
	// only connects to the sockets and opens the pipes there, which a
	// read-only bind mount allows, and cannot remove or replace them).
	PipeReadOnly bool
	// Mounts holds the pipe directory and the claim's own /dev/shm.
	Mounts []Mount
}

// Manager accounts shares per card and drives the daemon and compute modes.
// It is safe for concurrent use.
//
// No caller ever waits long on the daemon, and no lock of the Manager is
// ever held while the daemon starts or stops or while a control command
// runs: one background worker starts, adopts, checks and stops the daemon,
// retrying failures with back-off; AwaitDaemon (called before the node's
// state lock is taken) waits up to Timing.StartWait for a starting daemon,
// and Acquire (under that lock) waits at most Timing.ReadyWait before
// answering with a retryable DaemonNotReadyError. Every control command
// has a deadline (Timing.ControlTimeout); one that gets no answer marks the
// control daemon unresponsive (Status) until a later command is answered.
// Namespace work is serialized per claim (nsLocks), never node-wide, so a
// hung command holds up only the claim whose command it is.
type Manager struct {
	layout      Layout
	daemon      Daemon
	computeMode ComputeModeSetter
	shareable   map[string]bool
	timing      Timing
	// v3 drives the node's MPS v3 server and namespaces; nil in classic
	// mode. dirs are the per-claim /dev/shm directories of v3 mode.
	v3   *V3Namespaces
	dirs ClaimDirs

	// ns serializes the namespace work of each claim (Acquire once the
	// claim is recorded, Release until it is dropped, the worker's sync of
	// that namespace), so a sync never deletes the namespace of a claim
	// being prepared nor recreates one being released. Taken before mu,
	// never while holding it; its waits end with the caller's context.
	ns nsLocks

	mu sync.Mutex
	// holders maps a card UUID to the claims holding a share on it; the
	// value is false while an Acquire is still waiting for the daemon (the
	// share is not in use yet), true once the share is in use.
	holders map[string]map[string]bool
	// claims maps a claim UID to the cards it holds shares on.
	claims map[string]map[string]bool
	// shares keeps each claim's shares, from which its v3 namespace is
	// derived (again at start-up, from the checkpoint).
	shares map[string][]Share
	// settled is set by Reconcile, once the checkpoint's shares are
	// restored: from then on no share in use means none uses the daemon.
	settled bool
	// wantUntil keeps the daemon wanted for a while after a share was
	// refused because it was not ready, so the kubelet's retry finds it,
	// or while a prepare waits for it (AwaitDaemon).
	wantUntil time.Time
	// idleUntil keeps the daemon running after the node's last share was
	// released, for Timing.IdleGrace.
	idleUntil time.Time
	// awaiting counts calls between AwaitDaemon and its done: they want
	// the daemon for the shares they are about to account.
	awaiting int
	// ready: the worker's last Ensure succeeded and no Stop followed.
	// stopped: its last Stop succeeded, or was left to the plugin process
	// whose shares use the daemon (see StopGuard), and no Ensure followed.
	ready, stopped bool
	// ensureRounds counts the Ensure rounds the worker began; readyRound
	// is the one that made the daemon ready. A share that must not count
	// on what this process saw earlier waits for a round begun after it.
	ensureRounds, readyRound int
	// guard, when set, orders stops with the plugin processes' calls.
	guard StopGuard
	// verify asks the worker to Ensure again although ready (the daemon
	// may have gone; Ensure of a running daemon is cheap).
	verify bool
	// pendingModes are cards with shares whose EXCLUSIVE_PROCESS could not
	// be restored at start-up; the worker retries them.
	pendingModes map[string]bool
	// attempts counts the worker's finished daemon operations; lastErr is
	// the last one's error (nil after a success).
	attempts, failures int
	lastErr            error
	lastErrAt          time.Time
	// busy: the worker is in a round; kicked: work was asked for since
	// the round began.
	busy, kicked bool
	// unresponsiveSince is when a control command last got no answer
	// within its deadline, zero once a later one was answered;
	// stuckCommand is that command. controlTimeouts counts such commands.
	unresponsiveSince time.Time
	stuckCommand      string
	// lastTimeout is the last command without answer and when it timed
	// out, so that a share refused meanwhile can say which command hung
	// (the mark itself may be cleared by then).
	lastTimeout   *ControlTimeoutError
	lastTimeoutAt time.Time
	// inFlight are the control commands sent and not yet answered.
	inFlight        map[int]inFlightCommand
	inFlightSeq     int
	controlTimeouts int
	// changed is closed and replaced whenever the state above changes.
	changed chan struct{}

	kick      chan struct{}
	startOnce sync.Once
	cancel    context.CancelFunc
	done      chan struct{}
}

// Timing bounds the Manager's waits; zero fields take the defaults.
type Timing struct {
	// ReadyWait is the longest Acquire waits for the daemon (default 1s).
	// Acquire runs under the node's state lock, so this stays short; the
	// long wait for a starting daemon is AwaitDaemon's, before that lock.
	ReadyWait time.Duration
	// StartWait is the longest AwaitDaemon waits for a starting daemon
	// (default 25s), and at most half of what is left of its context's
	// deadline (the kubelet's call), so a prepare that waited still has
	// time to answer.
	StartWait time.Duration
	// ControlTimeout is the deadline of each control command the Manager
	// sends (default 10s); a command that exceeds it fails with a
	// *ControlTimeoutError naming it.
	ControlTimeout time.Duration
	// StopTimeout bounds a stop of the daemon (default 2m): the worker
	// stops it under the node's state lock (StopGuard), which no daemon
	// that hangs may hold forever; a stop that times out is retried.
	StopTimeout time.Duration
	// IdleGrace keeps the daemon running for this long after the node's
	// last share is released, so that a share arriving soon after finds
	// it ready (0, the default: stop at once; the plugin's
	// --mps-idle-grace defaults to 5m).
	IdleGrace time.Duration
	// Linger keeps the daemon wanted after a share was refused for want of
	// it, so that the retried prepare finds it running (default 2m).
	Linger time.Duration
	// RetryMin and RetryMax bound the back-off between failed daemon
	// operations (defaults 1s and 30s).
	RetryMin, RetryMax time.Duration
}

func (t Timing) withDefaults() Timing {
	if t.ReadyWait == 0 {
		t.ReadyWait = time.Second
	}
	if t.StartWait == 0 {
		t.StartWait = 25 * time.Second
	}
	if t.ControlTimeout == 0 {
		t.ControlTimeout = 10 * time.Second
	}
	if t.StopTimeout == 0 {
		t.StopTimeout = 2 * time.Minute
	}
	if t.Linger == 0 {
		t.Linger = 2 * time.Minute
	}
	if t.RetryMin == 0 {
		t.RetryMin = time.Second
	}
	if t.RetryMax == 0 {
		t.RetryMax = 30 * time.Second
	}
	return t
}

// ManagerOption configures a Manager.
type ManagerOption func(*Manager)

// WithTiming replaces the default waits.
func WithTiming(t Timing) ManagerOption { return func(m *Manager) { m.timing = t } }

// WithV3 enforces shares with MPS v3: a namespace per claim on the node's
// server, created at Acquire and deleted at Release, and a /dev/shm per
// claim (dirs).
func WithV3(v3 *V3Namespaces, dirs ClaimDirs) ManagerOption {
	return func(m *Manager) { m.v3, m.dirs = v3, dirs }
}

// DaemonNotReadyError answers a share whose daemon is not running yet (or
// failed to start): nothing was recorded, and the caller should retry.
type DaemonNotReadyError struct {
	Claim string
	// Cause is the daemon's last failure, nil while it is still starting.
	Cause error
}

func (e *DaemonNotReadyError) Error() string {
	var hung *ControlTimeoutError
	var pending *ControlPendingError
	if errors.As(e.Cause, &hung) || errors.As(e.Cause, &pending) {
		return fmt.Sprintf("the node's MPS control daemon is unresponsive, so the share of claim %s cannot be set up: %v; whole cards are unaffected, the kubelet retries this prepare", e.Claim, e.Cause)
	}
	if e.Cause != nil {
		return fmt.Sprintf("starting the node's MPS daemon for claim %s: %v; retrying in the background, the kubelet retries this prepare", e.Claim, e.Cause)
	}
	return fmt.Sprintf("the node's MPS daemon for claim %s is still starting; the kubelet retries this prepare", e.Claim)
}

func (e *DaemonNotReadyError) Unwrap() error { return e.Cause }

// StopGuard orders the worker's stops with the prepares of every plugin
// process of the node: during a rolling update two run side by side, on
// one daemon, and each one's accounting knows only the shares it has seen.
type StopGuard interface {
	// LockForStop waits for the lock the node's plugin processes hold
	// around each call and reports whether the state they record holds
	// no MPS share. The worker stops the daemon only when it does, and
	// holds the lock until the daemon is gone, so no share is recorded
	// meanwhile. unlock is nil when err is not.
	LockForStop(ctx context.Context) (unlock func(), noShares bool, err error)
}

// GuardStops makes the worker stop the daemon only under g; see StopGuard.
// Call it before the first Acquire, Restore or Reconcile.
func (m *Manager) GuardStops(g StopGuard) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.guard = g
}

// UnusedEnsurer is a Daemon that can be told that no share uses it, so it
// may replace a running daemon that differs from the one it would start
// instead of adopting it.
type UnusedEnsurer interface {
	EnsureUnused(ctx context.Context) error
}

// NewManager returns a manager for the given shareable cards (UUIDs).
func NewManager(layout Layout, daemon Daemon, computeMode ComputeModeSetter, shareableCards []string, opts ...ManagerOption) *Manager {
	m := &Manager{
		layout:       layout,
		daemon:       daemon,
		computeMode:  computeMode,
		shareable:    map[string]bool{},
		holders:      map[string]map[string]bool{},
		claims:       map[string]map[string]bool{},
		shares:       map[string][]Share{},
		pendingModes: map[string]bool{},
		changed:      make(chan struct{}),
		kick:         make(chan struct{}, 1),
	}
	for _, uuid := range shareableCards {
		m.shareable[uuid] = true
	}
	for _, o := range opts {
		o(m)
	}
	m.timing = m.timing.withDefaults()
	m.ns = newNSLocks()
	if m.v3 != nil {
		// A copy: the caller's V3Namespaces keeps its own control.
		v3 := *m.v3
		v3.ctl = m.deadlineControl(v3.ctl)
		m.v3 = &v3
	}
	return m
}

// ClientConfig returns the pipe directory and mounts of a claim's
// containers: in both modes the claim's own /dev/shm
// (<mps-root>/claims/<uid>/shm, which every claim gets). In classic mode
// the pipe directory is the daemon's, the same for every claim and mounted
// read-only: a classic client reaches the control daemon only there, and
// on a GPU (driver r580) it worked through a read-only bind and with a
// /dev/shm of its own, creating no file in either (docs/enforcement.md,
// "Classic MPS: what every share still shares"). In v3 mode each claim
// gets its namespace's pipe directory.
func (m *Manager) ClientConfig(claimUID string) ClientConfig {
	shm := Mount{HostPath: m.layout.ClaimShmDir(claimUID), ContainerPath: "/dev/shm"}
	if m.v3 != nil {
		pipe := m.layout.NamespacePipeDir(m.v3.Server, claimUID)
		return ClientConfig{
			PipeDir: pipe,
			Mounts:  []Mount{{HostPath: pipe, ContainerPath: pipe}, shm},
		}
	}
	return ClientConfig{
		PipeDir:      m.layout.PipeDir(),
		PipeReadOnly: true,
		Mounts: []Mount{
			{HostPath: m.layout.PipeDir(), ContainerPath: m.layout.PipeDir(), ReadOnly: true},
			shm,
		},
	}
}

// Acquire records that claim holds shares and, for cards that had no share
// yet, sets EXCLUSIVE_PROCESS; the daemon must be running. It waits at most
// Timing.ReadyWait for the daemon and otherwise returns a
// *DaemonNotReadyError at once, while the worker keeps starting it. In v3
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
	unlock, err := m.ns.lock(ctx, NamespaceName(claim))
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

// prepareNamespace creates the claim's /dev/shm and v3 namespace. It is
// idempotent: a namespace left by an earlier attempt is adopted and set.
func (m *Manager) prepareNamespace(ctx context.Context, claim string, shares []Share) error {
	if err := m.dirs.Create(ctx, claim); err != nil {
		return err
	}
	if err := m.v3.CheckRunning(ctx); err != nil {
		m.mu.Lock()
		m.verify = true
		m.kickWorker()
		m.mu.Unlock()
		return &DaemonNotReadyError{Claim: claim, Cause: err}
	}
	have, err := m.v3.List(ctx)
	if err != nil {
		return err
	}
	spec := namespaceFor(claim, shares)
	if err := m.v3.Ensure(ctx, spec, have); err != nil {
		return err
	}
	// The container runtime bind-mounts the namespace's socket directory
	// when the container is created; the daemon makes it, but whether
	// before its first client is not documented, so make sure it exists.
	if err := os.MkdirAll(m.layout.NamespacePipeDir(m.v3.Server, claim), 0o755); err != nil {
		return fmt.Errorf("creating the pipe directory of MPS v3 namespace %s: %w", spec.Name, err)
	}
	klog.FromContext(ctx).V(2).Info("MPS v3 namespace ready", "claim", claim, "namespace", spec.Name,
		"activeThreadPercentage", spec.ActiveThreadPercentage, "pinnedMemoryLimit", spec.PinnedMemoryLimit)
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
	var switched, added []string
	for _, uuid := range cards {
		if _, held := m.holders[uuid][claim]; held {
			continue
		}
		if len(m.holders[uuid]) == 0 {
			if err := m.computeMode.SetComputeMode(ctx, uuid, ComputeModeExclusiveProcess); err != nil {
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
	m.shares[claim] = slices.Clone(shares)
	// Held but not yet in use: a concurrent release of another claim must
	// not stop the daemon this share is waiting for.
	for _, uuid := range added {
		m.holdLocked(claim, uuid, false)
	}
	// With no other share in use, another plugin process may have stopped
	// the daemon since this one last saw it running.
	fresh := m.guard != nil && !m.inUseLocked()
	waitFrom := time.Now()
	if err := m.waitReadyLocked(ctx, fresh, m.timing.ReadyWait, true); err != nil {
		for _, uuid := range added {
			m.dropLocked(claim, uuid)
		}
		m.restoreModesLocked(ctx, switched)
		m.wantUntil = time.Now().Add(m.timing.Linger)
		m.kickWorker()
		if errors.Is(err, errStillStarting) {
			// Not starting but hung, if a command timed out meanwhile:
			// say which, rather than "still starting".
			err = m.waitingOnLocked(waitFrom)
		}
		return false, &DaemonNotReadyError{Claim: claim, Cause: err}
	}
	for _, uuid := range cards {
		m.holders[uuid][claim] = true
	}
	// The share the daemon was kept for has arrived (or another did).
	m.wantUntil = time.Time{}
	if len(switched) > 0 {
		logger.V(2).Info("Cards switched to MPS", "claim", claim, "cards", switched)
	}
	return true, nil
}

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
	m.awaiting++
	var once sync.Once
	done = func() {
		once.Do(func() {
			m.mu.Lock()
			defer m.mu.Unlock()
			m.awaiting--
			// No longer wanted, perhaps: the worker decides.
			m.kickWorker()
		})
	}
	fresh := m.guard != nil && !m.inUseLocked()
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
	if m.ready && !fresh {
		// Running; let the worker check it in the background.
		m.verify = true
		m.kickWorker()
		return nil
	}
	after := m.ensureRounds
	ready := func() bool { return m.ready && (!fresh || m.readyRound > after) }
	m.verify = true
	m.kickWorker()
	since := m.attempts
	timer := time.NewTimer(wait)
	defer timer.Stop()
	for !ready() {
		if failFast && m.attempts > since && m.lastErr != nil {
			return m.lastErr
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
			if m.attempts > since && m.lastErr != nil {
				return m.lastErr
			}
			return errStillStarting
		}
	}
	return nil
}

var errStillStarting = errors.New("still starting")

func (m *Manager) holdLocked(claim, uuid string, inUse bool) {
	if m.holders[uuid] == nil {
		m.holders[uuid] = map[string]bool{}
	}
	m.holders[uuid][claim] = inUse
	if m.claims[claim] == nil {
		m.claims[claim] = map[string]bool{}
	}
	m.claims[claim][uuid] = true
}

func (m *Manager) dropLocked(claim, uuid string) {
	delete(m.holders[uuid], claim)
	if len(m.holders[uuid]) == 0 {
		delete(m.holders, uuid)
	}
	delete(m.claims[claim], uuid)
	if len(m.claims[claim]) == 0 {
		delete(m.claims, claim)
	}
}

// restoreModesLocked sets cards switched by a failed Acquire back to
// DEFAULT, unless another share arrived on them meanwhile.
func (m *Manager) restoreModesLocked(ctx context.Context, cards []string) {
	for _, uuid := range cards {
		if len(m.holders[uuid]) > 0 {
			continue
		}
		if err := m.computeMode.SetComputeMode(ctx, uuid, ComputeModeDefault); err != nil {
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
	m.shares[claim] = slices.Clone(shares)
	for _, uuid := range shareCards(shares) {
		if !m.shareable[uuid] {
			// Kept all the same: the share may be running.
			logger.Info("Warning: restoring a share on a card not published as shareable any more", "claim", claim, "card", uuid)
		}
		first := len(m.holders[uuid]) == 0
		m.holdLocked(claim, uuid, true)
		if !first {
			continue
		}
		if err := m.computeMode.SetComputeMode(ctx, uuid, ComputeModeExclusiveProcess); err != nil {
			logger.Error(err, "Restoring EXCLUSIVE_PROCESS of a card with shares failed; retrying in the background", "card", uuid)
			m.pendingModes[uuid] = true
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
		unlock, err := m.ns.lock(ctx, NamespaceName(claim))
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

// dropNamespace deletes the claim's namespace (if the daemon lists it) and
// its /dev/shm. A daemon that does not answer has no namespaces to delete:
// the worker's next sync removes what a restarted one still lists.
func (m *Manager) dropNamespace(ctx context.Context, claim string) error {
	m.mu.Lock()
	_, held := m.claims[claim]
	ready := m.ready
	m.mu.Unlock()
	if held && ready {
		have, err := m.v3.List(ctx)
		if err == nil {
			err = m.v3.Delete(ctx, NamespaceName(claim), have)
		}
		if err != nil {
			return err
		}
	}
	if err := os.RemoveAll(m.layout.NamespacePipeDir(m.v3.Server, claim)); err != nil {
		return fmt.Errorf("removing the pipe directory of MPS v3 namespace %s: %w", NamespaceName(claim), err)
	}
	return m.dirs.Remove(ctx, claim)
}

func (m *Manager) release(ctx context.Context, claim string) error {
	m.startWorker(ctx)
	m.mu.Lock()
	defer m.mu.Unlock()
	var errs []error
	dropped := len(m.claims[claim]) > 0
	for _, uuid := range slices.Sorted(maps.Keys(m.claims[claim])) {
		if len(m.holders[uuid]) == 1 {
			if err := m.computeMode.SetComputeMode(ctx, uuid, ComputeModeDefault); err != nil {
				errs = append(errs, fmt.Errorf("restoring compute mode of card %s: %w", uuid, err))
				continue
			}
			delete(m.pendingModes, uuid)
		}
		m.dropLocked(claim, uuid)
	}
	if len(m.claims[claim]) == 0 {
		delete(m.shares, claim)
	}
	if len(m.holders) == 0 {
		if m.timing.IdleGrace > 0 && dropped {
			// A share arriving soon finds the daemon ready.
			m.idleUntil = time.Now().Add(m.timing.IdleGrace)
		}
		m.kickWorker()
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("releasing MPS shares of claim %s: %w", claim, err)
	}
	return nil
}

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
	m.settled = true
	var errs []error
	if m.v3 != nil {
		// Sync again now that unowned namespaces may be deleted.
		m.verify = true
	}
	for _, uuid := range slices.Sorted(maps.Keys(m.shareable)) {
		if len(m.holders[uuid]) > 0 {
			continue
		}
		if err := m.computeMode.SetComputeMode(ctx, uuid, ComputeModeDefault); err != nil {
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
	m.ready, m.stopped = false, false
	m.kickWorker()
}

// Status is what the Manager knows about the daemon, for health output
// and metrics.
type Status struct {
	// Wanted: shares hold cards (or one was just refused for want of the
	// daemon); Ready: the daemon answered the worker's last check.
	Wanted, Ready bool
	// SharedCards is the number of cards holding shares.
	SharedCards int
	// Failures counts failed daemon operations and compute-mode restores
	// since start; LastError is the last one not yet followed by a
	// success, "" when none.
	Failures    int
	LastError   string
	LastErrorAt time.Time
	// PendingModes are cards with shares still waiting for their
	// EXCLUSIVE_PROCESS to be restored.
	PendingModes []string
	// ControlUnresponsiveSince is when a control command last got no
	// answer within ControlTimeout, zero once a later one was answered;
	// StuckCommand is that command. ControlTimeouts counts such commands
	// since start.
	ControlUnresponsiveSince time.Time
	StuckCommand             string
	ControlTimeout           time.Duration
	ControlTimeouts          int
	// IdleUntil is when the daemon, kept after the node's last share for
	// the idle grace, stops; zero while shares hold cards or none is kept.
	IdleUntil time.Time
}

// String is a one-line summary for health output; "" when the daemon is
// not wanted and nothing failed.
func (s Status) String() string {
	var parts []string
	if !s.ControlUnresponsiveSince.IsZero() {
		parts = append(parts, fmt.Sprintf("control daemon UNRESPONSIVE since %s (%q got no answer within %s; shares wait for it, whole cards are unaffected)",
			s.ControlUnresponsiveSince.UTC().Format(time.RFC3339), s.StuckCommand, s.ControlTimeout))
	}
	switch {
	case s.Wanted && s.Ready && s.SharedCards == 0 && !s.IdleUntil.IsZero():
		parts = append(parts, fmt.Sprintf("daemon ready, no share; kept until %s (idle grace)", s.IdleUntil.UTC().Format(time.RFC3339)))
	case s.Wanted && s.Ready:
		parts = append(parts, fmt.Sprintf("daemon ready for shares on %d cards", s.SharedCards))
	case s.Wanted && s.SharedCards > 0:
		parts = append(parts, fmt.Sprintf("daemon NOT READY, wanted for shares on %d cards (retrying)", s.SharedCards))
	case s.Wanted:
		parts = append(parts, "daemon NOT READY, wanted for a share the kubelet retries (retrying)")
	}
	if s.LastError != "" {
		parts = append(parts, fmt.Sprintf("last failure at %s: %s", s.LastErrorAt.UTC().Format(time.RFC3339), s.LastError))
	}
	if len(s.PendingModes) > 0 {
		parts = append(parts, fmt.Sprintf("EXCLUSIVE_PROCESS not yet restored on %s (retrying)", strings.Join(s.PendingModes, ", ")))
	}
	if len(parts) > 0 && s.Failures > 0 {
		parts = append(parts, fmt.Sprintf("%d failures since start", s.Failures))
	}
	return strings.Join(parts, "; ")
}

// Status returns the current status.
func (m *Manager) Status() Status {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := time.Now()
	st := Status{
		Wanted:                   m.wantedLocked(now),
		Ready:                    m.ready && m.unresponsiveSince.IsZero(),
		SharedCards:              len(m.holders),
		Failures:                 m.failures,
		PendingModes:             slices.Sorted(maps.Keys(m.pendingModes)),
		ControlUnresponsiveSince: m.unresponsiveSince,
		StuckCommand:             m.stuckCommand,
		ControlTimeout:           m.timing.ControlTimeout,
		ControlTimeouts:          m.controlTimeouts,
	}
	if len(m.holders) == 0 && now.Before(m.idleUntil) {
		st.IdleUntil = m.idleUntil
	}
	if m.lastErr != nil {
		st.LastError, st.LastErrorAt = m.lastErr.Error(), m.lastErrAt
	}
	return st
}

// WaitIdle waits until the worker has nothing left to do: the daemon runs
// if wanted and is stopped otherwise, no compute mode is pending, and no
// failure awaits a retry. For tests and orderly shutdown.
func (m *Manager) WaitIdle(ctx context.Context) error {
	for {
		m.mu.Lock()
		want := m.wantedLocked(time.Now())
		idle := !m.busy && !m.kicked && len(m.pendingModes) == 0 && m.lastErr == nil &&
			((want && m.ready) || (!want && (m.stopped || m.attempts == 0)))
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
	return len(m.holders) > 0 || m.awaiting > 0 || now.Before(m.wantUntil) || now.Before(m.idleUntil)
}

// keptUntilLocked is when the daemon stops being wanted without shares.
func (m *Manager) keptUntilLocked() time.Time {
	if m.idleUntil.After(m.wantUntil) {
		return m.idleUntil
	}
	return m.wantUntil
}

// inUseLocked reports whether some share is in use (not just waiting).
func (m *Manager) inUseLocked() bool {
	for _, claims := range m.holders {
		for _, inUse := range claims {
			if inUse {
				return true
			}
		}
	}
	return false
}

func (m *Manager) changedLocked() {
	close(m.changed)
	m.changed = make(chan struct{})
}

func (m *Manager) recordLocked(err error) {
	m.failures++
	m.lastErr, m.lastErrAt = err, time.Now()
	m.changedLocked()
}

// kickWorker asks the worker for a round. Call with m.mu held.
func (m *Manager) kickWorker() {
	m.kicked = true
	select {
	case m.kick <- struct{}{}:
	default:
	}
}

// startWorker starts the worker on first use, with the caller's logger.
func (m *Manager) startWorker(ctx context.Context) {
	m.startOnce.Do(func() {
		wctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
		m.cancel, m.done = cancel, make(chan struct{})
		go m.work(klog.NewContext(wctx, klog.FromContext(ctx).WithName("mps-worker")))
	})
}

// work brings the daemon to what the accounting wants, one operation at a
// time, so Ensure and Stop never overlap and nobody holds m.mu meanwhile.
// Failures are retried with exponential back-off.
func (m *Manager) work(ctx context.Context) {
	defer close(m.done)
	logger := klog.FromContext(ctx)
	backoff := m.timing.RetryMin
	// Nothing to do until asked: the caller that started the worker may
	// not have recorded its share yet, and an empty accounting would
	// read as "stop the daemon".
	select {
	case <-ctx.Done():
		return
	case <-m.kick:
	}
	for {
		m.mu.Lock()
		m.kicked = false
		now := time.Now()
		want := m.wantedLocked(now)
		act := ""
		switch {
		case want && (!m.ready || m.verify):
			act = "ensure"
		case !want && !m.stopped:
			act = "stop"
			// From now on a share must not count on the daemon.
			m.ready = false
		}
		m.verify = false
		round := m.ensureRounds
		if act == "ensure" {
			m.ensureRounds++
			round = m.ensureRounds
		}
		unused := m.settled && !m.inUseLocked()
		modes := slices.Sorted(maps.Keys(m.pendingModes))
		var lingerLeft time.Duration
		if !want || len(m.holders) > 0 {
			lingerLeft = 0
		} else {
			lingerLeft = m.keptUntilLocked().Sub(now)
		}
		m.busy = act != "" || len(modes) > 0
		m.mu.Unlock()

		var failed error
		for _, uuid := range modes {
			err := m.computeMode.SetComputeMode(ctx, uuid, ComputeModeExclusiveProcess)
			m.mu.Lock()
			if err != nil {
				m.recordLocked(fmt.Errorf("restoring compute mode of card %s: %w", uuid, err))
				failed = err
			} else {
				logger.Info("Restored EXCLUSIVE_PROCESS of a card with shares", "card", uuid)
				delete(m.pendingModes, uuid)
				m.changedLocked()
			}
			m.mu.Unlock()
		}
		switch act {
		case "ensure":
			ensure := m.daemon.Ensure
			if u, ok := m.daemon.(UnusedEnsurer); ok && unused {
				ensure = u.EnsureUnused
			}
			err := ensure(ctx)
			if err == nil && m.v3 != nil {
				err = m.syncNamespaces(ctx)
			}
			m.mu.Lock()
			m.attempts++
			if err != nil {
				m.ready = false
				m.recordLocked(err)
				failed = err
			} else {
				m.ready, m.stopped, m.lastErr = true, false, nil
				m.readyRound = round
				m.changedLocked()
			}
			m.mu.Unlock()
		case "stop":
			again, err := m.stop(ctx)
			if ctx.Err() != nil {
				return
			}
			if again {
				// Decide afresh: work was asked for meanwhile.
				m.mu.Lock()
				m.busy = false
				m.changedLocked()
				m.mu.Unlock()
				continue
			}
			m.mu.Lock()
			m.attempts++
			if err != nil {
				m.recordLocked(err)
				failed = err
			} else {
				m.ready, m.stopped, m.lastErr = false, true, nil
				m.changedLocked()
			}
			m.mu.Unlock()
		}
		if failed != nil {
			logger.Error(failed, "MPS daemon or compute mode operation failed; retrying", "operation", act, "retryIn", backoff)
		}

		m.mu.Lock()
		// Done with this round: idle unless more is due.
		m.busy = false
		m.changedLocked()
		m.mu.Unlock()
		var wait <-chan time.Time
		switch {
		case failed != nil:
			wait = time.After(backoff)
			backoff = min(2*backoff, m.timing.RetryMax)
		case act != "" || len(modes) > 0:
			// Look again at once: the wanted state may have changed.
			backoff = m.timing.RetryMin
			continue
		case lingerLeft > 0:
			wait = time.After(lingerLeft)
		}
		select {
		case <-ctx.Done():
			return
		case <-m.kick:
		case <-wait:
		}
	}
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
	guard := m.guard
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
	case <-m.kick:
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

// syncNamespaces creates the node's server if missing and makes its
// namespaces of ours those of the claims holding shares; before Reconcile
// (start-up replay still running) nothing is deleted. Each namespace is
// changed under its claim's lock, never all at once, and one that a call
// changed since the list was read is left as that call made it.
func (m *Manager) syncNamespaces(ctx context.Context) error {
	if err := m.v3.EnsureServer(ctx); err != nil {
		return err
	}
	if err := m.v3.CheckRunning(ctx); err != nil {
		return err
	}
	since := m.ns.mark()
	defer m.ns.forget(since)
	have, err := m.v3.List(ctx)
	if err != nil {
		return err
	}
	m.mu.Lock()
	settled := m.settled
	names := map[string]bool{}
	for claim := range m.claims {
		names[NamespaceName(claim)] = true
	}
	m.mu.Unlock()
	for name := range have {
		if settled && ownNamespace(name) {
			names[name] = true
		}
	}
	var errs []error
	for _, name := range slices.Sorted(maps.Keys(names)) {
		if err := m.syncNamespace(ctx, name, have, since, settled); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("syncing the MPS v3 namespaces with the prepared claims: %w", err)
	}
	return nil
}

// syncNamespace brings one namespace to what the accounting wants, under
// its claim's lock: it exists with its claim's limits while the claim
// holds shares, and (once settled) is deleted otherwise.
func (m *Manager) syncNamespace(ctx context.Context, name string, have map[string]NamespaceSpec, since uint64, settled bool) error {
	unlock, err := m.ns.lock(ctx, name)
	if err != nil {
		return err
	}
	defer unlock(false)
	if m.ns.touchedSince(name, since) {
		// A prepare or release changed it after the list was read.
		return nil
	}
	spec, wanted := m.wantedNamespace(name)
	switch {
	case wanted:
		return m.v3.Ensure(ctx, spec, have)
	case settled:
		if _, listed := have[name]; !listed {
			return nil
		}
		klog.FromContext(ctx).Info("Deleting MPS v3 namespace no prepared claim owns", "namespace", name)
		return m.v3.Delete(ctx, name, have)
	}
	return nil
}

// wantedNamespace is the namespace a claim holding shares wants under
// name; false when no such claim does.
func (m *Manager) wantedNamespace(name string) (NamespaceSpec, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for claim := range m.claims {
		if NamespaceName(claim) == name {
			return namespaceFor(claim, m.shares[claim]), true
		}
	}
	return NamespaceSpec{}, false
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

// Close stops the worker and supervision but leaves the daemon running for
// the shares still in use; the next plugin process adopts it.
func (m *Manager) Close() {
	m.startOnce.Do(func() {})
	if m.cancel != nil {
		m.cancel()
		<-m.done
	}
	m.daemon.Close()
}

// Holders returns, per card, the sorted claims holding a share on it.
func (m *Manager) Holders() map[string][]string {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := map[string][]string{}
	for uuid, claims := range m.holders {
		out[uuid] = slices.Sorted(maps.Keys(claims))
	}
	return out
}

func uniqueSorted(in []string) []string {
	out := append([]string(nil), in...)
	sort.Strings(out)
	return slices.Compact(out)
}

// PrivateShmWrapper returns the command prefix that starts the daemon in a
// private mount namespace whose /dev/shm is shmDir, the daemon's own (not
// the host's; shares' containers have their claim's). shmDir should be on a tmpfs
// (the default MPS root under /run is).
func PrivateShmWrapper(shmDir string) []string {
	return []string{"unshare", "--mount", "--propagation", "private", "--",
		"sh", "-c", `mount --bind "$0" /dev/shm && exec "$@"`, shmDir}
}
