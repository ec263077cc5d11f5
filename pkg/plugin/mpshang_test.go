package plugin

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/tangram-gpu/tangram/pkg/plugin/liveness"
	"github.com/tangram-gpu/tangram/pkg/plugin/mps"
	"github.com/tangram-gpu/tangram/pkg/plugin/mps/control"
	"github.com/tangram-gpu/tangram/pkg/plugin/mps/daemon"
	"github.com/tangram-gpu/tangram/pkg/plugin/mps/mpstest"
	"github.com/tangram-gpu/tangram/pkg/plugin/mps/mpsv3"
	"github.com/tangram-gpu/tangram/pkg/plugin/mps/standin"
)

// A share that arrives while the node's MPS daemon starts waits for it,
// before the state lock, and is prepared without a retryable error once
// the daemon runs; whole-card prepares and unprepares go on meanwhile.
func TestShareWaitsForAStartingDaemonWhileWholeCardsGoOn(t *testing.T) {
	h, gated := newGatedHarness(t)
	h.timing.StartWait = time.Minute
	h.restart()
	gate := make(chan struct{})
	gated.set(func(g *gatedDaemon) { g.ensureGate = gate })
	ensuresBefore, _ := gated.counts()

	share := claimWith("s1", shareResult("gpu", "gpu-0", "share-1", "10Gi", ""))
	shareDone := make(chan error, 1)
	go func() {
		res, err := h.driver.PrepareResourceClaims(context.Background(), []*resourceapi.ResourceClaim{share})
		if err == nil {
			err = res["s1"].Err
		}
		shareDone <- err
	}()
	deadline := time.Now().Add(noWaitLimit)
	for ensures, _ := gated.counts(); ensures == ensuresBefore; ensures, _ = gated.counts() {
		if time.Now().After(deadline) {
			t.Fatal("the share's prepare never asked for the daemon")
		}
		time.Sleep(time.Millisecond)
	}
	mpstest.ReturnsWithin(t, noWaitLimit, "whole-card prepare and unprepare while a share waits for the daemon", func() error {
		if err := h.prepare(claimWith("w", wholeResult("gpu", "gpu-3")))["w"].Err; err != nil {
			t.Error(err)
		}
		if err := h.unprepare("w")["w"]; err != nil {
			t.Error(err)
		}
		return nil
	})
	select {
	case err := <-shareDone:
		t.Fatalf("the share was answered (%v) before its daemon started", err)
	default:
	}
	close(gate)
	select {
	case err := <-shareDone:
		if err != nil {
			t.Fatalf("share prepared while its daemon started: %v, want success without a retry", err)
		}
	case <-time.After(noWaitLimit):
		t.Fatal("the share's prepare did not return after its daemon started")
	}
	h.assertConsistent()
}

// standInV3Daemon runs the stand-in MPS v3 control daemon in the test
// process and tracks it in the harness's simulated daemon.
type standInV3Daemon struct {
	*daemon.SimulatedDaemon
	mu     sync.Mutex
	cancel context.CancelFunc
	done   chan error
}

func (d *standInV3Daemon) Ensure(ctx context.Context) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.cancel == nil {
		layout := d.Layout
		for _, dir := range []string{layout.PipeDir(), layout.LogDir()} {
			if err := os.MkdirAll(dir, 0o755); err != nil {
				return err
			}
		}
		runCtx, cancel := context.WithCancel(context.Background())
		d.cancel, d.done = cancel, make(chan error, 1)
		go func(done chan error) {
			done <- standin.RunDaemon(runCtx, standin.Config{PipeDir: layout.PipeDir(), LogDir: layout.LogDir(), Protocol: 3, MultiUser: true})
		}(d.done)
		socket := filepath.Join(layout.PipeDir(), "control")
		for {
			conn, err := net.Dial("unix", socket)
			if err == nil {
				_ = conn.Close()
				break
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(5 * time.Millisecond):
			}
		}
	}
	return d.SimulatedDaemon.Ensure(ctx)
}

func (d *standInV3Daemon) Stop(ctx context.Context) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.cancel != nil {
		d.cancel()
		<-d.done
		d.cancel, d.done = nil, nil
	}
	return d.SimulatedDaemon.Stop(ctx)
}

