package gpucheck

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"
)

// Result is how one check ended.
type Result string

const (
	Passed  Result = "passed"
	Failed  Result = "failed"
	Skipped Result = "skipped"
)

// Outcome is what a check found: its result and, for people, why.
type Outcome struct {
	Result Result `json:"result"`
	// Detail says what was compared or run and what came of it; for a
	// skip, the reason.
	Detail string `json:"detail"`
	// Noted marks a passed check whose detail records something to look
	// at (a figure to learn from, a value the plugin may get wrong) that
	// is not a failure; the report shows it as "PASS, note".
	Noted bool `json:"noted,omitempty"`
}

// Pass, Fail and Skip build outcomes.
func Pass(format string, args ...any) Outcome {
	return Outcome{Result: Passed, Detail: fmt.Sprintf(format, args...)}
}

func Fail(format string, args ...any) Outcome {
	return Outcome{Result: Failed, Detail: fmt.Sprintf(format, args...)}
}

// Note is a pass that asks to be read (Outcome.Noted).
func Note(format string, args ...any) Outcome {
	return Outcome{Result: Passed, Detail: fmt.Sprintf(format, args...), Noted: true}
}

func Skip(format string, args ...any) Outcome {
	return Outcome{Result: Skipped, Detail: fmt.Sprintf(format, args...)}
}

// Check is one named step with its own deadline.
type Check struct {
	Name    string
	Timeout time.Duration
	// Run does the check. It must return when ctx is done; a Run that does
	// not is abandoned at its deadline (and reported failed) so that the
	// other checks still run.
	Run func(ctx context.Context, progress Progress) Outcome
}

// Progress lets a running check say what it is doing, for an SRE watching
// the terminal.
type Progress func(format string, args ...any)

// Record is a finished check.
type Record struct {
	Name     string        `json:"name"`
	Outcome                // result and detail
	Duration time.Duration `json:"durationNanos"`
}

// Runner runs checks one after another.
type Runner struct {
	// Out receives the progress lines.
	Out io.Writer
	// Now is the clock (tests pass a fake); nil means time.Now.
	Now func() time.Time
	// Grace is how long a check whose deadline passed may take to return
	// before it is abandoned (default 5s).
	Grace time.Duration
}

// Run runs every check, in order, and returns their records. A check that
// fails, panics or overruns its deadline is recorded as failed; the next
// one runs regardless. ctx ending makes the remaining checks fail at once
// with the reason.
func (r Runner) Run(ctx context.Context, checks []Check) []Record {
	now := r.Now
	if now == nil {
		now = time.Now
	}
	grace := r.Grace
	if grace == 0 {
		grace = 5 * time.Second
	}
	records := make([]Record, 0, len(checks))
	for i, c := range checks {
		fmt.Fprintf(r.Out, "==> [%d/%d] %s (timeout %s)\n", i+1, len(checks), c.Name, c.Timeout)
		start := now()
		var out Outcome
		if err := ctx.Err(); err != nil {
			out = Fail("not run: the whole check was stopped (%v)", context.Cause(ctx))
		} else {
			out = r.runOne(ctx, c, grace)
		}
		rec := Record{Name: c.Name, Outcome: out, Duration: now().Sub(start)}
		mark := strings.ToUpper(string(out.Result))
		if out.Noted {
			mark += " (note)"
		}
		fmt.Fprintf(r.Out, "    %s %s (%s): %s\n", mark, c.Name, rec.Duration.Round(100*time.Millisecond), out.Detail)
		records = append(records, rec)
	}
	return records
}

func (r Runner) runOne(ctx context.Context, c Check, grace time.Duration) Outcome {
	timeout := c.Timeout
	if timeout <= 0 {
		timeout = time.Minute
	}
	overran := fmt.Errorf("ran past its %s deadline", timeout)
	ctx, cancel := context.WithTimeoutCause(ctx, timeout, overran)
	defer cancel()
	progress := func(format string, args ...any) {
		fmt.Fprintf(r.Out, "    ... "+format+"\n", args...)
	}
	done := make(chan Outcome, 1)
	go func() {
		defer func() {
			if p := recover(); p != nil {
				done <- Fail("the check panicked: %v", p)
			}
		}()
		done <- c.Run(ctx, progress)
	}()
	select {
	case out := <-done:
		if out.Result == "" {
			return Fail("the check returned no result (internal error)")
		}
		if context.Cause(ctx) == overran && out.Result != Failed {
			// Whatever it concluded, it ran past its deadline.
			return Fail("%v: %s", overran, out.Detail)
		}
		return out
	case <-ctx.Done():
	}
	select {
	case out := <-done:
		if context.Cause(ctx) != overran {
			return out
		}
		return Fail("%v: %s", overran, out.Detail)
	case <-time.After(grace):
		return Fail("%v and did not stop within %s; abandoned (%v)", overran, grace, context.Cause(ctx))
	}
}

// Counts tallies records by result.
type Counts struct{ Passed, Failed, Skipped int }

// Count tallies the records.
func Count(records []Record) Counts {
	var c Counts
	for _, r := range records {
		switch r.Result {
		case Passed:
			c.Passed++
		case Skipped:
			c.Skipped++
		default:
			c.Failed++
		}
	}
	return c
}

// Summary is the last line a run prints: "N passed, M failed, K skipped".
func (c Counts) Summary() string {
	return fmt.Sprintf("%d passed, %d failed, %d skipped", c.Passed, c.Failed, c.Skipped)
}
