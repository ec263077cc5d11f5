package metrics

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"k8s.io/klog/v2"

	tangramv1alpha1 "github.com/tangram-gpu/tangram/api/tangram/v1alpha1"
	"github.com/tangram-gpu/tangram/pkg/cluster/informer"
	"github.com/tangram-gpu/tangram/pkg/metricsregistry"
)

// NewRegistry is everything the controller's /metrics serves: the
// allocation gauges, the GpuGang gauges (when listGangs is not nil, i.e.
// the GpuGang controller runs), the leader gauge it returns for the caller
// to set, and the Go and process collectors.
func NewRegistry(source informer.Source, listGangs func() ([]*tangramv1alpha1.GpuGang, error), logger klog.Logger) (*metricsregistry.Registry, prometheus.Gauge) {
	leader := prometheus.NewGauge(prometheus.GaugeOpts{Name: "tangram_controller_leader",
		Help: "1 while this replica holds the leader Lease (or runs without leader election)."})
	registry := metricsregistry.New()
	registry.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		&Collector{Source: source, Logger: logger}, leader)
	if listGangs != nil {
		registry.MustRegister(&GangCollector{List: listGangs, Logger: logger})
	}
	return registry, leader
}
