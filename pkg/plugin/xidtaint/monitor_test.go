package xidtaint

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/klog/v2/ktesting"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/tangram-gpu/tangram/pkg/gpu"
)

var testCards = []gpu.GPU{{Index: 0, UUID: "GPU-0"}, {Index: 1, UUID: "GPU-1"}}

func newTestMonitor(t *testing.T, recoverAfter time.Duration) (*Monitor, *testingclock.FakeClock) {
	t.Helper()
	clk := testingclock.NewFakeClock(time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC))
	m, err := NewMonitor(Config{Cards: testCards, Policy: DefaultPolicy(), RecoverAfter: recoverAfter, Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	return m, clk
}

// taintsOf returns "key=value:effect" of a device's taints.
func taintsOf(m *Monitor, device string) []string {
	var out []string
	for _, d := range m.Devices() {
		if d.Device == device {
			for _, t := range d.Taints {
				out = append(out, t.Key+"="+t.Value+":"+string(t.Effect))
			}
		}
	}
	return out
}

func healthy(m *Monitor, device string) bool {
	for _, d := range m.Devices() {
		if d.Device == device {
			return d.Healthy
		}
	}
	panic("no device " + device)
}

func xid(index int, x uint64) gpu.HealthEvent {
	return gpu.HealthEvent{Index: index, Kind: gpu.HealthEventXID, XID: x}
}

func TestMonitorHandle(t *testing.T) {
	type step struct {
		event       gpu.HealthEvent
		wantChanges int
		wantTaints  []string
		wantHealthy bool
	}
	tests := []struct {
		name  string
		steps []step
	}{
		{"fatal XID taints NoSchedule, recovery clears", []step{
			{xid(1, 79), 1, []string{"gpu.tangram.dev/xid=79:NoSchedule"}, false},
			{gpu.HealthEvent{Index: 1, Kind: gpu.HealthEventRecovered}, 1, nil, true},
		}},
		{"informational XID is a None taint and the card stays healthy", []step{
			{xid(1, 13), 1, []string{"gpu.tangram.dev/xid=13:None"}, true},
		}},
		{"a fatal XID replaces an informational one", []step{
			{xid(1, 13), 1, []string{"gpu.tangram.dev/xid=13:None"}, true},
			{xid(1, 79), 1, []string{"gpu.tangram.dev/xid=79:NoSchedule"}, false},
		}},
		{"an informational XID does not replace a fatal one", []step{
			{xid(1, 79), 1, []string{"gpu.tangram.dev/xid=79:NoSchedule"}, false},
			{xid(1, 13), 0, []string{"gpu.tangram.dev/xid=79:NoSchedule"}, false},
		}},
		{"the same XID again changes nothing", []step{
			{xid(1, 79), 1, []string{"gpu.tangram.dev/xid=79:NoSchedule"}, false},
			{xid(1, 79), 0, []string{"gpu.tangram.dev/xid=79:NoSchedule"}, false},
		}},
		{"a newer fatal XID replaces the value", []step{
			{xid(1, 79), 1, []string{"gpu.tangram.dev/xid=79:NoSchedule"}, false},
			{xid(1, 48), 1, []string{"gpu.tangram.dev/xid=48:NoSchedule"}, false},
		}},
		{"GPU lost and an XID are two taints", []step{
			{xid(1, 79), 1, []string{"gpu.tangram.dev/xid=79:NoSchedule"}, false},
			{gpu.HealthEvent{Index: 1, Kind: gpu.HealthEventGPULost}, 1,
				[]string{"gpu.tangram.dev/gpu-lost=true:NoSchedule", "gpu.tangram.dev/xid=79:NoSchedule"}, false},
			{gpu.HealthEvent{Index: 1, Kind: gpu.HealthEventRecovered}, 2, nil, true},
		}},
		{"events for unknown cards are ignored", []step{
			{xid(7, 79), 0, nil, true},
		}},
		{"recovery of a healthy card changes nothing", []step{
			{gpu.HealthEvent{Index: 1, Kind: gpu.HealthEventRecovered}, 0, nil, true},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			m, _ := newTestMonitor(t, time.Minute)
			for i, s := range tt.steps {
				changed := m.Changed()
				changes := m.Handle(ctx, s.event)
				if len(changes) != s.wantChanges {
					t.Errorf("step %d: %d changes %+v, want %d", i, len(changes), changes, s.wantChanges)
				}
				select {
				case <-changed:
					if s.wantChanges == 0 {
						t.Errorf("step %d: Changed fired without a change", i)
					}
				default:
					if s.wantChanges > 0 {
						t.Errorf("step %d: Changed did not fire", i)
					}
				}
				if got := taintsOf(m, "gpu-1"); strings.Join(got, ",") != strings.Join(s.wantTaints, ",") {
					t.Errorf("step %d: gpu-1 taints = %v, want %v", i, got, s.wantTaints)
				}
				if got := healthy(m, "gpu-1"); got != s.wantHealthy {
					t.Errorf("step %d: gpu-1 healthy = %v, want %v", i, got, s.wantHealthy)
				}
				if got := taintsOf(m, "gpu-0"); got != nil {
					t.Errorf("step %d: gpu-0 got taints %v from another card's events", i, got)
				}
			}
		})
	}
}

func TestMonitorRecoveryTiming(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	m, clk := newTestMonitor(t, 10*time.Minute)
	m.Handle(ctx, xid(1, 79))
	m.Handle(ctx, gpu.HealthEvent{Index: 0, Kind: gpu.HealthEventGPULost})

	clk.Step(9 * time.Minute)
	if changes := m.Expire(ctx); len(changes) != 0 {
		t.Fatalf("expired after 9m of 10m: %+v", changes)
	}
	// A new XID restarts the quiet time.
	m.Handle(ctx, xid(1, 79))
	clk.Step(9 * time.Minute)
	if changes := m.Expire(ctx); len(changes) != 0 {
		t.Fatalf("expired 9m after a repeated XID: %+v", changes)
	}
	clk.Step(time.Minute)
	changes := m.Expire(ctx)
	if len(changes) != 1 || changes[0].Device != "gpu-1" || changes[0].Added || changes[0].Taint.Key != TaintKeyXID {
		t.Fatalf("after 10m quiet: changes %+v, want gpu-1's XID taint removed", changes)
	}
	if got := taintsOf(m, "gpu-1"); got != nil {
		t.Errorf("gpu-1 taints after recovery = %v", got)
	}
	// A lost card does not recover by waiting.
	clk.Step(time.Hour)
	m.Expire(ctx)
	if got := taintsOf(m, "gpu-0"); len(got) != 1 {
		t.Errorf("gpu-0 (lost) taints after an hour = %v, want the gpu-lost taint", got)
	}
}

func TestMonitorNoRecoveryByTime(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	m, clk := newTestMonitor(t, 0)
	m.Handle(ctx, xid(1, 79))
	clk.Step(24 * time.Hour)
	if changes := m.Expire(ctx); len(changes) != 0 {
		t.Errorf("RecoverAfter 0 expired taints: %+v", changes)
	}
}

func TestMonitorTaintTimeAndMessage(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	m, clk := newTestMonitor(t, 10*time.Minute)
	clk.Step(1500 * time.Millisecond)
	m.Handle(ctx, xid(1, 79))
	d := m.Devices()[1]
	if len(d.Taints) != 1 || d.Taints[0].TimeAdded == nil {
		t.Fatalf("taints = %+v", d.Taints)
	}
	// Whole seconds, as the API stores them: republishing is then a no-op.
	if got, want := d.Taints[0].TimeAdded.Time, clk.Now().Truncate(time.Second); !got.Equal(want) {
		t.Errorf("TimeAdded = %v, want %v", got, want)
	}
	if !strings.Contains(d.Message, "XID 79 (NoSchedule)") || !strings.Contains(d.Message, "cleared after 10m0s without a new XID") {
		t.Errorf("message = %q", d.Message)
	}
	if d.Taints[0].Effect != resourceapi.DeviceTaintEffectNoSchedule {
		t.Errorf("effect = %s", d.Taints[0].Effect)
	}
}

// chanWatcher hands out events from a channel; fail makes the watch fail.
type chanWatcher struct {
	events chan gpu.HealthEvent
	mu     sync.Mutex
	fail   error
	starts int
}

func (w *chanWatcher) WatchHealth(ctx context.Context, out chan<- gpu.HealthEvent) error {
	w.mu.Lock()
	w.starts++
	fail := w.fail
	w.mu.Unlock()
	if fail != nil {
		return fail
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case ev := <-w.events:
			out <- ev
		}
	}
}

