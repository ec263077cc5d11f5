package usage

import (
	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are a round's gauges: per prepared device with a process, its
// memory used and whether it is over its share; per card, the processes
// no claim accounts for and their memory. Series are per device in use
// and per card, so a node adds at most its prepared devices and cards:
// 50 shares on each of 1,000 nodes is 100,000 series at most, which one
// Prometheus holds (docs/observability.md).
type Metrics struct {
	used, over           *prometheus.GaugeVec
	strays, strayBytes   *prometheus.GaugeVec
	nodeProcs, ambiguous *prometheus.GaugeVec
}

// NewMetrics registers the gauges in reg.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	device := []string{"node", "namespace", "claim", "device"}
	card := []string{"node", "uuid"}
	m := &Metrics{
		used: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "tangram_gpu_claim_memory_used_bytes",
			Help: "GPU memory the processes of a prepared device's pods use on it, as NVML reports it (a lower bound where NVML gives no figure for a process).",
		}, device),
		over: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "tangram_gpu_claim_memory_over",
			Help: "1 when a share's processes use more GPU memory than the share was given, 0 otherwise; only shares (a whole card or a MIG partition is held by the GPU).",
		}, device),
		strays: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "tangram_gpu_unaccounted_processes",
			Help: "GPU processes on a card that no prepared claim accounts for: outside any pod, or in a pod that holds nothing of that card.",
		}, card),
		strayBytes: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "tangram_gpu_unaccounted_memory_bytes",
			Help: "GPU memory of the processes no prepared claim accounts for, as NVML reports it.",
		}, card),
		nodeProcs: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "tangram_gpu_node_processes",
			Help: "GPU processes of the node's own daemons (the MPS control daemon and servers) on a card.",
		}, card),
		ambiguous: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "tangram_gpu_ambiguous_processes",
			Help: "GPU processes whose pod holds several devices of the card: each is counted on the first, as NVML does not say which one it serves.",
		}, card),
	}
	for _, c := range []prometheus.Collector{m.used, m.over, m.strays, m.strayBytes, m.nodeProcs, m.ambiguous} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// Publish replaces the gauges with round r of node: a device or card
// with nothing to say any more has no series.
func (m *Metrics) Publish(node string, r Report) {
	for _, v := range []*prometheus.GaugeVec{m.used, m.over, m.strays, m.strayBytes, m.nodeProcs, m.ambiguous} {
		v.Reset()
	}
	for _, u := range r.Uses {
		labels := prometheus.Labels{"node": node, "namespace": u.Namespace, "claim": u.Name, "device": u.Device.Device}
		m.used.With(labels).Set(float64(u.UsedBytes))
		over := 0.0
		if u.Over {
			over = 1
		}
		m.over.With(labels).Set(over)
	}
	for _, s := range r.Strays {
		labels := prometheus.Labels{"node": node, "uuid": s.Card}
		m.strays.With(labels).Inc()
		if s.UsedBytes > 0 {
			m.strayBytes.With(labels).Add(float64(s.UsedBytes))
		} else {
			m.strayBytes.With(labels).Add(0)
		}
	}
	for _, p := range r.Node {
		m.nodeProcs.With(prometheus.Labels{"node": node, "uuid": p.Card}).Inc()
	}
	for _, p := range r.Ambiguous {
		m.ambiguous.With(prometheus.Labels{"node": node, "uuid": p.Card}).Inc()
	}
}
