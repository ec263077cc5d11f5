package sim

import (
	"context"
	"fmt"
	"testing"

	"github.com/tangram-gpu/tangram/pkg/placement"
	"github.com/tangram-gpu/tangram/pkg/trace"
)

// openbLikeNodes is a 1213-node cluster with openb's mix of models and
// card counts (6212 cards).
func openbLikeNodes() []trace.Node {
	kinds := []struct {
		count int
		node  trace.Node
	}{
		{549, trace.Node{CPUMilli: 96000, MemoryMiB: 393216, GPUs: 8, Model: "G2"}},
		{387, trace.Node{CPUMilli: 104000, MemoryMiB: 524288, GPUs: 2, Model: "T4"}},
		{17, trace.Node{CPUMilli: 96000, MemoryMiB: 393216, GPUs: 4, Model: "T4"}},
		{134, trace.Node{CPUMilli: 64000, MemoryMiB: 262144, GPUs: 2, Model: "P100"}},
		{39, trace.Node{CPUMilli: 128000, MemoryMiB: 786432, GPUs: 8, Model: "G3"}},
		{55, trace.Node{CPUMilli: 32000, MemoryMiB: 131072, GPUs: 4, Model: "V100M16"}},
		{30, trace.Node{CPUMilli: 96000, MemoryMiB: 786432, GPUs: 8, Model: "V100M32"}},
		{2, trace.Node{CPUMilli: 32000, MemoryMiB: 131072, GPUs: 1, Model: "A10"}},
	}
	var nodes []trace.Node
	for kind, k := range kinds {
		for i := 0; i < k.count; i++ {
			n := k.node
			n.Name = fmt.Sprintf("%s-%d-%03d", n.Model, kind, i)
			nodes = append(nodes, n)
		}
	}
	return nodes
}

// BenchmarkPlace measures one placement (filter and score 1213 nodes, run
// the allocator on the chosen one) on a cluster already half full.
func BenchmarkPlace(b *testing.B) {
	nodes := openbLikeNodes()
	_, tasks := sampleTrace(3)
	for _, policy := range placement.PolicyNames {
		b.Run(policy, func(b *testing.B) {
			ctx := context.Background()
			c, err := BuildCluster(nodes)
			if err != nil {
				b.Fatal(err)
			}
			s, err := NewScheduler(ctx, c, policy, tasks, 1)
			if err != nil {
				b.Fatal(err)
			}
			reqs := Requests(tasks)
			var placedMilli int64
			for i := 0; placedMilli < c.CapacityMilli/2; i++ {
				r := reqs[i%len(reqs)]
				r.Name = fmt.Sprintf("warm-%d", i)
				if _, ok, err := s.Place(ctx, r); err != nil {
					b.Fatal(err)
				} else if ok {
					placedMilli += r.GPUMilli()
				}
			}
			probe := placement.Request{CPUMilli: 1000, MemoryMiB: 1024, ShareMilli: 10}
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				probe.Name = fmt.Sprintf("probe-%d", i)
				if _, ok, err := s.Place(ctx, probe); err != nil || !ok {
					b.Fatalf("probe %d: ok=%v err=%v", i, ok, err)
				}
			}
		})
	}
}
