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
//
// Below it: daemon runs the control daemon where it runs (a child
// process, a pod, or simulated) and keeps its directories; mpsv3 sends the
// v3 server and namespace commands; control runs the control binary as a
// client, behind the Runner interface that both the real binary
// (control.ExecCommander) and the strict stand-in (standin.Runner)
// implement; inpod is the daemon pod's entry point.
package mps

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/tangram-gpu/tangram/pkg/plugin/mps/control"
	"github.com/tangram-gpu/tangram/pkg/plugin/mps/daemon"
	"github.com/tangram-gpu/tangram/pkg/plugin/mps/mpsv3"
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
	layout      daemon.Layout
	daemon      daemon.Daemon
	computeMode daemon.ComputeModeSetter
	shareable   map[string]bool
	timing      Timing
	// v3 drives the node's MPS v3 server and namespaces; nil in classic
	// mode. dirs are the per-claim /dev/shm directories of v3 mode.
	v3   *mpsv3.Namespaces
	dirs daemon.ClaimDirs

	// ns serializes the namespace work of each claim (Acquire once the
	// claim is recorded, Release until it is dropped, the worker's sync of
	// that namespace), so a sync never deletes the namespace of a claim
	// being prepared nor recreates one being released. Taken before mu,
	// never while holding it; its waits end with the caller's context.
	ns nsLocks

	mu sync.Mutex
	// Under mu: the share accounting (shares.go), what the control
	// daemon answered (deadline.go) and the worker's supervision of the
	// daemon (worker.go).
	book    shareBook
	control controlWatch
	sup     supervision
	// changed is closed and replaced whenever the state above changes.
	changed chan struct{}

	loop workerLoop
}

// supervision is the worker's view of the daemon: whether it is wanted,
// ready or stopped, and how its operations went. The Manager's mu guards
// it.
type supervision struct {
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
	// readyAt is when an Ensure last succeeded.
	readyAt time.Time
	// ensureRounds counts the Ensure rounds the worker began; readyRound
	// is the one that made the daemon ready. A share that must not count
	// on what this process saw earlier waits for a round begun after it.
	ensureRounds, readyRound int
	// guard, when set, orders stops with the plugin processes' calls.
	guard StopGuard
	// verify asks the worker to Ensure again although ready (the daemon
	// may have gone; Ensure of a running daemon is cheap). recheck asks
	// the same of a routine check, after a share found the daemon ready:
	// the worker does it once Timing.Recheck has passed since readyAt.
	verify, recheck bool
	// ops is how the worker's daemon operations went.
	ops operations
	// busy: the worker is in a round; kicked: work was asked for since
	// the round began.
	busy, kicked bool
}

// controlWatch is what the Manager knows of the control daemon's answers
// (deadline.go). The Manager's mu guards it.
type controlWatch struct {
	// unresponsiveSince is when a control command last got no answer
	// within its deadline, zero once a later one was answered;
	// stuckCommand is that command. timeouts counts such commands.
	unresponsiveSince time.Time
	stuckCommand      string
	timeouts          int
	// lastTimeout is the last command without answer and when it timed
	// out, so that a share refused meanwhile can say which command hung
	// (the mark itself may be cleared by then).
	lastTimeout   *control.TimeoutError
	lastTimeoutAt time.Time
	// inFlight are the control commands sent and not yet answered.
	inFlight    map[int]inFlightCommand
	inFlightSeq int
}

// operations counts the worker's finished daemon operations (attempts)
// and the failed ones; lastErr is the last one's error (nil after a
// success), at lastErrAt.
type operations struct {
	attempts, failures int
	lastErr            error
	lastErrAt          time.Time
}

// workerLoop is the background worker's goroutine: kick asks it for a
// round, cancel and done end it (Close).
type workerLoop struct {
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
	// sends (default control.DefaultTimeout, 10s); a command that exceeds
	// it fails with a *control.TimeoutError naming it.
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
	// Recheck is how long a successful check of a ready daemon stands
	// (default 1s): a share that finds the daemon ready has the worker
	// check it again in the background once the last success is that
	// old, so a burst of shares gets one check after it rather than one
	// beside each prepare (a control command each on a GPU). The share
	// never waits for that check.
	Recheck time.Duration
}

