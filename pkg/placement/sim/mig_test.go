package sim

import (
	"context"
	"testing"

	"github.com/tangram-gpu/tangram/pkg/placement"
	"github.com/tangram-gpu/tangram/pkg/trace"
)

// TestMIGVariant: the MIG variant maps shares to the smallest MIG profile
// with at least their GPU, whole cards to 7g, drops multi-card tasks and
// keeps CPU-only ones; its nodes keep their cards, in MIG mode.
func TestMIGVariant(t *testing.T) {
	nodes, tasks := MIGVariant([]trace.Node{{Name: "n", CPUMilli: 1000, MemoryMiB: 1000, GPUs: 2, Model: "T4"}}, []trace.Task{
		{Name: "s50", NumGPU: 1, GPUMilli: 50}, {Name: "s142", NumGPU: 1, GPUMilli: 142}, {Name: "s143", NumGPU: 1, GPUMilli: 143},
		{Name: "s500", NumGPU: 1, GPUMilli: 500}, {Name: "s600", NumGPU: 1, GPUMilli: 600, GPUSpec: []string{"T4"}},
		{Name: "w", NumGPU: 1, GPUMilli: 1000}, {Name: "multi", NumGPU: 2, GPUMilli: 1000}, {Name: "cpu"},
	})
	if nodes[0].Model != MIGModel || nodes[0].GPUs != 2 {
		t.Errorf("node %+v, want 2 cards of %s", nodes[0], MIGModel)
	}
	want := map[string]string{"s50": "1g.10gb", "s142": "1g.10gb", "s143": "2g.20gb", "s500": "4g.40gb", "s600": "7g.80gb", "w": "7g.80gb", "cpu": ""}
	if len(tasks) != len(want) {
		t.Errorf("%d tasks, want %d (the multi-card task left out)", len(tasks), len(want))
	}
	for _, task := range tasks {
		if got, ok := want[task.Name]; !ok || got != task.MIGProfile || task.GPUSpec != nil {
			t.Errorf("task %s: profile %q models %v, want %q and any model", task.Name, task.MIGProfile, task.GPUSpec, want[task.Name])
		}
	}
}

// TestMIGModelAgreesWithAllocator replays the MIG variant of the sample
// with every policy: each placement the model proposes is accepted by the
// real allocator with exactly the predicted partition (its counters and
// all), so the policies' view of MIG cards is the allocator's.
func TestMIGModelAgreesWithAllocator(t *testing.T) {
	nodes, tasks := MIGVariant(sampleTrace(1))
	for _, policy := range placement.PolicyNames {
		t.Run(policy, func(t *testing.T) {
			res, err := Run(context.Background(), nodes, tasks, Config{Policy: policy, Seed: 42, Arrival: 1.3})
			if err != nil {
				t.Fatal(err)
			}
			if res.AllocatorRefused != 0 || res.ModelDisagreed != 0 {
				t.Errorf("model and allocator differ: %d refused, %d disagreed", res.AllocatorRefused, res.ModelDisagreed)
			}
			if res.GPUTasksFailed == 0 {
				t.Error("no GPU task failed at 130% arrival; the sample does not fill the cluster")
			}
			t.Logf("%s: allocation %.1f%% at 100%% arrival, %.1f%% at 130%%, %d GPU tasks failed", policy, res.AllocationRatio100, res.AllocationRatio130, res.GPUTasksFailed)
		})
	}
}
