// Package metrics exports the cluster-wide GPU allocation picture as
// Prometheus gauges, computed at scrape time from the controller's
// informer caches (the pkg/cluster model), so every replica can answer.
package metrics

import (
	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/klog/v2"

	"github.com/tangram-gpu/tangram/pkg/cluster"
	"github.com/tangram-gpu/tangram/pkg/cluster/informer"
	"github.com/tangram-gpu/tangram/pkg/device"
)

const namespace = "tangram"

var (
	cardLabels = []string{"node", "device"}

	memCapacity   = desc("gpu_memory_capacity_bytes", "Memory of the GPU.", cardLabels)
	memAllocated  = desc("gpu_memory_allocated_bytes", "Memory of the GPU allocated to claims (all of it for a whole-card claim).", cardLabels)
	compCapacity  = desc("gpu_compute_capacity_percent", "Compute capacity of the GPU in percent (100).", cardLabels)
	compAllocated = desc("gpu_compute_allocated_percent", "Compute allocated to claims in percent (100 for a whole-card claim).", cardLabels)
	shares        = desc("gpu_shares", "Number of shares allocated on the GPU.", cardLabels)
	stranded      = desc("gpu_stranded_memory_bytes", "Free memory of the GPU that no pending request can use (fragmentation).", cardLabels)

	nodeCards     = desc("node_gpus", "GPUs the node publishes.", []string{"node"})
	nodeFreeCards = desc("node_gpus_free", "Whole GPUs of the node with nothing allocated.", []string{"node"})

	clusterFree      = desc("cluster_free_memory_bytes", "Unallocated GPU memory in the cluster.", nil)
	clusterStranded  = desc("cluster_stranded_memory_bytes", "Unallocated GPU memory that no pending request can use.", nil)
	clusterFragRatio = desc("cluster_fragmentation_ratio", "Stranded free GPU memory divided by all free GPU memory (0 when nothing is free or pending).", nil)
	pendingClaims    = desc("pending_claims", "Unallocated ResourceClaims asking for Tangram device classes.", nil)
	scrapeErrors     = desc("allocation_scrape_error", "1 when the allocation picture could not be read at this scrape.", nil)
)

func desc(name, help string, labels []string) *prometheus.Desc {
	return prometheus.NewDesc(prometheus.BuildFQName(namespace, "", name), help, labels, nil)
}

// Collector computes the allocation gauges at each scrape.
type Collector struct {
	Source informer.Source
	Logger klog.Logger
}

// Describe sends every descriptor.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{memCapacity, memAllocated, compCapacity, compAllocated, shares, stranded,
		nodeCards, nodeFreeCards, clusterFree, clusterStranded, clusterFragRatio, pendingClaims, scrapeErrors} {
		ch <- d
	}
}

// Collect reads the caches and emits the gauges.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	snap, err := c.Source.Snapshot()
	if err != nil {
		c.Logger.Error(err, "Reading the allocation picture for metrics")
		ch <- prometheus.MustNewConstMetric(scrapeErrors, prometheus.GaugeValue, 1)
		return
	}
	ch <- prometheus.MustNewConstMetric(scrapeErrors, prometheus.GaugeValue, 0)
	for _, m := range Compute(snap) {
		ch <- m
	}
}

// Compute turns a snapshot into metrics; pure, for tests. Devices are
// those of our driver on a node, in the inventory's order (by node, then
// device).
func Compute(snap *cluster.Snapshot) []prometheus.Metric {
	inv := cluster.NewInventory(snap)
	pending := PendingShapes(snap)
	gauge := func(d *prometheus.Desc, v float64, labels ...string) prometheus.Metric {
		return prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	var out []prometheus.Metric
	var free, strandedTotal int64
	type nodeTotals struct{ cards, free int }
	var nodes []string
	totals := map[string]*nodeTotals{}
	for _, ds := range inv.Devices {
		if ds.Driver != device.DriverName {
			continue
		}
		c := cardOf(ds)
		l := []string{ds.Node, ds.Device.Name}
		s := strandedMemory(c, pending)
		out = append(out,
			gauge(memCapacity, float64(c.memory), l...),
			gauge(memAllocated, float64(c.memoryUsed), l...),
			gauge(compCapacity, float64(c.compute), l...),
			gauge(compAllocated, float64(c.computeUsed), l...),
			gauge(shares, float64(ds.Shares()), l...),
			gauge(stranded, float64(s), l...),
		)
		free += freeMemory(c)
		strandedTotal += s
		t, ok := totals[ds.Node]
		if !ok {
			t = &nodeTotals{}
			totals[ds.Node] = t
			nodes = append(nodes, ds.Node)
		}
		t.cards++
		if c.use == cluster.Free {
			t.free++
		}
	}
	for _, n := range nodes {
		out = append(out, gauge(nodeCards, float64(totals[n].cards), n), gauge(nodeFreeCards, float64(totals[n].free), n))
	}
	ratio := 0.0
	if free > 0 {
		ratio = float64(strandedTotal) / float64(free)
	}
	out = append(out,
		gauge(clusterFree, float64(free)),
		gauge(clusterStranded, float64(strandedTotal)),
		gauge(clusterFragRatio, ratio),
		gauge(pendingClaims, float64(len(cluster.PendingClaims(snap)))),
	)
	return out
}
