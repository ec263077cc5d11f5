package mpsshare

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/tangram-gpu/tangram/pkg/plugin/mps"
	"github.com/tangram-gpu/tangram/pkg/plugin/prepared"
)

// callLog is a Shares that records its calls.
type callLog struct{ calls []string }

func (l *callLog) Acquire(_ context.Context, uid string, shares []mps.Share) error {
	l.calls = append(l.calls, fmt.Sprintf("acquire %s %d", uid, len(shares)))
	return nil
}
func (l *callLog) AwaitDaemon(context.Context) (func(), error) {
	l.calls = append(l.calls, "await")
	return func() { l.calls = append(l.calls, "done") }, nil
}
func (l *callLog) Restore(_ context.Context, uid string, shares []mps.Share) {
	l.calls = append(l.calls, fmt.Sprintf("restore %s %d", uid, len(shares)))
}
func (l *callLog) Release(_ context.Context, uid string) error {
	l.calls = append(l.calls, "release "+uid)
	return nil
}
func (l *callLog) Reconcile(context.Context) error {
	l.calls = append(l.calls, "reconcile")
	return nil
}
func (l *callLog) Resync(context.Context)   { l.calls = append(l.calls, "resync") }
func (l *callLog) GuardStops(mps.StopGuard) { l.calls = append(l.calls, "guard") }

func mpsShare(card string) prepared.Device {
	return prepared.Device{Device: "gpu-0", GPUUUID: card, Share: true, MemoryBytes: 1 << 30, MPSPipeDir: "/mps/pipe"}
}

var (
	whole      = prepared.Claim{UID: "w", Namespace: "ns", Name: "w", Devices: []prepared.Device{{Device: "gpu-1", GPUUUID: "GPU-1"}}}
	noneShare  = prepared.Claim{UID: "n", Namespace: "ns", Name: "n", Devices: []prepared.Device{{Device: "gpu-1", GPUUUID: "GPU-1", Share: true}}}
	shareClaim = prepared.Claim{UID: "s", Namespace: "ns", Name: "s", Devices: []prepared.Device{mpsShare("GPU-0")}}
)

// TestEffectsTouchOnlyMPSShares: each step calls the accounting for a
// claim with MPS shares and never for a whole card or a share without
// MPS; with sharing disabled an MPS share is refused at Admit and at
// start-up, and everything else passes.
func TestEffectsTouchOnlyMPSShares(t *testing.T) {
	ctx := context.Background()
	for _, tt := range []struct {
		name      string
		disabled  bool
		rec       prepared.Claim
		wantCalls []string
		wantErr   string
	}{
		{name: "whole card", rec: whole},
		{name: "share without MPS", rec: noneShare},
		{name: "MPS share", rec: shareClaim,
			wantCalls: []string{"await", "acquire s 1", "release s", "restore s 1", "done"}},
		{name: "whole card, sharing disabled", disabled: true, rec: whole},
		{name: "MPS share, sharing disabled", disabled: true, rec: shareClaim,
			wantErr: "the claim holds shares of [GPU-0], but sharing is disabled on node node-a"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			log := &callLog{}
			var shares Shares = log
			if tt.disabled {
				shares = nil
			}
			e := New(shares, "node-a", nil)
			log.calls = nil // the stop guard, set by New
			done := e.BeforeLock(ctx, []prepared.Claim{tt.rec})
			err := e.Admit(ctx, tt.rec)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("Admit: %v, want %q", err, tt.wantErr)
				}
				if _, _, err := e.Recover(ctx, tt.rec); err == nil || !strings.Contains(err.Error(), "--sharing=disabled") {
					t.Errorf("Recover: %v, want the restart advice", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("Admit: %v", err)
			}
			if _, err := e.SetUp(ctx, tt.rec); err != nil {
				t.Fatal(err)
			}
			if err := e.Undo(ctx, tt.rec); err != nil {
				t.Fatal(err)
			}
			if _, changed, err := e.Recover(ctx, tt.rec); err != nil || changed {
				t.Fatalf("Recover: changed %v, %v", changed, err)
			}
			if err := e.RollBack(ctx, tt.rec); err != nil {
				t.Fatal(err)
			}
			done()
			if !slices.Equal(log.calls, tt.wantCalls) {
				t.Errorf("calls %q, want %q", log.calls, tt.wantCalls)
			}
		})
	}
}

// TestResyncFollowsTheOtherProcess: a claim whose MPS shares the other
// plugin process added is restored, one it removed released, one changed
// released then restored, and the daemon looked at again once; unchanged
// claims, and claims without MPS shares, are left alone.
func TestResyncFollowsTheOtherProcess(t *testing.T) {
	moved := shareClaim
	moved.UID = "m"
	movedThere := moved.DeepCopy()
	movedThere.Devices[0].GPUUUID = "GPU-1"
	gone := shareClaim
	gone.UID = "g"
	added := shareClaim
	added.UID = "a"
	kept := shareClaim
	before := map[string]prepared.Claim{"s": kept, "m": moved, "g": gone, "w": whole}
	after := map[string]prepared.Claim{"s": kept, "m": movedThere, "a": added, "n": noneShare}
	log := &callLog{}
	e := New(log, "node-a", nil)
	log.calls = nil
	e.Resync(context.Background(), before, after)
	want := []string{"release g", "release m", "restore m 1", "restore a 1", "resync"}
	if !slices.Equal(log.calls, want) {
		t.Errorf("calls %q, want %q", log.calls, want)
	}

	log.calls = nil
	e.Resync(context.Background(), after, after)
	if len(log.calls) != 0 {
		t.Errorf("nothing changed, but calls %q", log.calls)
	}
}
