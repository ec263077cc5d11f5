package usage

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/tangram-gpu/tangram/pkg/gpu"
	"github.com/tangram-gpu/tangram/pkg/plugin/podcgroup"
)

type listedProcesses struct {
	procs []gpu.Process
	err   error
}

func (l listedProcesses) GPUProcesses(context.Context) ([]gpu.Process, error) { return l.procs, l.err }

// TestWatcherOnce: one round over its sources. A card NVML could not list
// and a process whose cgroup could not be read are left out, the rest
// counted; a process that exited meanwhile is no stray; the pods' claims
// failing fails the round.
func TestWatcherOnce(t *testing.T) {
	procs := []gpu.Process{
		{Card: "GPU-1", GPUInstance: gpu.NoGPUInstance, PID: 10, UsedBytes: gib},
		{Card: "GPU-1", GPUInstance: gpu.NoGPUInstance, PID: 11, UsedBytes: gib},
		{Card: "GPU-1", GPUInstance: gpu.NoGPUInstance, PID: 12, UsedBytes: gib},
		{Card: "GPU-1", GPUInstance: gpu.NoGPUInstance, PID: 13, UsedBytes: gib},
		{Card: "GPU-1", GPUInstance: gpu.NoGPUInstance, PID: 14, UsedBytes: gib},
	}
	podOf := func(pid int) (string, error) {
		switch pid {
		case 10, 11:
			return "pod-a", nil
		case 14:
			return "pod-without-claims", nil
		case 12:
			return "", fmt.Errorf("reading /proc/12/cgroup: %w", podcgroup.ErrProcessGone)
		}
		return "", errors.New("permission denied")
	}
	tests := []struct {
		name      string
		listed    bool // NVML listed some cards
		listErr   error
		claimsErr error
		wantPIDs  []int
		wantErr   string
	}{
		{name: "every source answers", listed: true, wantPIDs: []int{10, 11}},
		{name: "some cards not listed: the others counted", listed: true, listErr: errors.New("card 3: GPU is lost"), wantPIDs: []int{10, 11}},
		{name: "NVML listed nothing: no round", listErr: errors.New("the driver's NVML has none of the calls"), wantErr: "listing the GPU processes: the driver's NVML has none of the calls"},
		{name: "the pods' claims unread: no round", listed: true, claimsErr: errors.New("the API server is away"), wantErr: "reading the claims of the node's pods: the API server is away"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			listed := listedProcesses{err: tt.listErr}
			if tt.listed {
				listed.procs = procs
			}
			w := Watcher{
				Processes: listed,
				PodOf:     podOf,
				PodClaims: func(context.Context) (map[string][]string, error) {
					return map[string][]string{"pod-a": {"team/claim-a"}}, tt.claimsErr
				},
				Records: records,
			}
			r, err := w.Once(context.Background())
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("Once: %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(r.Uses) != 1 || !reflect.DeepEqual(r.Uses[0].PIDs, tt.wantPIDs) || r.Uses[0].UsedBytes != 2*gib {
				t.Errorf("uses %+v, want claim a with %v and 2 GiB", r.Uses, tt.wantPIDs)
			}
			// The gone and the unreadable processes are no strays; the
			// one in a pod without claims is.
			if len(r.Strays) != 1 || r.Strays[0].PID != 14 || r.Strays[0].Pod != "pod-without-claims" {
				t.Errorf("strays %+v, want pid 14 of pod-without-claims alone", r.Strays)
			}
		})
	}
}

