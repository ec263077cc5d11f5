package mps

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"k8s.io/klog/v2"

	"github.com/tangram-gpu/tangram/pkg/plugin/mps/control"
)

// deadlineControl gives each of ctl's commands the Manager's deadline and
// returns by it even if ctl does not heed its context (its goroutine then
// ends when ctl does). A command that times out marks the control daemon
// unresponsive; one that succeeds marks it answering again.
func (m *Manager) deadlineControl(ctl control.Func) control.Func {
	return func(ctx context.Context, argv []string) (string, error) {
		command := strings.Join(argv, " ")
		start := time.Now()
		done := m.sending(command, start)
		defer done()
		callCtx, cancel := context.WithTimeout(ctx, m.timing.ControlTimeout)
		defer cancel()
		type answer struct {
			out string
			err error
		}
		got := make(chan answer, 1)
		go func() {
			out, err := ctl(callCtx, argv)
			got <- answer{out, err}
		}()
		var a answer
		select {
		case a = <-got:
			if callCtx.Err() == nil {
				if a.err == nil {
					m.controlAnswered(ctx)
				}
				return a.out, a.err
			}
		case <-callCtx.Done():
		}
		if errors.Is(context.Cause(ctx), context.Canceled) {
			// The caller gave up (shutdown); says nothing of the daemon.
			return "", fmt.Errorf("MPS control command %q: %w", command, context.Cause(ctx))
		}
		// The caller's own deadline may have come first.
		waited := min(time.Since(start), m.timing.ControlTimeout).Round(time.Millisecond)
		err := &control.TimeoutError{Command: command, Timeout: waited}
		m.controlTimedOut(ctx, err)
		return "", err
	}
}

// controlTimedOut records a command without answer: the daemon is not
// ready for shares until the worker sees it answer again.
func (m *Manager) controlTimedOut(ctx context.Context, err *control.TimeoutError) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.control.timeouts++
	if m.control.unresponsiveSince.IsZero() {
		m.control.unresponsiveSince = time.Now()
		klog.FromContext(ctx).Error(err, "The node's MPS control daemon is unresponsive; shares wait for it, whole cards are unaffected")
	}
	m.control.stuckCommand = err.Command
	m.control.lastTimeout, m.control.lastTimeoutAt = err, time.Now()
	m.sup.ready = false
	m.sup.verify = true
	m.kickWorker()
	m.changedLocked()
}

// controlAnswered clears the unresponsive mark after a command succeeded.
func (m *Manager) controlAnswered(ctx context.Context) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.control.unresponsiveSince.IsZero() {
		return
	}
	klog.FromContext(ctx).Info("The node's MPS control daemon answers again", "unresponsiveFor", time.Since(m.control.unresponsiveSince).Round(time.Millisecond))
	m.control.unresponsiveSince, m.control.stuckCommand = time.Time{}, ""
	m.changedLocked()
}

// sending records a command in flight until done is called, so that a
// share refused while waiting can name what the daemon has not answered.
func (m *Manager) sending(command string, at time.Time) (done func()) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.control.inFlightSeq++
	id := m.control.inFlightSeq
	if m.control.inFlight == nil {
		m.control.inFlight = map[int]inFlightCommand{}
	}
	m.control.inFlight[id] = inFlightCommand{command: command, since: at}
	return func() {
		m.mu.Lock()
		defer m.mu.Unlock()
		delete(m.control.inFlight, id)
	}
}

type inFlightCommand struct {
	command string
	since   time.Time
}

// waitingOn explains why a share waited in vain since from: the command
// that timed out meanwhile, or the oldest one still unanswered (timeout is
// the commands' deadline); nil when neither (the daemon is really
// starting). Call with the Manager's mu held.
func (c *controlWatch) waitingOn(from time.Time, timeout time.Duration) error {
	if c.lastTimeout != nil && !c.lastTimeoutAt.Before(from) {
		return c.lastTimeout
	}
	var oldest *inFlightCommand
	for _, cmd := range c.inFlight {
		if oldest == nil || cmd.since.Before(oldest.since) {
			oldest = &cmd
		}
	}
	if oldest == nil {
		return nil
	}
	return &ControlPendingError{Command: oldest.command, For: time.Since(oldest.since).Round(time.Millisecond), Timeout: timeout}
}

// ControlPendingError answers a share that waited while a control command
// was still unanswered, before its deadline.
type ControlPendingError struct {
	Command      string
	For, Timeout time.Duration
}

func (e *ControlPendingError) Error() string {
	return fmt.Sprintf("the node's MPS control daemon has not answered %q for %s (its deadline is %s)", e.Command, e.For, e.Timeout)
}