func (t Timing) withDefaults() Timing {
	if t.ReadyWait == 0 {
		t.ReadyWait = time.Second
	}
	if t.StartWait == 0 {
		t.StartWait = 25 * time.Second
	}
	if t.ControlTimeout == 0 {
		t.ControlTimeout = control.DefaultTimeout
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
	if t.Recheck == 0 {
		t.Recheck = time.Second
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
func WithV3(v3 *mpsv3.Namespaces, dirs daemon.ClaimDirs) ManagerOption {
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
	var hung *control.TimeoutError
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
	m.sup.guard = g
}

// UnusedEnsurer is a Daemon that can be told that no share uses it, so it
// may replace a running daemon that differs from the one it would start
// instead of adopting it.
type UnusedEnsurer interface {
	EnsureUnused(ctx context.Context) error
}

// Settings are what the node's MPS is built from (New), the same whether
// the daemon runs in the plugin's process or in a pod of its own: only
// Daemon and, in v3 mode, V3Control differ with where it runs.
type Settings struct {
	Layout daemon.Layout
	// ShareableCards are the UUIDs of the cards published as shareable.
	ShareableCards []string
	// Daemon starts, adopts and stops the node's daemon where it runs.
	Daemon       daemon.Daemon
	ComputeModes daemon.ComputeModeSetter
	// V3Control, when set, enforces shares with MPS v3: a namespace per
	// claim on the node's server, sent through it, and ClaimDirs' /dev/shm
	// per claim. nil: classic MPS.
	V3Control control.Func
	ClaimDirs daemon.ClaimDirs
	// Timing bounds the waits; zero fields take the defaults.
	Timing Timing
}

// New builds the node's MPS from s: the one constructor the plugin uses,
// whichever place the daemon runs in.
func New(s Settings) *Manager {
	opts := []ManagerOption{WithTiming(s.Timing)}
	if s.V3Control != nil {
		namespaces := mpsv3.NewNamespaces(s.V3Control, s.ShareableCards)
		// A namespace's pipe directory as the daemon reports it is
		// checked against the one containers mount.
		namespaces.PipeDir = s.ClaimDirs.Layout.PipeDir()
		opts = append(opts, WithV3(namespaces, s.ClaimDirs))
	}
	return NewManager(s.Layout, s.Daemon, s.ComputeModes, s.ShareableCards, opts...)
}

// NewManager returns a manager for the given shareable cards (UUIDs).
func NewManager(layout daemon.Layout, d daemon.Daemon, computeMode daemon.ComputeModeSetter, shareableCards []string, opts ...ManagerOption) *Manager {
	m := &Manager{
		layout:      layout,
		daemon:      d,
		computeMode: computeMode,
		shareable:   map[string]bool{},
		book: shareBook{
			holders:      map[string]map[string]bool{},
			claims:       map[string]map[string]bool{},
			shares:       map[string][]Share{},
			pendingModes: map[string]bool{},
		},
		changed: make(chan struct{}),
		loop:    workerLoop{kick: make(chan struct{}, 1)},
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
		m.v3 = m.v3.WrapControl(m.deadlineControl)
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
		pipe := NamespacePipeDir(m.layout, m.v3.Server, claimUID)
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

// Close stops the worker and supervision but leaves the daemon running for
// the shares still in use; the next plugin process adopts it.
func (m *Manager) Close() {
	m.loop.startOnce.Do(func() {})
	if m.loop.cancel != nil {
		m.loop.cancel()
		<-m.loop.done
	}
	m.daemon.Close()
}

// Holders returns, per card, the sorted claims holding a share on it.
func (m *Manager) Holders() map[string][]string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.book.holdersByCard()
}

func uniqueSorted(in []string) []string {
	out := append([]string(nil), in...)
	sort.Strings(out)
	return slices.Compact(out)
}
