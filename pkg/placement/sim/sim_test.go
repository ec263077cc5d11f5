package sim

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/tangram-gpu/tangram/pkg/placement"
	"github.com/tangram-gpu/tangram/pkg/trace"
)

// sampleTrace is a small cluster shaped like openb (mixed models and card
// counts, CPU-poor and CPU-rich nodes) with tasks drawn from its shapes.
func sampleTrace(seed uint64) ([]trace.Node, []trace.Task) {
	rng := rand.New(rand.NewPCG(seed, 7))
	var nodes []trace.Node
	kinds := []trace.Node{
		{CPUMilli: 96000, MemoryMiB: 393216, GPUs: 8, Model: "G2"},
		{CPUMilli: 104000, MemoryMiB: 524288, GPUs: 2, Model: "T4"},
		{CPUMilli: 16000, MemoryMiB: 122880, GPUs: 2, Model: "P100"},
		{CPUMilli: 32000, MemoryMiB: 131072, GPUs: 4, Model: "V100M16"},
		{CPUMilli: 96000, MemoryMiB: 786432, GPUs: 8, Model: "V100M32"},
	}
	for i := 0; i < 24; i++ {
		n := kinds[i%len(kinds)]
		n.Name = fmt.Sprintf("node-%02d", i)
		nodes = append(nodes, n)
	}
	shares := []int{810, 470, 320, 650, 230, 460, 160, 50}
	var tasks []trace.Task
	for i := 0; i < 400; i++ {
		t := trace.Task{Name: fmt.Sprintf("task-%03d", i), CPUMilli: int64(2000 + rng.IntN(10000)), MemoryMiB: int64(4096 + rng.IntN(40000))}
		switch x := rng.IntN(100); {
		case x < 45:
			t.NumGPU, t.GPUMilli = 1, shares[rng.IntN(len(shares))]
		case x < 80:
			t.NumGPU, t.GPUMilli = 1, 1000
		case x < 85:
			t.NumGPU, t.GPUMilli = []int{2, 4, 8}[rng.IntN(3)], 1000
		case x < 90:
			t.NumGPU, t.GPUMilli, t.GPUSpec = 1, 1000, []string{"V100M16", "V100M32"}
		}
		tasks = append(tasks, t)
	}
	return nodes, tasks
}

// TestModelAgreesWithAllocator replays a sample with every policy: every
// placement the model proposes must be accepted by the real allocator with
// exactly the predicted cards and consumed capacity.
func TestModelAgreesWithAllocator(t *testing.T) {
	nodes, tasks := sampleTrace(1)
	for _, policy := range placement.PolicyNames {
		t.Run(policy, func(t *testing.T) {
			res, err := Run(context.Background(), nodes, tasks, Config{Policy: policy, Seed: 42, Arrival: 1.3})
			if err != nil {
				t.Fatal(err)
			}
			if res.AllocatorRefused != 0 || res.ModelDisagreed != 0 {
				t.Errorf("model and allocator differ: %d refused, %d disagreed", res.AllocatorRefused, res.ModelDisagreed)
			}
			if res.TasksFailed == 0 {
				t.Error("no task failed at 130% arrival; the sample does not fill the cluster")
			}
			if len(res.Curve) != 131 || res.Curve[0].ArrivedPercent != 0 || res.Curve[130].ArrivedPercent != 130 {
				t.Fatalf("curve has %d points, want 0..130", len(res.Curve))
			}
			for i, p := range res.Curve {
				if p.AllocationRatio > float64(p.ArrivedPercent)+1e-9 && p.ArrivedPercent > 0 {
					// Allocation can exceed arrival only by the task that
					// crossed the point; the points count allocation
					// before that task.
					t.Fatalf("point %d: allocated %.2f%% > arrived %d%%", i, p.AllocationRatio, p.ArrivedPercent)
				}
				if i > 0 && p.AllocationRatio < res.Curve[i-1].AllocationRatio {
					t.Fatalf("point %d: allocation went down; nothing ever departs", i)
				}
			}
			if res.AllocationRatio130 < res.AllocationRatio100 || res.AllocationRatio130 > 100 {
				t.Errorf("ratio at 100%% = %.2f, at 130%% = %.2f", res.AllocationRatio100, res.AllocationRatio130)
			}
		})
	}
}