func TestMonitorRun(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	m, clk := newTestMonitor(t, 10*time.Minute)
	w := &chanWatcher{events: make(chan gpu.HealthEvent)}
	changes := make(chan []Change, 10)
	done := make(chan struct{})
	go func() {
		defer close(done)
		m.Run(ctx, w, func(c []Change) { changes <- c })
	}()
	w.events <- xid(1, 79)
	if c := <-changes; len(c) != 1 || !c[0].Added {
		t.Fatalf("changes = %+v, want one added taint", c)
	}
	// Wait until Run armed its recovery timer, then let the quiet time pass.
	waitFor(t, clk.HasWaiters)
	clk.Step(10 * time.Minute)
	if c := <-changes; len(c) != 1 || c[0].Added {
		t.Fatalf("changes = %+v, want one removed taint", c)
	}
	cancel()
	<-done
}

func TestMonitorRunWatchFailureIsUnknown(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	m, clk := newTestMonitor(t, 10*time.Minute)
	w := &chanWatcher{events: make(chan gpu.HealthEvent), fail: errors.New("NVML event set: not supported")}
	changed := m.Changed()
	done := make(chan struct{})
	go func() {
		defer close(done)
		m.Run(ctx, w, nil)
	}()
	<-changed
	d := m.Devices()[0]
	if d.Known || !strings.Contains(d.Message, "not supported") {
		t.Fatalf("after a failed watch: %+v, want unknown health naming the error", d)
	}
	// The watch is retried and health becomes known again.
	w.mu.Lock()
	w.fail = nil
	w.mu.Unlock()
	changed = m.Changed()
	waitFor(t, clk.HasWaiters)
	clk.Step(retryWatchAfter)
	<-changed
	if d := m.Devices()[0]; !d.Known {
		t.Errorf("after the retry: %+v, want known health", d)
	}
	cancel()
	<-done
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("timed out waiting")
		}
		time.Sleep(time.Millisecond)
	}
}