// In MPS v3 mode a control command that never answers fails the share
// whose command it is, by the command's deadline, with an error naming
// it; a whole-card prepare succeeds meanwhile (waiting for the state lock
// at most that deadline), the MPS status stays readable and says the
// control daemon is unresponsive, and the share is prepared once the
// daemon answers again.
func TestHungControlCommandFailsOnlyItsShare(t *testing.T) {
	const controlTimeout = 2 * time.Second
	h, ctl := newV3StandInHarness(t, controlTimeout)
	if err := h.prepareLikeKubelet(claimWith("s0", shareResult("gpu", "gpu-0", "share-0", "10Gi", ""))); err != nil {
		t.Fatal(err)
	}
	ctl.Set(mpsv3.NamespaceName("s1"))
	shareDone := make(chan error, 1)
	start := time.Now()
	go func() {
		res, err := h.driver.PrepareResourceClaims(context.Background(), []*resourceapi.ResourceClaim{
			claimWith("s1", shareResult("gpu", "gpu-1", "share-1", "10Gi", "")),
		})
		if err == nil {
			err = res["s1"].Err
		}
		shareDone <- err
	}()
	<-ctl.Hung
	mpstest.ReturnsWithin(t, time.Second, "the MPS status while a control command hangs", func() mps.Status { return h.shares.Status() })
	mpstest.ReturnsWithin(t, controlTimeout+noWaitLimit, "a whole-card prepare while a share's control command hangs", func() error {
		if err := h.prepare(claimWith("w", wholeResult("gpu", "gpu-3")))["w"].Err; err != nil {
			t.Errorf("whole card: %v", err)
		}
		return nil
	})
	var err error
	select {
	case err = <-shareDone:
	case <-time.After(controlTimeout + noWaitLimit):
		t.Fatal("the share whose control command hangs was not answered by the command's deadline")
	}
	var timedOut *control.TimeoutError
	if !errors.As(err, &timedOut) || !strings.Contains(err.Error(), mpsv3.NamespaceName("s1")) {
		t.Fatalf("share with a hung control command: %v, want a control.TimeoutError naming the command", err)
	}
	if took := time.Since(start); took < controlTimeout {
		t.Errorf("the share failed after %s, before its command's %s deadline", took, controlTimeout)
	}
	if st := h.shares.Status(); st.ControlTimeouts < 1 {
		t.Errorf("status %+v, want the control timeout counted", st)
	}

	ctl.Set("")
	if err := h.prepareLikeKubelet(claimWith("s1", shareResult("gpu", "gpu-1", "share-1", "10Gi", ""))); err != nil {
		t.Fatalf("share once the control daemon answers: %v", err)
	}
	h.assertConsistent()
}

// newV3StandInHarness is a harness whose Manager drives MPS v3 namespaces
// on the stand-in control daemon, run in the test process, through a
// mpstest.HangingControl; control commands time out after controlTimeout.
func newV3StandInHarness(t *testing.T, controlTimeout time.Duration) (*harness, *mpstest.HangingControl) {
	t.Helper()
	h := newHarness(t)
	var ctl *mpstest.HangingControl
	h.wrapDaemon = func(sim *daemon.SimulatedDaemon) daemon.Daemon { return &standInV3Daemon{SimulatedDaemon: sim} }
	h.managerOpts = func(layout daemon.Layout, cards []string) []mps.ManagerOption {
		ctl = mpstest.NewHangingControl(standin.Control(layout.PipeDir()))
		return []mps.ManagerOption{mps.WithV3(mpsv3.NewNamespaces(ctl.Control, cards), daemon.ClaimDirs{Layout: layout})}
	}
	h.timing = mps.Timing{ControlTimeout: controlTimeout, ReadyWait: 10 * time.Second, StartWait: 10 * time.Second,
		RetryMin: 10 * time.Millisecond, RetryMax: 100 * time.Millisecond}
	h.restart()
	t.Cleanup(func() { ctl.Set("") })
	return h, ctl
}

