package mps

// What the Manager reports, for health output and metrics.

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"
)

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
		Ready:                    m.sup.ready && m.control.unresponsiveSince.IsZero(),
		SharedCards:              len(m.book.holders),
		Failures:                 m.sup.ops.failures,
		PendingModes:             slices.Sorted(maps.Keys(m.book.pendingModes)),
		ControlUnresponsiveSince: m.control.unresponsiveSince,
		StuckCommand:             m.control.stuckCommand,
		ControlTimeout:           m.timing.ControlTimeout,
		ControlTimeouts:          m.control.timeouts,
	}
	if len(m.book.holders) == 0 && now.Before(m.sup.idleUntil) {
		st.IdleUntil = m.sup.idleUntil
	}
	if m.sup.ops.lastErr != nil {
		st.LastError, st.LastErrorAt = m.sup.ops.lastErr.Error(), m.sup.ops.lastErrAt
	}
	return st
}
