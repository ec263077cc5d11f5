package metrics

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tangram-gpu/tangram/pkg/cluster"
	"github.com/tangram-gpu/tangram/pkg/cluster/fixture"
)

type staticSource struct {
	snap *cluster.Snapshot
	err  error
}

func (s staticSource) Snapshot() (*cluster.Snapshot, error) { return s.snap, s.err }

// l4Cluster: one shareable node with 4 × 24 GiB L4s; a 16 GiB share on
// gpu-0 and a whole card (gpu-1) are allocated.
func l4Cluster(t *testing.T) *fixture.Cluster {
	t.Helper()
	c := fixture.New()
	if err := c.AddNode("n1", "pcie-l4", "", true); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, claim := range []struct{ name, node string }{{"share", "n1"}, {"whole", "n1"}} {
		cl := fixture.Share("ns", claim.name, "16Gi", 25)
		if claim.name == "whole" {
			cl = fixture.Whole("ns", claim.name, 1, false)
		}
		if _, err := c.Allocate(ctx, cl, claim.node); err != nil {
			t.Fatal(err)
		}
	}
	return c
}

func TestCollector(t *testing.T) {
	const header = ""
	tests := []struct {
		name     string
		pending  func(c *fixture.Cluster)
		stranded string
		cluster  string
	}{
		{
			name: "nothing pending: nothing stranded",
			stranded: `tangram_gpu_stranded_memory_bytes{device="gpu-0",node="n1"} 0
tangram_gpu_stranded_memory_bytes{device="gpu-1",node="n1"} 0
tangram_gpu_stranded_memory_bytes{device="gpu-2",node="n1"} 0
tangram_gpu_stranded_memory_bytes{device="gpu-3",node="n1"} 0
`,
			cluster: `tangram_cluster_fragmentation_ratio 0
tangram_cluster_free_memory_bytes 6.0129542144e+10
tangram_cluster_stranded_memory_bytes 0
tangram_pending_claims 0
`,
		},
		{
			name: "pending 12Gi shares cannot use the 8Gi left on gpu-0",
			pending: func(c *fixture.Cluster) {
				c.Pending(fixture.Share("ns", "wait", "12Gi", 0))
			},
			stranded: `tangram_gpu_stranded_memory_bytes{device="gpu-0",node="n1"} 8.589934592e+09
tangram_gpu_stranded_memory_bytes{device="gpu-1",node="n1"} 0
tangram_gpu_stranded_memory_bytes{device="gpu-2",node="n1"} 0
tangram_gpu_stranded_memory_bytes{device="gpu-3",node="n1"} 0
`,
			cluster: `tangram_cluster_fragmentation_ratio 0.14285714285714285
tangram_cluster_free_memory_bytes 6.0129542144e+10
tangram_cluster_stranded_memory_bytes 8.589934592e+09
tangram_pending_claims 1
`,
		},
		{
			name: "a pending 4Gi share fits gpu-0: nothing stranded",
			pending: func(c *fixture.Cluster) {
				c.Pending(fixture.Share("ns", "small", "4Gi", 0))
				c.Pending(fixture.Whole("ns", "big", 1, false))
			},
			stranded: `tangram_gpu_stranded_memory_bytes{device="gpu-0",node="n1"} 0
tangram_gpu_stranded_memory_bytes{device="gpu-1",node="n1"} 0
tangram_gpu_stranded_memory_bytes{device="gpu-2",node="n1"} 0
tangram_gpu_stranded_memory_bytes{device="gpu-3",node="n1"} 0
`,
			cluster: `tangram_cluster_fragmentation_ratio 0
tangram_cluster_free_memory_bytes 6.0129542144e+10
tangram_cluster_stranded_memory_bytes 0
tangram_pending_claims 2
`,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := l4Cluster(t)
			if tc.pending != nil {
				tc.pending(c)
			}
			col := &Collector{Source: staticSource{snap: &c.Snap}}
			if err := compare(t, col, header+tc.stranded, "tangram_gpu_stranded_memory_bytes"); err != nil {
				t.Error(err)
			}
			clusterHeader := ""
			if err := compare(t, col, clusterHeader+tc.cluster,
				"tangram_cluster_fragmentation_ratio", "tangram_cluster_free_memory_bytes", "tangram_cluster_stranded_memory_bytes", "tangram_pending_claims"); err != nil {
				t.Error(err)
			}
		})
	}
}

