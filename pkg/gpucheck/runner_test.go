package gpucheck

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"
)

func TestRunnerRecordsEveryCheck(t *testing.T) {
	for _, tc := range []struct {
		name       string
		check      Check
		want       Result
		wantDetail string
	}{
		{name: "pass", check: Check{Run: func(context.Context, Progress) Outcome { return Pass("ok %d", 1) }}, want: Passed, wantDetail: "ok 1"},
		{name: "fail", check: Check{Run: func(context.Context, Progress) Outcome { return Fail("broken") }}, want: Failed, wantDetail: "broken"},
		{name: "skip", check: Check{Run: func(context.Context, Progress) Outcome { return Skip("no dmem") }}, want: Skipped, wantDetail: "no dmem"},
		{name: "panic is a failure", check: Check{Run: func(context.Context, Progress) Outcome { panic("boom") }}, want: Failed, wantDetail: "panicked: boom"},
		{name: "no result is a failure", check: Check{Run: func(context.Context, Progress) Outcome { return Outcome{} }}, want: Failed, wantDetail: "no result"},
		{name: "overrun that stops", check: Check{Timeout: 10 * time.Millisecond, Run: func(ctx context.Context, _ Progress) Outcome {
			<-ctx.Done()
			return Pass("finished anyway")
		}}, want: Failed, wantDetail: "ran past its 10ms deadline"},
		{name: "overrun that never stops is abandoned", check: Check{Timeout: 10 * time.Millisecond, Run: func(context.Context, Progress) Outcome {
			time.Sleep(time.Second)
			return Pass("late")
		}}, want: Failed, wantDetail: "abandoned"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out bytes.Buffer
			tc.check.Name = tc.name
			after := Check{Name: "after", Run: func(_ context.Context, p Progress) Outcome { p("step %s", "one"); return Pass("ran") }}
			recs := Runner{Out: &out, Grace: 20 * time.Millisecond}.Run(context.Background(), []Check{tc.check, after})
			if len(recs) != 2 {
				t.Fatalf("got %d records, want 2", len(recs))
			}
			if recs[0].Result != tc.want || !strings.Contains(recs[0].Detail, tc.wantDetail) {
				t.Errorf("record %+v, want %s with %q", recs[0], tc.want, tc.wantDetail)
			}
			if recs[1].Result != Passed {
				t.Errorf("the next check did not run: %+v", recs[1])
			}
			for _, want := range []string{"==> [1/2] " + tc.name, "==> [2/2] after", "    ... step one", "PASSED after"} {
				if !strings.Contains(out.String(), want) {
					t.Errorf("progress lacks %q:\n%s", want, out.String())
				}
			}
		})
	}
}

func TestRunnerStoppedRunFailsTheRest(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	first := Check{Name: "first", Run: func(context.Context, Progress) Outcome { cancel(); return Pass("done") }}
	second := Check{Name: "second", Run: func(context.Context, Progress) Outcome { t.Error("ran after the stop"); return Pass("") }}
	recs := Runner{Out: &bytes.Buffer{}}.Run(ctx, []Check{first, second})
	if recs[0].Result != Passed || recs[1].Result != Failed || !strings.Contains(recs[1].Detail, "not run") {
		t.Errorf("records %+v", recs)
	}
}

func TestSummary(t *testing.T) {
	for _, tc := range []struct {
		results []Result
		want    string
	}{
		{nil, "0 passed, 0 failed, 0 skipped"},
		{[]Result{Passed, Passed, Skipped}, "2 passed, 0 failed, 1 skipped"},
		{[]Result{Failed, Passed, Skipped, Skipped, "odd"}, "1 passed, 2 failed, 2 skipped"},
	} {
		var recs []Record
		for _, r := range tc.results {
			recs = append(recs, Record{Outcome: Outcome{Result: r}})
		}
		if got := Count(recs).Summary(); got != tc.want {
			t.Errorf("%v: %q, want %q", tc.results, got, tc.want)
		}
	}
}
