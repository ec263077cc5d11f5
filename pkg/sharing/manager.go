// Package sharing enforces memory and compute shares of a GPU with NVIDIA MPS.
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
// the daemon is stopped. Whole-card claims never come here.
package sharing

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"sync"

	"k8s.io/klog/v2"
)

// Mount is a host directory a share's container must see.
type Mount struct {
	HostPath      string
	ContainerPath string
}

// ClientConfig is what a share's container needs to reach the daemon.
type ClientConfig struct {
	// PipeDir is the daemon's pipe directory, CUDA_MPS_PIPE_DIRECTORY in
	// the container, where it is mounted at the same path.
	PipeDir string
	// Mounts holds the pipe directory and the daemon's /dev/shm.
	Mounts []Mount
}

// Manager accounts shares per card and drives the daemon and compute modes.
// It is safe for concurrent use.
type Manager struct {
	layout      Layout
	daemon      Daemon
	computeMode ComputeModeSetter
	shareable   map[string]bool

	mu sync.Mutex
	// holders maps a card UUID to the claims holding a share on it.
	holders map[string]map[string]bool
	// claims maps a claim UID to the cards it holds shares on.
	claims map[string]map[string]bool
	// settled is set by Reconcile, once the checkpoint's shares are
	// re-acquired: from then on no holder means no share uses the daemon.
	// Before, the first re-acquired share has no holder yet while the
	// others already run.
	settled bool
}

// UnusedEnsurer is a Daemon that can be told that no share uses it, so it
// may replace a running daemon that differs from the one it would start
// instead of adopting it.
type UnusedEnsurer interface {
	EnsureUnused(ctx context.Context) error
}

// NewManager returns a manager for the given shareable cards (UUIDs).
func NewManager(layout Layout, daemon Daemon, computeMode ComputeModeSetter, shareableCards []string) *Manager {
	m := &Manager{
		layout:      layout,
		daemon:      daemon,
		computeMode: computeMode,
		shareable:   map[string]bool{},
		holders:     map[string]map[string]bool{},
		claims:      map[string]map[string]bool{},
	}
	for _, uuid := range shareableCards {
		m.shareable[uuid] = true
	}
	return m
}

// ClientConfig returns the pipe directory and mounts of every share's
// container; they are the same for all cards because the daemon is shared.
func (m *Manager) ClientConfig() ClientConfig {
	return ClientConfig{
		PipeDir: m.layout.PipeDir(),
		Mounts: []Mount{
			{HostPath: m.layout.PipeDir(), ContainerPath: m.layout.PipeDir()},
			{HostPath: m.layout.ShmDir(), ContainerPath: "/dev/shm"},
		},
	}
}

// Acquire records that claim holds shares on cards and, for cards that had
// no share yet, sets EXCLUSIVE_PROCESS; it makes sure the daemon runs.
// Acquiring again for the same claim and cards changes nothing. On error
// nothing is recorded and compute modes it changed are restored.
func (m *Manager) Acquire(ctx context.Context, claim string, cards []string) error {
	logger := klog.FromContext(ctx)
	m.mu.Lock()
	defer m.mu.Unlock()
	cards = uniqueSorted(cards)
	for _, uuid := range cards {
		if !m.shareable[uuid] {
			return fmt.Errorf("share of claim %s on card %s: %w; only cards published as shareable can hold shares", claim, uuid, errNotShareable)
		}
	}
	var switched []string
	undo := func() {
		for _, uuid := range switched {
			if err := m.computeMode.SetComputeMode(ctx, uuid, ComputeModeDefault); err != nil {
				logger.Error(err, "Restoring compute mode after a failed share", "card", uuid)
			}
		}
	}
	for _, uuid := range cards {
		if len(m.holders[uuid]) > 0 {
			continue
		}
		if err := m.computeMode.SetComputeMode(ctx, uuid, ComputeModeExclusiveProcess); err != nil {
			undo()
			return fmt.Errorf("preparing card %s for MPS shares: %w", uuid, err)
		}
		switched = append(switched, uuid)
	}
	if len(cards) > 0 {
		ensure := m.daemon.Ensure
		if u, ok := m.daemon.(UnusedEnsurer); ok && m.settled && len(m.holders) == 0 {
			ensure = u.EnsureUnused
		}
		if err := ensure(ctx); err != nil {
			undo()
			return fmt.Errorf("starting the node's MPS daemon for claim %s: %w", claim, err)
		}
	}
	for _, uuid := range cards {
		if m.holders[uuid] == nil {
			m.holders[uuid] = map[string]bool{}
		}
		m.holders[uuid][claim] = true
		if m.claims[claim] == nil {
			m.claims[claim] = map[string]bool{}
		}
		m.claims[claim][uuid] = true
	}
	if len(switched) > 0 {
		logger.V(2).Info("Cards switched to MPS", "claim", claim, "cards", switched)
	}
	return nil
}

// Release drops every share of claim. A card left without shares goes back
// to DEFAULT; with no share left on the node the daemon is stopped. A card
// whose compute mode cannot be restored stays recorded for the claim, so a
// retried Release tries again. Releasing an unknown claim succeeds (and
// still stops an idle daemon).
func (m *Manager) Release(ctx context.Context, claim string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	var errs []error
	for _, uuid := range slices.Sorted(maps.Keys(m.claims[claim])) {
		if len(m.holders[uuid]) == 1 {
			if err := m.computeMode.SetComputeMode(ctx, uuid, ComputeModeDefault); err != nil {
				errs = append(errs, fmt.Errorf("restoring compute mode of card %s: %w", uuid, err))
				continue
			}
		}
		delete(m.holders[uuid], claim)
		if len(m.holders[uuid]) == 0 {
			delete(m.holders, uuid)
		}
		delete(m.claims[claim], uuid)
	}
	if len(m.claims[claim]) == 0 {
		delete(m.claims, claim)
	}
	if len(m.holders) == 0 {
		if err := m.daemon.Stop(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("releasing MPS shares of claim %s: %w", claim, err)
	}
	return nil
}

// Reconcile is called at start-up, after the checkpoint's shares have been
// re-acquired: every shareable card without a share goes back to DEFAULT
// (a previous process may have died between switching a card and recording
// the share) and a daemon left running for shares that are gone is stopped.
func (m *Manager) Reconcile(ctx context.Context) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.settled = true
	var errs []error
	for _, uuid := range slices.Sorted(maps.Keys(m.shareable)) {
		if len(m.holders[uuid]) > 0 {
			continue
		}
		if err := m.computeMode.SetComputeMode(ctx, uuid, ComputeModeDefault); err != nil {
			errs = append(errs, fmt.Errorf("restoring compute mode of idle card %s: %w", uuid, err))
		}
	}
	if len(m.holders) == 0 {
		if err := m.daemon.Stop(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
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

// Close stops supervising the daemon but leaves it running for the shares
// still in use; the next plugin process adopts it.
func (m *Manager) Close() { m.daemon.Close() }

func uniqueSorted(in []string) []string {
	out := append([]string(nil), in...)
	sort.Strings(out)
	return slices.Compact(out)
}

// PrivateShmWrapper returns the command prefix that starts the daemon in a
// private mount namespace whose /dev/shm is shmDir, the directory every
// share's container mounts as its /dev/shm. shmDir should be on a tmpfs
// (the default MPS root under /run is).
func PrivateShmWrapper(shmDir string) []string {
	return []string{"unshare", "--mount", "--propagation", "private", "--",
		"sh", "-c", `mount --bind "$0" /dev/shm && exec "$@"`, shmDir}
}