// TestWatcherRunPublishesEachRound: Run publishes a round at once and one
// per interval, never a failed one, until its context ends; without an
// interval or a place to publish it refuses to start.
func TestWatcherRunPublishesEachRound(t *testing.T) {
	rounds := make(chan Report, 100)
	calls := 0
	w := Watcher{
		Processes: listedProcesses{},
		PodOf:     func(int) (string, error) { return "", nil },
		PodClaims: func(context.Context) (map[string][]string, error) {
			calls++
			if calls == 2 {
				return nil, errors.New("once")
			}
			return nil, nil
		},
		Records:  records,
		Interval: time.Millisecond,
		Publish:  func(_ context.Context, r Report) { rounds <- r },
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- w.Run(ctx) }()
	for range 3 {
		select {
		case <-rounds:
		case <-time.After(10 * time.Second):
			t.Fatal("no round published")
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if published := 3 + len(rounds); published != calls-1 {
		t.Errorf("%d rounds published of %d run, one of which failed", published, calls)
	}
	for _, bad := range []Watcher{{Interval: 0, Publish: func(context.Context, Report) {}}, {Interval: time.Second}} {
		if err := bad.Run(context.Background()); err == nil || !strings.Contains(err.Error(), "needs an interval above 0") {
			t.Errorf("Run with interval %s, publish %t: %v", bad.Interval, bad.Publish != nil, err)
		}
	}
}

func TestProcPodOf(t *testing.T) {
	proc := t.TempDir()
	write := func(pid int, content string) {
		dir := filepath.Join(proc, fmt.Sprint(pid))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "cgroup"), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	const uid = "1b6d5f1e-9c5a-4b8f-9a0e-2d7c3e1f4a5b"
	write(1, "0::/kubepods/besteffort/pod"+uid+"/ctr\n")
	write(2, "0::/system.slice/containerd.service\n")
	podOf := ProcPodOf(proc)
	for _, tt := range []struct {
		pid     int
		want    string
		wantErr error
	}{{1, uid, nil}, {2, "", nil}, {3, "", podcgroup.ErrProcessGone}} {
		got, err := podOf(tt.pid)
		if got != tt.want || !errors.Is(err, tt.wantErr) || (tt.wantErr == nil) != (err == nil) {
			t.Errorf("pid %d: %q, %v; want %q, %v", tt.pid, got, err, tt.want, tt.wantErr)
		}
	}
}

func TestClaimsOfPods(t *testing.T) {
	name := func(s string) *string { return &s }
	pods := []*corev1.Pod{
		{ObjectMeta: metav1.ObjectMeta{Namespace: "team", UID: types.UID("p1")},
			Spec:   corev1.PodSpec{ResourceClaims: []corev1.PodResourceClaim{{Name: "gpu", ResourceClaimName: name("shared")}, {Name: "t", ResourceClaimTemplateName: name("tmpl")}}},
			Status: corev1.PodStatus{ResourceClaimStatuses: []corev1.PodResourceClaimStatus{{Name: "t", ResourceClaimName: name("p1-t-abcde")}, {Name: "unmade"}}}},
		{ObjectMeta: metav1.ObjectMeta{Namespace: "team", UID: types.UID("p2")}},
	}
	want := map[string][]string{"p1": {"team/p1-t-abcde", "team/shared"}}
	if got := ClaimsOfPods(pods); !reflect.DeepEqual(got, want) {
		t.Errorf("ClaimsOfPods = %v, want %v", got, want)
	}
}

// TestMetricsPublish: the metrics serve the last round whole; every card
// has its series, 0 when nothing runs on it.
func TestMetricsPublish(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := NewMetrics(reg, "n1", []Card{{UUID: "GPU-1", Device: "gpu-1"}, {UUID: "GPU-2", Device: "gpu-2"}, {UUID: "GPU-3", Device: "gpu-3"}})
	if err != nil {
		t.Fatal(err)
	}
	if n, err := testutil.GatherAndCount(reg); err != nil || n != 0 {
		t.Errorf("%d series before the first round (%v), want none", n, err)
	}
	recs := records()
	share, whole := recs["a"], recs["w"]
	m.Publish(context.Background(), Report{
		Uses: []Use{{ClaimUID: "a", Namespace: share.Namespace, Name: share.Name, Device: share.Devices[0], PIDs: []int{10}, UsedBytes: 5 * gib, UsedKnown: true, SMPercent: 35, SMKnown: true, AllowedBytes: 4 * gib, Over: true},
			{ClaimUID: "w", Namespace: whole.Namespace, Name: whole.Name, Device: whole.Devices[0], PIDs: []int{30}, UsedBytes: 9 * gib, UsedKnown: true}},
		Strays:    []Stray{{Process: gpu.Process{Card: "GPU-2", PID: 60, UsedBytes: gib}}, {Process: gpu.Process{Card: "GPU-2", PID: 61, UsedBytes: -1}}},
		Node:      []gpu.Process{{Card: "GPU-1", PID: 70, UsedBytes: gib}},
		Ambiguous: []gpu.Process{{Card: "GPU-1", PID: 10}},
	})
	want := `
# HELP tangram_gpu_claim_memory_allowed_bytes GPU memory a share in use was given (its request, which is its limit); only shares.
# TYPE tangram_gpu_claim_memory_allowed_bytes gauge
tangram_gpu_claim_memory_allowed_bytes{claim="claim-a",device="gpu-1",namespace="team",node="n1"} 4.294967296e+09
# HELP tangram_gpu_claim_memory_over 1 when a share's processes use more GPU memory than the share was given, 0 otherwise; only shares (a whole card or a MIG partition is held by the GPU).
# TYPE tangram_gpu_claim_memory_over gauge
tangram_gpu_claim_memory_over{claim="claim-a",device="gpu-1",namespace="team",node="n1"} 1
# HELP tangram_gpu_claim_memory_used_bytes GPU memory the processes of a prepared device's pods use on it, as NVML reports it (a lower bound where NVML gives no figure for a process).
# TYPE tangram_gpu_claim_memory_used_bytes gauge
tangram_gpu_claim_memory_used_bytes{claim="claim-a",device="gpu-1",namespace="team",node="n1"} 5.36870912e+09
tangram_gpu_claim_memory_used_bytes{claim="claim-w",device="gpu-2",namespace="team",node="n1"} 9.663676416e+09
# HELP tangram_gpu_claim_sm_utilization_percent Part of the card's streaming multiprocessors a prepared device's processes kept busy since the previous round, NVML's samples of each process averaged; absent where NVML does not give it (MIG mode, cards without it, an MPS client it did not sample).
# TYPE tangram_gpu_claim_sm_utilization_percent gauge
tangram_gpu_claim_sm_utilization_percent{claim="claim-a",device="gpu-1",namespace="team",node="n1"} 35
# HELP tangram_gpu_card_memory_used_bytes GPU memory all processes on a card use, as NVML reports it (claims', unaccounted and the node's own).
# TYPE tangram_gpu_card_memory_used_bytes gauge
tangram_gpu_card_memory_used_bytes{device="gpu-1",node="n1",uuid="GPU-1"} 6.442450944e+09
tangram_gpu_card_memory_used_bytes{device="gpu-2",node="n1",uuid="GPU-2"} 1.073741824e+10
tangram_gpu_card_memory_used_bytes{device="gpu-3",node="n1",uuid="GPU-3"} 0
# HELP tangram_gpu_unaccounted_memory_bytes GPU memory of the processes no prepared claim accounts for, as NVML reports it.
# TYPE tangram_gpu_unaccounted_memory_bytes gauge
tangram_gpu_unaccounted_memory_bytes{device="gpu-1",node="n1",uuid="GPU-1"} 0
tangram_gpu_unaccounted_memory_bytes{device="gpu-2",node="n1",uuid="GPU-2"} 1.073741824e+09
tangram_gpu_unaccounted_memory_bytes{device="gpu-3",node="n1",uuid="GPU-3"} 0
# HELP tangram_gpu_unaccounted_processes GPU processes on a card that no prepared claim accounts for: outside any pod, or in a pod that holds nothing of that card.
# TYPE tangram_gpu_unaccounted_processes gauge
tangram_gpu_unaccounted_processes{device="gpu-1",node="n1",uuid="GPU-1"} 0
tangram_gpu_unaccounted_processes{device="gpu-2",node="n1",uuid="GPU-2"} 2
tangram_gpu_unaccounted_processes{device="gpu-3",node="n1",uuid="GPU-3"} 0
# HELP tangram_gpu_node_processes GPU processes of the node's own daemons (the MPS control daemon and servers) on a card.
# TYPE tangram_gpu_node_processes gauge
tangram_gpu_node_processes{device="gpu-1",node="n1",uuid="GPU-1"} 1
tangram_gpu_node_processes{device="gpu-2",node="n1",uuid="GPU-2"} 0
tangram_gpu_node_processes{device="gpu-3",node="n1",uuid="GPU-3"} 0
# HELP tangram_gpu_ambiguous_processes GPU processes whose pod holds several devices of the card: each is counted on the first, as NVML does not say which one it serves.
# TYPE tangram_gpu_ambiguous_processes gauge
tangram_gpu_ambiguous_processes{device="gpu-1",node="n1",uuid="GPU-1"} 1
tangram_gpu_ambiguous_processes{device="gpu-2",node="n1",uuid="GPU-2"} 0
tangram_gpu_ambiguous_processes{device="gpu-3",node="n1",uuid="GPU-3"} 0
`
	names := []string{"tangram_gpu_claim_memory_allowed_bytes", "tangram_gpu_claim_memory_over", "tangram_gpu_claim_memory_used_bytes", "tangram_gpu_claim_sm_utilization_percent", "tangram_gpu_card_memory_used_bytes",
		"tangram_gpu_unaccounted_memory_bytes", "tangram_gpu_unaccounted_processes", "tangram_gpu_node_processes", "tangram_gpu_ambiguous_processes"}
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), names...); err != nil {
		t.Error(err)
	}
	// The next round has nothing: only the cards' zeros and the round.
	m.Publish(context.Background(), Report{})
	if n, err := testutil.GatherAndCount(reg); err != nil || n != 3*5+1 {
		t.Errorf("%d series after an empty round (%v), want %d", n, err, 3*5+1)
	}
	if n, err := testutil.GatherAndCount(reg, "tangram_gpu_usage_round_timestamp_seconds"); err != nil || n != 1 {
		t.Errorf("%d round timestamps (%v), want 1", n, err)
	}
}
