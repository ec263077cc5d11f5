package plugin

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/tangram-gpu/tangram/pkg/plugin/liveness"
	"github.com/tangram-gpu/tangram/pkg/plugin/mps"
	"github.com/tangram-gpu/tangram/pkg/plugin/mps/daemon"
	"github.com/tangram-gpu/tangram/pkg/plugin/mps/mpstest"
)

// gatedDaemon is the simulated daemon made slow or failing: while a gate is
// set, Ensure (or Stop) blocks until the gate is closed; while ensureErr is
// set, Ensure fails.
type gatedDaemon struct {
	*daemon.SimulatedDaemon
	mu                  sync.Mutex
	ensureGate          chan struct{}
	stopGate            chan struct{}
	ensureErr           error
	ensureCalls, stops  int
	stopsWhileWanted    int
	ensureCallsAtSignal chan struct{}
}

func (g *gatedDaemon) Ensure(ctx context.Context) error {
	g.mu.Lock()
	g.ensureCalls++
	gate, err := g.ensureGate, g.ensureErr
	g.mu.Unlock()
	if gate != nil {
		select {
		case <-gate:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	if err != nil {
		return err
	}
	return g.SimulatedDaemon.Ensure(ctx)
}

func (g *gatedDaemon) Stop(ctx context.Context) error {
	g.mu.Lock()
	g.stops++
	gate := g.stopGate
	g.mu.Unlock()
	if gate != nil {
		select {
		case <-gate:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return g.SimulatedDaemon.Stop(ctx)
}

func (g *gatedDaemon) set(f func(g *gatedDaemon)) {
	g.mu.Lock()
	defer g.mu.Unlock()
	f(g)
}

func (g *gatedDaemon) counts() (ensures, stops int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.ensureCalls, g.stops
}

// newGatedHarness is a harness whose daemon is a gatedDaemon and whose
// Manager waits briefly and retries quickly.
func newGatedHarness(t *testing.T) (*harness, *gatedDaemon) {
	gated := &gatedDaemon{}
	h := newHarness(t)
	h.wrapDaemon = func(sim *daemon.SimulatedDaemon) daemon.Daemon {
		gated.SimulatedDaemon = sim
		return gated
	}
	h.timing = mps.Timing{ReadyWait: 20 * time.Millisecond, StartWait: 20 * time.Millisecond, RetryMin: 5 * time.Millisecond, RetryMax: 20 * time.Millisecond, Linger: time.Minute}
	h.restart()
	return h, gated
}

const noWaitLimit = 20 * time.Second

// prepareLikeKubelet prepares one claim and, as the kubelet does, retries
// while the answer is that the MPS daemon is still starting: the gated
// harness waits only 20ms for it, which a loaded machine can exceed.
func (h *harness) prepareLikeKubelet(claim *resourceapi.ResourceClaim) error {
	h.t.Helper()
	deadline := time.Now().Add(noWaitLimit)
	for {
		err := h.prepare(claim)[claim.UID].Err
		var notReady *mps.DaemonNotReadyError
		if err == nil || !errors.As(err, &notReady) || time.Now().After(deadline) {
			return err
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Start-up replays a share whose daemon cannot be reached: the claim's
// accounting must stay, its card must stay EXCLUSIVE_PROCESS and the daemon
// must not be stopped (running containers use it); the daemon is retried
// with back-off and the failure shows in the status; once the daemon is
// back everything is normal, and the last unprepare stops it.
func TestStartupReplayKeepsWhatRunningSharesUse(t *testing.T) {
	h, gated := newGatedHarness(t)
	claim := claimWith("s1", shareResult("gpu", "gpu-0", "share-1", "10Gi", ""))
	if err := h.prepareLikeKubelet(claim); err != nil {
		t.Fatal(err)
	}
	h.assertConsistent()

	gated.set(func(g *gatedDaemon) { g.ensureErr = errors.New("the API server is unreachable") })
	_, stopsBefore := gated.counts()
	h.restart()
	if got := h.modes.Mode("GPU-0"); got != daemon.ComputeModeExclusiveProcess {
		t.Errorf("card of a running share reset to %s at start-up", got)
	}
	if got := h.shares.Holders()["GPU-0"]; len(got) != 1 || got[0] != "s1" {
		t.Errorf("holders of GPU-0 after start-up %v, want [s1]", got)
	}
	// Retries with back-off, and the status says what failed.
	deadline := time.Now().Add(noWaitLimit)
	for {
		ensures, _ := gated.counts()
		if st := h.shares.Status(); ensures >= 3 && st.Failures >= 3 && st.LastError == "the API server is unreachable" && st.Wanted && !st.Ready {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no retries with the failure in the status: ensure calls %d, status %+v", ensures, h.shares.Status())
		}
		time.Sleep(5 * time.Millisecond)
	}
	// A release of some other claim, or a whole card, does not stop it.
	if err := h.unprepare("unknown")["unknown"]; err != nil {
		t.Fatal(err)
	}
	if err := h.prepare(claimWith("w", wholeResult("gpu", "gpu-3")))["w"].Err; err != nil {
		t.Fatal(err)
	}
	if err := h.unprepare("w")["w"]; err != nil {
		t.Fatal(err)
	}
	if _, stops := gated.counts(); stops != stopsBefore {
		t.Errorf("daemon stopped %d times while a share used it", stops-stopsBefore)
	}

	gated.set(func(g *gatedDaemon) { g.ensureErr = nil })
	h.assertConsistent()
	if st := h.shares.Status(); !st.Ready || st.LastError != "" {
		t.Errorf("status after recovery %+v, want ready without error", st)
	}
	if err := h.unprepare("s1")["s1"]; err != nil {
		t.Fatal(err)
	}
	h.assertConsistent()
}

// Start-up finishes without waiting for the daemon however many shares
// must be replayed.
func TestStartupDoesNotWaitForTheDaemon(t *testing.T) {
	h, gated := newGatedHarness(t)
	for i, uid := range []string{"a", "b", "c", "d", "e", "f"} {
		claim := claimWith(uid, shareResult("gpu", "gpu-"+string(rune('0'+i%4)), "share-"+uid, "4Gi", ""))
		if err := h.prepareLikeKubelet(claim); err != nil {
			t.Fatal(err)
		}
	}
	gate := make(chan struct{})
	gated.set(func(g *gatedDaemon) { g.ensureGate = gate })
	mpstest.ReturnsWithin(t, noWaitLimit, "start-up", func() error { return h.tryStart() })
	if n := len(h.driver.Records()); n != 6 {
		t.Errorf("%d claims after start-up, want 6", n)
	}
	close(gate)
	h.assertConsistent()
}

// While the daemon takes long to start, a share is answered at once with a
// retryable error, and whole cards, unprepares and the empty call of the
// health check go on; the retry succeeds once the daemon runs. A slow stop
// after the last share does not hold up the unprepare either.
func TestSlowDaemonHoldsUpNothing(t *testing.T) {
	h, gated := newGatedHarness(t)
	gate := make(chan struct{})
	gated.set(func(g *gatedDaemon) { g.ensureGate = gate })

	share := claimWith("s1", shareResult("gpu", "gpu-0", "share-1", "10Gi", ""))
	res := mpstest.ReturnsWithin(t, noWaitLimit, "a share's prepare", func() map[types.UID]error {
		out := map[types.UID]error{}
		for uid, r := range h.prepare(share) {
			out[uid] = r.Err
		}
		return out
	})
	var notReady *mps.DaemonNotReadyError
	if err := res["s1"]; !errors.As(err, &notReady) {
		t.Fatalf("share prepared while its daemon was starting: error %v, want a *mps.DaemonNotReadyError", err)
	}
	if len(h.driver.Records()) != 0 || len(h.shares.Holders()) != 0 {
		t.Errorf("a refused share left records %v, holders %v", h.driver.Records(), h.shares.Holders())
	}
	mpstest.ReturnsWithin(t, noWaitLimit, "whole-card prepare, unprepare and the health check's empty call", func() error {
		if err := h.prepare(claimWith("w", wholeResult("gpu", "gpu-3")))["w"].Err; err != nil {
			t.Error(err)
		}
		if err := h.unprepare("w")["w"]; err != nil {
			t.Error(err)
		}
		if _, err := h.driver.PrepareResourceClaims(context.Background(), []*resourceapi.ResourceClaim{}); err != nil {
			t.Error(err)
		}
		return nil
	})

	close(gate)
	gated.set(func(g *gatedDaemon) { g.ensureGate = nil })
	deadline := time.Now().Add(noWaitLimit)
	for h.prepare(share)["s1"].Err != nil {
		if time.Now().After(deadline) {
			t.Fatalf("share still refused after the daemon started: %v", h.prepare(share)["s1"].Err)
		}
		time.Sleep(5 * time.Millisecond)
	}
	h.assertConsistent()

	stopGate := make(chan struct{})
	gated.set(func(g *gatedDaemon) { g.stopGate = stopGate })
	mpstest.ReturnsWithin(t, noWaitLimit, "the last share's unprepare", func() error { return h.unprepare("s1")["s1"] })
	close(stopGate)
	h.assertConsistent()
}

// /healthz reports the MPS status as a detail: a daemon that cannot start
// is said, not hidden, and does not fail the probe (the plugin retries it
// by itself; a restart would not help). The metrics say the same.
func TestHealthAndMetricsReportMPSStatus(t *testing.T) {
	h, gated := newGatedHarness(t)
	gated.set(func(g *gatedDaemon) { g.ensureErr = errors.New("image pull failed") })
	share := claimWith("s1", shareResult("gpu", "gpu-0", "share-1", "10Gi", ""))
	if err := h.prepare(share)["s1"].Err; err == nil {
		t.Fatal("share prepared although its daemon cannot start")
	}
	health := &liveness.Server{Checks: map[string]liveness.Check{"dra": func(context.Context) error { return nil }},
		Details: map[string]func() string{"mps": func() string { return h.shares.Status().String() }}}
	metrics := NewMetrics()
	metrics.RegisterMPSStatus(h.shares.Status)

	rec := httptest.NewRecorder()
	health.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/healthz", nil))
	body := rec.Body.String()
	if rec.Code != http.StatusOK || !strings.HasPrefix(body, "ok\n") ||
		!strings.Contains(body, "mps: daemon NOT READY, wanted for a share the kubelet retries (retrying); last failure at ") ||
		!strings.Contains(body, ": image pull failed;") {
		t.Errorf("/healthz = %d %q, want 200 with the MPS failure as a detail", rec.Code, body)
	}
	for name, want := range map[string]float64{
		"tangram_kubelet_plugin_mps_daemon_wanted": 1,
		"tangram_kubelet_plugin_mps_daemon_ready":  0,
	} {
		if got := gatherValue(t, metrics, name); got != want {
			t.Errorf("%s = %v, want %v", name, got, want)
		}
	}
	if got := gatherValue(t, metrics, "tangram_kubelet_plugin_mps_failures_total"); got < 1 {
		t.Errorf("tangram_kubelet_plugin_mps_failures_total = %v, want at least 1", got)
	}

	gated.set(func(g *gatedDaemon) { g.ensureErr = nil })
	deadline := time.Now().Add(noWaitLimit)
	for h.prepare(share)["s1"].Err != nil {
		if time.Now().After(deadline) {
			t.Fatal("share still refused after the daemon recovered")
		}
		time.Sleep(5 * time.Millisecond)
	}
	rec = httptest.NewRecorder()
	health.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/healthz", nil))
	if body := rec.Body.String(); !strings.HasPrefix(body, "ok\nmps: daemon ready for shares on 1 cards") || strings.Contains(body, "last failure") {
		t.Errorf("/healthz after recovery = %q", body)
	}
	if got := gatherValue(t, metrics, "tangram_kubelet_plugin_mps_daemon_ready"); got != 1 {
		t.Errorf("tangram_kubelet_plugin_mps_daemon_ready = %v after recovery, want 1", got)
	}
}

func gatherValue(t *testing.T, m *Metrics, name string) float64 {
	t.Helper()
	families, err := m.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		metric := f.GetMetric()[0]
		if c := metric.GetCounter(); c != nil {
			return c.GetValue()
		}
		return metric.GetGauge().GetValue()
	}
	t.Fatalf("metric %s not found", name)
	return 0
}
