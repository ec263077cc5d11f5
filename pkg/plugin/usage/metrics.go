package usage

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics serve the last round: per prepared device with a process, its
// memory used and whether it is over its share; per card, the processes
// no claim accounts for and their memory, the node's own and the
// ambiguous ones. A scrape sees one whole round (Publish swaps it under a
// lock), never a half-updated one. A node adds two series per prepared
// device in use and up to four per card: with 50 shares on 8 cards, 132;
// 132,000 for 1,000 such nodes, which one Prometheus holds. Claims made
// from templates carry generated names, so the device series come and go
// with the pods (docs/observability.md).
type Metrics struct {
	node string

	mu   sync.Mutex
	last Report
}

var (
	deviceLabels = []string{"node", "namespace", "claim", "device"}
	cardLabels   = []string{"node", "uuid"}

	usedDesc = prometheus.NewDesc("tangram_gpu_claim_memory_used_bytes",
		"GPU memory the processes of a prepared device's pods use on it, as NVML reports it (a lower bound where NVML gives no figure for a process).", deviceLabels, nil)
	overDesc = prometheus.NewDesc("tangram_gpu_claim_memory_over",
		"1 when a share's processes use more GPU memory than the share was given, 0 otherwise; only shares (a whole card or a MIG partition is held by the GPU).", deviceLabels, nil)
	straysDesc = prometheus.NewDesc("tangram_gpu_unaccounted_processes",
		"GPU processes on a card that no prepared claim accounts for: outside any pod, or in a pod that holds nothing of that card.", cardLabels, nil)
	strayBytesDesc = prometheus.NewDesc("tangram_gpu_unaccounted_memory_bytes",
		"GPU memory of the processes no prepared claim accounts for, as NVML reports it.", cardLabels, nil)
	nodeDesc = prometheus.NewDesc("tangram_gpu_node_processes",
		"GPU processes of the node's own daemons (the MPS control daemon and servers) on a card.", cardLabels, nil)
	ambiguousDesc = prometheus.NewDesc("tangram_gpu_ambiguous_processes",
		"GPU processes whose pod holds several devices of the card: each is counted on the first, as NVML does not say which one it serves.", cardLabels, nil)
)

// NewMetrics registers node's usage metrics in reg.
func NewMetrics(reg prometheus.Registerer, node string) (*Metrics, error) {
	m := &Metrics{node: node}
	if err := reg.Register(m); err != nil {
		return nil, err
	}
	return m, nil
}

// Publish makes r the round the metrics serve.
func (m *Metrics) Publish(r Report) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.last = r
}

// Describe implements prometheus.Collector.
func (m *Metrics) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{usedDesc, overDesc, straysDesc, strayBytesDesc, nodeDesc, ambiguousDesc} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (m *Metrics) Collect(ch chan<- prometheus.Metric) {
	m.mu.Lock()
	r := m.last
	m.mu.Unlock()
	for _, u := range r.Uses {
		over := 0.0
		if u.Over {
			over = 1
		}
		ch <- prometheus.MustNewConstMetric(usedDesc, prometheus.GaugeValue, float64(u.UsedBytes), m.node, u.Namespace, u.Name, u.Device.Device)
		ch <- prometheus.MustNewConstMetric(overDesc, prometheus.GaugeValue, over, m.node, u.Namespace, u.Name, u.Device.Device)
	}
	type perCard struct{ strays, strayBytes, node, ambiguous float64 }
	cards := map[string]*perCard{}
	var order []string
	card := func(uuid string) *perCard {
		c := cards[uuid]
		if c == nil {
			c = &perCard{}
			cards[uuid] = c
			order = append(order, uuid)
		}
		return c
	}
	for _, s := range r.Strays {
		c := card(s.Card)
		c.strays++
		if s.UsedBytes > 0 {
			c.strayBytes += float64(s.UsedBytes)
		}
	}
	for _, p := range r.Node {
		card(p.Card).node++
	}
	for _, p := range r.Ambiguous {
		card(p.Card).ambiguous++
	}
	for _, uuid := range order {
		c := cards[uuid]
		if c.strays > 0 {
			ch <- prometheus.MustNewConstMetric(straysDesc, prometheus.GaugeValue, c.strays, m.node, uuid)
			ch <- prometheus.MustNewConstMetric(strayBytesDesc, prometheus.GaugeValue, c.strayBytes, m.node, uuid)
		}
		if c.node > 0 {
			ch <- prometheus.MustNewConstMetric(nodeDesc, prometheus.GaugeValue, c.node, m.node, uuid)
		}
		if c.ambiguous > 0 {
			ch <- prometheus.MustNewConstMetric(ambiguousDesc, prometheus.GaugeValue, c.ambiguous, m.node, uuid)
		}
	}
}
