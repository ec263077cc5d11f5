package metrics

import (
	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/klog/v2"

	tangramv1alpha1 "github.com/tangram-gpu/tangram/api/tangram/v1alpha1"
)

var (
	gangsByPhase = desc("gpugangs", "GpuGangs by phase (a gang the controller has not reconciled yet counts as Pending).", []string{"phase"})
	gangMembers  = desc("gpugang_members", "Members of GpuGangs in the cluster: wanted by their specs, placed on a node, running.", []string{"state"})
	gangErrors   = desc("gpugang_scrape_error", "1 when the GpuGangs could not be listed at this scrape.", nil)
)

// gangPhases are reported at every scrape, with zero counts too, so a
// dashboard shows "0 failed" rather than no data.
var gangPhases = []tangramv1alpha1.GangPhase{
	tangramv1alpha1.GangPending, tangramv1alpha1.GangScheduled, tangramv1alpha1.GangRunning, tangramv1alpha1.GangFailed,
}

// GangCollector reports how many GpuGangs are in each phase and how many
// of their members are placed and running.
type GangCollector struct {
	// List returns the GpuGangs of the controller's cache.
	List   func() ([]*tangramv1alpha1.GpuGang, error)
	Logger klog.Logger
}

// Describe sends every descriptor.
func (c *GangCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- gangsByPhase
	ch <- gangMembers
	ch <- gangErrors
}

// Collect lists the gangs and emits the gauges.
func (c *GangCollector) Collect(ch chan<- prometheus.Metric) {
	gangs, err := c.List()
	if err != nil {
		c.Logger.Error(err, "Listing GpuGangs for metrics")
		ch <- prometheus.MustNewConstMetric(gangErrors, prometheus.GaugeValue, 1)
		return
	}
	ch <- prometheus.MustNewConstMetric(gangErrors, prometheus.GaugeValue, 0)
	for _, m := range ComputeGangs(gangs) {
		ch <- m
	}
}

// ComputeGangs turns GpuGangs into metrics; pure, for tests.
func ComputeGangs(gangs []*tangramv1alpha1.GpuGang) []prometheus.Metric {
	byPhase := map[tangramv1alpha1.GangPhase]int{}
	var wanted, placed, running int32
	for _, g := range gangs {
		phase := g.Status.Phase
		if phase == "" {
			phase = tangramv1alpha1.GangPending
		}
		byPhase[phase]++
		wanted += g.Spec.Members.Count
		placed += g.Status.Placed
		running += g.Status.Running
	}
	out := make([]prometheus.Metric, 0, len(gangPhases)+3)
	for _, p := range gangPhases {
		out = append(out, prometheus.MustNewConstMetric(gangsByPhase, prometheus.GaugeValue, float64(byPhase[p]), string(p)))
	}
	for _, s := range []struct {
		state string
		n     int32
	}{{"wanted", wanted}, {"placed", placed}, {"running", running}} {
		out = append(out, prometheus.MustNewConstMetric(gangMembers, prometheus.GaugeValue, float64(s.n), s.state))
	}
	return out
}