func TestCollectorCardGauges(t *testing.T) {
	c := l4Cluster(t)
	col := &Collector{Source: staticSource{snap: &c.Snap}}
	want := `
tangram_gpu_compute_allocated_percent{device="gpu-0",node="n1"} 25
tangram_gpu_compute_allocated_percent{device="gpu-1",node="n1"} 100
tangram_gpu_compute_allocated_percent{device="gpu-2",node="n1"} 0
tangram_gpu_compute_allocated_percent{device="gpu-3",node="n1"} 0
tangram_gpu_memory_allocated_bytes{device="gpu-0",node="n1"} 1.7179869184e+10
tangram_gpu_memory_allocated_bytes{device="gpu-1",node="n1"} 2.5769803776e+10
tangram_gpu_memory_allocated_bytes{device="gpu-2",node="n1"} 0
tangram_gpu_memory_allocated_bytes{device="gpu-3",node="n1"} 0
tangram_gpu_shares{device="gpu-0",node="n1"} 1
tangram_gpu_shares{device="gpu-1",node="n1"} 0
tangram_gpu_shares{device="gpu-2",node="n1"} 0
tangram_gpu_shares{device="gpu-3",node="n1"} 0
tangram_node_gpus_free{node="n1"} 2
tangram_node_gpus{node="n1"} 4
`
	if err := compare(t, col, want, "tangram_gpu_compute_allocated_percent",
		"tangram_gpu_memory_allocated_bytes", "tangram_gpu_shares", "tangram_node_gpus", "tangram_node_gpus_free"); err != nil {
		t.Error(err)
	}
	if n := strings.Count(gather(t, col), "\n"); n != 4*6+2+5 {
		t.Errorf("%d metrics, want %d", n, 4*6+2+5)
	}
}

func TestCollectorError(t *testing.T) {
	col := &Collector{Source: staticSource{err: errors.New("cache gone")}}
	want := `
tangram_allocation_scrape_error 1
`
	if err := compare(t, col, want); err != nil {
		t.Error(err)
	}
	// The collector registers cleanly (descriptors are consistent).
	if err := prometheus.NewPedanticRegistry().Register(&Collector{Source: staticSource{snap: &cluster.Snapshot{}}}); err != nil {
		t.Error(err)
	}
}

// gather renders the collector's metrics (all, or those named) as sorted
// "name{labels} value" lines.
func gather(t *testing.T, col prometheus.Collector, names ...string) string {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	if err := reg.Register(col); err != nil {
		t.Fatal(err)
	}
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	for _, f := range families {
		if len(names) > 0 && !slices.Contains(names, f.GetName()) {
			continue
		}
		for _, m := range f.GetMetric() {
			var labels []string
			for _, l := range m.GetLabel() {
				labels = append(labels, fmt.Sprintf("%s=%q", l.GetName(), l.GetValue()))
			}
			l := f.GetName()
			if len(labels) > 0 {
				l += "{" + strings.Join(labels, ",") + "}"
			}
			lines = append(lines, l+" "+strconv.FormatFloat(m.GetGauge().GetValue(), 'g', -1, 64))
		}
	}
	sort.Strings(lines)
	return strings.Join(lines, "\n") + "\n"
}

func compare(t *testing.T, col prometheus.Collector, want string, names ...string) error {
	t.Helper()
	want = strings.TrimLeft(want, "\n")
	if got := gather(t, col, names...); got != want {
		return fmt.Errorf("metrics\n got:\n%s\nwant:\n%s", got, want)
	}
	return nil
}