// A control daemon that stops answering shows in /healthz (a detail; the
// probe still passes, restarting the plugin would not help) and in the
// metrics, until it answers again.
func TestHealthAndMetricsReportAnUnresponsiveControlDaemon(t *testing.T) {
	h, ctl := newV3StandInHarness(t, 300*time.Millisecond)
	if err := h.prepareLikeKubelet(claimWith("s0", shareResult("gpu", "gpu-0", "share-0", "10Gi", ""))); err != nil {
		t.Fatal(err)
	}
	health := &liveness.Server{Checks: map[string]liveness.Check{"dra": func(context.Context) error { return nil }},
		Details: map[string]func() string{"mps": func() string { return h.shares.Status().String() }}}
	metrics := NewMetrics()
	metrics.RegisterMPSStatus(h.shares.Status)
	healthz := func() (int, string) {
		rec := httptest.NewRecorder()
		health.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/healthz", nil))
		return rec.Code, rec.Body.String()
	}
	if got := gatherValue(t, metrics, "tangram_kubelet_plugin_mps_control_unresponsive"); got != 0 {
		t.Errorf("tangram_kubelet_plugin_mps_control_unresponsive = %v with an answering daemon, want 0", got)
	}

	// Every prepare and every check of the worker lists something.
	ctl.Set("list")
	if err := h.prepare(claimWith("s1", shareResult("gpu", "gpu-1", "share-1", "10Gi", "")))["s1"].Err; err == nil {
		t.Fatal("share prepared although the control daemon does not answer")
	}
	code, body := healthz()
	if code != http.StatusOK || !strings.HasPrefix(body, "ok\n") || !strings.Contains(body, "mps: control daemon UNRESPONSIVE since ") ||
		!strings.Contains(body, "got no answer within 300ms") {
		t.Errorf("/healthz = %d %q, want 200 with the unresponsive control daemon as a detail", code, body)
	}
	if got := gatherValue(t, metrics, "tangram_kubelet_plugin_mps_control_unresponsive"); got != 1 {
		t.Errorf("tangram_kubelet_plugin_mps_control_unresponsive = %v, want 1", got)
	}
	if got := gatherValue(t, metrics, "tangram_kubelet_plugin_mps_control_timeouts_total"); got < 1 {
		t.Errorf("tangram_kubelet_plugin_mps_control_timeouts_total = %v, want at least 1", got)
	}
	if got := gatherValue(t, metrics, "tangram_kubelet_plugin_mps_daemon_ready"); got != 0 {
		t.Errorf("tangram_kubelet_plugin_mps_daemon_ready = %v with an unresponsive control daemon, want 0", got)
	}

	ctl.Set("")
	deadline := time.Now().Add(noWaitLimit)
	for gatherValue(t, metrics, "tangram_kubelet_plugin_mps_control_unresponsive") != 0 {
		if time.Now().After(deadline) {
			t.Fatal("the control daemon answers again, but is still reported unresponsive")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if _, body := healthz(); strings.Contains(body, "UNRESPONSIVE") {
		t.Errorf("/healthz after recovery = %q", body)
	}
}

// Once a control command got no answer, shares are refused at once, naming
// it, without sending commands of their own: five shares queued behind the
// hung one do not each wait a deadline under the state lock, and a whole
// card after them is prepared at once (issue 37, item 1).
func TestSharesRefusedAtOnceWhileControlUnresponsive(t *testing.T) {
	const controlTimeout = 3 * time.Second
	h, ctl := newV3StandInHarness(t, controlTimeout)
	if err := h.prepareLikeKubelet(claimWith("s0", shareResult("gpu", "gpu-0", "share-0", "10Gi", ""))); err != nil {
		t.Fatal(err)
	}
	ctl.Set("list")
	if err := h.prepare(claimWith("s1", shareResult("gpu", "gpu-1", "share-1", "10Gi", "")))["s1"].Err; err == nil {
		t.Fatal("share prepared although the control daemon does not answer")
	}
	// Five shares, one after another as the state lock orders them: before
	// the fix each waited a worker probe's deadline; now none waits.
	mpstest.ReturnsWithin(t, controlTimeout, "five shares while the control daemon is unresponsive", func() error {
		for i := 2; i < 7; i++ {
			uid := fmt.Sprintf("s%d", i)
			err := h.prepare(claimWith(uid, shareResult("gpu", "gpu-1", fmt.Sprintf("share-%d", i), "1Gi", "")))[types.UID(uid)].Err
			var notReady *mps.DaemonNotReadyError
			if !errors.As(err, &notReady) || !strings.Contains(err.Error(), "unresponsive") || !strings.Contains(err.Error(), "list") {
				t.Errorf("share %s while the control daemon is unresponsive: %v, want a DaemonNotReadyError naming the command that got no answer", uid, err)
			}
		}
		return nil
	})
	mpstest.ReturnsWithin(t, controlTimeout, "a whole card after the refused shares", func() error {
		if err := h.prepare(claimWith("w", wholeResult("gpu", "gpu-3")))["w"].Err; err != nil {
			t.Errorf("whole card: %v", err)
		}
		return nil
	})
	ctl.Set("")
	if err := h.prepareLikeKubelet(claimWith("s2", shareResult("gpu", "gpu-1", "share-2", "1Gi", ""))); err != nil {
		t.Fatalf("a share once the control daemon answers again: %v", err)
	}
	h.assertConsistent()
}
