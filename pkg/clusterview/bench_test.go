package clusterview_test

import (
	"context"
	"io"
	"testing"

	"github.com/tangram-gpu/tangram/pkg/cluster/fixture"
	"github.com/tangram-gpu/tangram/pkg/clusterview"
)

// BenchmarkBuildAndRender measures `status` minus the API calls on 100
// DGX nodes (800 GPUs, 1100 allocated claims).
func BenchmarkBuildAndRender(b *testing.B) {
	c, err := fixture.Large(context.Background(), 100)
	if err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for b.Loop() {
		v := clusterview.Build(&c.Snap, clusterview.Options{})
		if err := clusterview.WriteStatus(io.Discard, v, clusterview.Style{}); err != nil {
			b.Fatal(err)
		}
	}
}