func TestBuildClusterErrors(t *testing.T) {
	_, err := BuildCluster([]trace.Node{{Name: "n", CPUMilli: 1, MemoryMiB: 1, GPUs: 2, Model: "H200"}})
	if err == nil || !strings.Contains(err.Error(), `card model "H200" has no memory size`) {
		t.Errorf("unknown model: error = %v", err)
	}
	_, err = BuildCluster([]trace.Node{{Name: "n", CPUMilli: 1, MemoryMiB: 1, GPUs: 1, Model: "T4"}, {Name: "n", CPUMilli: 1, MemoryMiB: 1, GPUs: 1, Model: "T4"}})
	if err == nil || !strings.Contains(err.Error(), "node n appears twice") {
		t.Errorf("duplicate node: error = %v", err)
	}
	_, err = BuildCluster([]trace.Node{{Name: "n", CPUMilli: 1, MemoryMiB: 1}})
	if err == nil || !strings.Contains(err.Error(), "no GPUs") {
		t.Errorf("no GPUs: error = %v", err)
	}
}

func TestRunUnknownPolicy(t *testing.T) {
	nodes, tasks := sampleTrace(2)
	_, err := Run(context.Background(), nodes, tasks, Config{Policy: "random", Seed: 1, Arrival: 1.3})
	if err == nil || !strings.Contains(err.Error(), `unknown policy "random"`) {
		t.Errorf("error = %v", err)
	}
}

// TestReportFailures: one T4 and only 810 shares. The first takes the card
// and leaves 190; the second arrives after 100% (1620 of 1000 milli asked)
// and finds no card.
func TestReportFailures(t *testing.T) {
	nodes := []trace.Node{{Name: "n", CPUMilli: 64000, MemoryMiB: 65536, GPUs: 1, Model: "T4"}}
	tasks := []trace.Task{{Name: "s", CPUMilli: 1000, MemoryMiB: 1024, NumGPU: 1, GPUMilli: 810}}
	for _, report := range []bool{false, true} {
		res, err := Run(context.Background(), nodes, tasks, Config{Policy: "tangram", Seed: 1, Arrival: 1.3, ReportFailures: report})
		if err != nil {
			t.Fatal(err)
		}
		if res.Tasks != 2 || res.GPUTasksFailed != 1 || res.AllocationRatio130 != 81 {
			t.Errorf("report=%v: %d tasks, %d failed, ratio %v; want 2, 1, 81", report, res.Tasks, res.GPUTasksFailed, res.AllocationRatio130)
		}
		var wantFailures []FailureClass
		var wantLeftover []FreeLevel
		if report {
			wantFailures = []FailureClass{{Class: "share 810", Tasks: 1, Milli: 810}}
			wantLeftover = []FreeLevel{{FromMilli: 150, Cards: 1, Milli: 190}}
		}
		if !slices.Equal(res.Failures, wantFailures) || !slices.Equal(res.Leftover, wantLeftover) {
			t.Errorf("report=%v: failures %v, leftover %v; want %v, %v", report, res.Failures, res.Leftover, wantFailures, wantLeftover)
		}
	}
}

func TestFailureClasses(t *testing.T) {
	tally := failureTally{}
	tally.add(placement.Request{WholeCards: 1})
	tally.add(placement.Request{WholeCards: 8, Models: []string{"V100M16", "V100M32"}})
	tally.add(placement.Request{ShareMilli: 470})
	tally.add(placement.Request{ShareMilli: 470})
	want := []FailureClass{
		{Class: "8 whole on V100M16|V100M32", Tasks: 1, Milli: 8000},
		{Class: "1 whole", Tasks: 1, Milli: 1000},
		{Class: "share 470", Tasks: 2, Milli: 940},
	}
	if got := tally.classes(); !slices.Equal(got, want) {
		t.Errorf("classes = %v, want %v", got, want)
	}
}
