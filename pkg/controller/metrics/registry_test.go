package metrics

import (
	"slices"
	"testing"

	"k8s.io/klog/v2"

	tangramv1alpha1 "github.com/tangram-gpu/tangram/api/tangram/v1alpha1"
	"github.com/tangram-gpu/tangram/pkg/cluster"
	"github.com/tangram-gpu/tangram/pkg/metricsregistry"
)

func TestNewRegistryGangMetricsOnlyWithGangs(t *testing.T) {
	src := staticSource{snap: &cluster.Snapshot{}}
	noGangs := func() ([]*tangramv1alpha1.GpuGang, error) { return nil, nil }
	for _, tc := range []struct {
		name      string
		listGangs func() ([]*tangramv1alpha1.GpuGang, error)
		wantGangs bool
	}{
		{"GpuGang controller off", nil, false},
		{"GpuGang controller on", noGangs, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			reg, leader := NewRegistry(src, tc.listGangs, klog.Background())
			leader.Set(1)
			names := metricsregistry.Names(reg)
			for _, n := range []string{"tangram_controller_leader", "tangram_gpu_shares", "tangram_cluster_fragmentation_ratio", "go_goroutines"} {
				if !slices.Contains(names, n) {
					t.Errorf("%s missing from %q", n, names)
				}
			}
			if got := slices.Contains(names, "tangram_gpugangs"); got != tc.wantGangs {
				t.Errorf("tangram_gpugangs registered: %v, want %v", got, tc.wantGangs)
			}
			if _, err := reg.Gather(); err != nil {
				t.Errorf("gathering: %v", err)
			}
		})
	}
}
