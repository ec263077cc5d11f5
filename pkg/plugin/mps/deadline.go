package mps

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"k8s.io/klog/v2"
)

// ControlTimeoutError answers a control command that got no answer within
// its deadline (Timing.ControlTimeout): the control daemon is hung or
// overloaded. The Manager marks it unresponsive until a later command is
// answered.
type ControlTimeoutError struct {
	Command string
	Timeout time.Duration
}

func (e *ControlTimeoutError) Error() string {
	return fmt.Sprintf("the node's MPS control daemon did not answer %q within %s", e.Command, e.Timeout)
}

// deadlineControl gives each of ctl's commands the Manager's deadline and
// returns by it even if ctl does not heed its context (its goroutine then
// ends when ctl does). A command that times out marks the control daemon
// unresponsive; one that succeeds marks it answering again.
func (m *Manager) deadlineControl(ctl ControlFunc) ControlFunc {
	return func(ctx context.Context, argv []string) (string, error) {
		command := strings.Join(argv, " ")
		start := time.Now()
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
		err := &ControlTimeoutError{Command: command, Timeout: waited}
		m.controlTimedOut(ctx, err)
		return "", err
	}
}

// controlTimedOut records a command without answer: the daemon is not
// ready for shares until the worker sees it answer again.
func (m *Manager) controlTimedOut(ctx context.Context, err *ControlTimeoutError) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.controlTimeouts++
	if m.unresponsiveSince.IsZero() {
		m.unresponsiveSince = time.Now()
		klog.FromContext(ctx).Error(err, "The node's MPS control daemon is unresponsive; shares wait for it, whole cards are unaffected")
	}
	m.stuckCommand = err.Command
	m.ready = false
	m.verify = true
	m.kickWorker()
	m.changedLocked()
}

// controlAnswered clears the unresponsive mark after a command succeeded.
func (m *Manager) controlAnswered(ctx context.Context) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.unresponsiveSince.IsZero() {
		return
	}
	klog.FromContext(ctx).Info("The node's MPS control daemon answers again", "unresponsiveFor", time.Since(m.unresponsiveSince).Round(time.Millisecond))
	m.unresponsiveSince, m.stuckCommand = time.Time{}, ""
	m.changedLocked()
}
