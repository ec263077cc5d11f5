package preemption_test

import (
	"fmt"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"

	"github.com/tangram-gpu/tangram/pkg/dra"
	"github.com/tangram-gpu/tangram/pkg/preemption"
)

// BenchmarkSelectVictims is the cost per node of one PostFilter call on a
// dgx-h100 node whose cards are all taken by low-priority pods: eight whole
// cards, or sixteen 40 GiB shares (two per card).
func BenchmarkSelectVictims(b *testing.B) {
	for _, bc := range []struct {
		name    string
		claims  func(i int) testClaim
		pods    int
		request resourceapi.DeviceRequest
	}{
		{"whole-card/8-whole-pods", func(i int) testClaim { return whole(i, fmt.Sprintf("p%d", i)) }, 8, dra.WholeGPUs("gpu", 1)},
		{"40Gi-share/16-share-pods", func(i int) testClaim { return share(i/2, "40Gi", fmt.Sprintf("p%d", i)) }, 16,
			dra.SharedGPU("gpu", resource.MustParse("40Gi"), resource.Quantity{})},
	} {
		b.Run(bc.name, func(b *testing.B) {
			_, ctx := ktesting.NewTestContext(b)
			ctx = klog.NewContext(ctx, klog.Background().V(1)) // the allocator's V(5) logs are not the cost measured
			var pods []testPod
			var claims []testClaim
			for i := range bc.pods {
				pods = append(pods, pod(fmt.Sprintf("p%d", i), int32(10+i%3)))
				claims = append(claims, bc.claims(i))
			}
			node := buildNode(ctx, b, pods, claims)
			preemptor := newPod(pod("high", 1000), 100)
			claim := dra.Claim("high-gpu", nil, bc.request)
			for b.Loop() {
				d, err := preemption.SelectVictims(ctx, node, preemptor, []*resourceapi.ResourceClaim{claim}, nil, preemption.Limits{})
				if err != nil || len(d.Victims) != 1 {
					b.Fatalf("victims %v, err %v", d.Victims, err)
				}
			}
		})
	}
}
