package metrics

import (
	"context"
	"testing"

	"github.com/tangram-gpu/tangram/pkg/cluster/fixture"
)

// BenchmarkCompute100Nodes is one scrape of 100 DGX nodes (800 cards, 1100
// allocated claims) with one pending share.
func BenchmarkCompute100Nodes(b *testing.B) {
	c, err := fixture.Large(context.Background(), 100)
	if err != nil {
		b.Fatal(err)
	}
	c.Pending(fixture.Share("ns", "wait", "40Gi", 0))
	b.ResetTimer()
	for b.Loop() {
		if m := Compute(&c.Snap); len(m) != 800*6+100*2+4 {
			b.Fatalf("%d metrics", len(m))
		}
	}
}
