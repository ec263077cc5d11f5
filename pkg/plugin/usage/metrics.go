package usage

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics serve the last round: per prepared device with a process, its
// memory used, for a share what it was given and whether it uses more; per
// card, the memory its processes use, the processes no claim accounts for
// and their memory, the node's own and the ambiguous ones. A scrape sees
// one whole round (Publish swaps it under a lock), never a half-updated
// one. A node adds four series per share in use (two or three per whole
// card or partition: SM utilisation where NVML gives it) and five per
// card, always there (0 when nothing runs): with 50 shares on 8 cards, 241
// with the round's timestamp; 241,000 for 1,000 such nodes, which one
// Prometheus holds. Claims made from templates carry
// generated names, so the device series come and go with the pods
// (docs/observability.md).
type Metrics struct {
	node  string
	cards []Card

	mu   sync.Mutex
	last Report
	at   time.Time
}

var (
	deviceLabels = []string{"node", "namespace", "claim", "device"}
	// device names a card as its ResourceSlice device (gpu-0), as the
	// allocation metrics do, so that a panel sets use beside allocation.
	cardLabels = []string{"node", "device", "uuid"}

	usedDesc = prometheus.NewDesc("tangram_gpu_claim_memory_used_bytes",
		"GPU memory the processes of a prepared device's pods use on it, as NVML reports it (a lower bound where NVML gives no figure for a process).", deviceLabels, nil)
	allowedDesc = prometheus.NewDesc("tangram_gpu_claim_memory_allowed_bytes",
		"GPU memory a share in use was given (its request, which is its limit); only shares.", deviceLabels, nil)
	smDesc = prometheus.NewDesc("tangram_gpu_claim_sm_utilization_percent",
		"Part of the card's streaming multiprocessors a prepared device's processes kept busy since the previous round, NVML's samples of each process averaged; absent where NVML does not give it (MIG mode, cards without it, an MPS client it did not sample).", deviceLabels, nil)
	overDesc = prometheus.NewDesc("tangram_gpu_claim_memory_over",
		"1 when a share's processes use more GPU memory than the share was given, 0 otherwise; only shares (a whole card or a MIG partition is held by the GPU).", deviceLabels, nil)
	cardUsedDesc = prometheus.NewDesc("tangram_gpu_card_memory_used_bytes",
		"GPU memory all processes on a card use, as NVML reports it (claims', unaccounted and the node's own).", cardLabels, nil)
	straysDesc = prometheus.NewDesc("tangram_gpu_unaccounted_processes",
		"GPU processes on a card that no prepared claim accounts for: outside any pod, or in a pod that holds nothing of that card.", cardLabels, nil)
	strayBytesDesc = prometheus.NewDesc("tangram_gpu_unaccounted_memory_bytes",
		"GPU memory of the processes no prepared claim accounts for, as NVML reports it.", cardLabels, nil)
	nodeDesc = prometheus.NewDesc("tangram_gpu_node_processes",
		"GPU processes of the node's own daemons (the MPS control daemon and servers) on a card.", cardLabels, nil)
	ambiguousDesc = prometheus.NewDesc("tangram_gpu_ambiguous_processes",
		"GPU processes whose pod holds several devices of the card: each is counted on the first, as NVML does not say which one it serves.", cardLabels, nil)
	roundDesc = prometheus.NewDesc("tangram_gpu_usage_round_timestamp_seconds",
		"When the GPU usage the other tangram_gpu_* usage series show was read (Unix time); absent before the first round.", []string{"node"}, nil)
)

// Card is one of the node's cards as the metrics name it.
type Card struct {
	UUID string
	// Device is its ResourceSlice device name.
	Device string
}

// NewMetrics registers node's usage metrics in reg.
func NewMetrics(reg prometheus.Registerer, node string, cards []Card) (*Metrics, error) {
	m := &Metrics{node: node, cards: cards}
	if err := reg.Register(m); err != nil {
		return nil, err
	}
	return m, nil
}

// Publish makes r the round the metrics serve.
func (m *Metrics) Publish(_ context.Context, r Report) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.last, m.at = r, time.Now()
}

// Describe implements prometheus.Collector.
func (m *Metrics) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{usedDesc, smDesc, allowedDesc, overDesc, cardUsedDesc, straysDesc, strayBytesDesc, nodeDesc, ambiguousDesc, roundDesc} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (m *Metrics) Collect(ch chan<- prometheus.Metric) {
	m.mu.Lock()
	r, at := m.last, m.at
	m.mu.Unlock()
	if at.IsZero() {
		return
	}
	ch <- prometheus.MustNewConstMetric(roundDesc, prometheus.GaugeValue, float64(at.UnixMilli())/1000, m.node)
	type perCard struct{ used, strays, strayBytes, node, ambiguous float64 }
	cards := map[string]*perCard{}
	order := slices.Clone(m.cards)
	card := func(uuid string) *perCard {
		c := cards[uuid]
		if c == nil {
			c = &perCard{}
			cards[uuid] = c
			if !slices.ContainsFunc(order, func(c Card) bool { return c.UUID == uuid }) {
				order = append(order, Card{UUID: uuid})
			}
		}
		return c
	}
	for _, c := range m.cards {
		card(c.UUID)
	}
	known := func(n int64) float64 { return float64(max(n, 0)) }
	for _, u := range r.Uses {
		labels := []string{m.node, u.Namespace, u.Name, u.Device.Device}
		ch <- prometheus.MustNewConstMetric(usedDesc, prometheus.GaugeValue, float64(u.UsedBytes), labels...)
		if u.SMKnown {
			ch <- prometheus.MustNewConstMetric(smDesc, prometheus.GaugeValue, float64(u.SMPercent), labels...)
		}
		if isShare(u.Device) {
			over := 0.0
			if u.Over {
				over = 1
			}
			ch <- prometheus.MustNewConstMetric(allowedDesc, prometheus.GaugeValue, float64(u.AllowedBytes), labels...)
			ch <- prometheus.MustNewConstMetric(overDesc, prometheus.GaugeValue, over, labels...)
		}
		card(u.Device.GPUUUID).used += float64(u.UsedBytes)
	}
	for _, s := range r.Strays {
		c := card(s.Card)
		c.strays++
		c.strayBytes += known(s.UsedBytes)
		c.used += known(s.UsedBytes)
	}
	for _, p := range r.Node {
		c := card(p.Card)
		c.node++
		c.used += known(p.UsedBytes)
	}
	for _, p := range r.Ambiguous {
		card(p.Card).ambiguous++
	}
	for _, o := range order {
		c, labels := cards[o.UUID], []string{m.node, o.Device, o.UUID}
		ch <- prometheus.MustNewConstMetric(cardUsedDesc, prometheus.GaugeValue, c.used, labels...)
		ch <- prometheus.MustNewConstMetric(straysDesc, prometheus.GaugeValue, c.strays, labels...)
		ch <- prometheus.MustNewConstMetric(strayBytesDesc, prometheus.GaugeValue, c.strayBytes, labels...)
		ch <- prometheus.MustNewConstMetric(nodeDesc, prometheus.GaugeValue, c.node, labels...)
		ch <- prometheus.MustNewConstMetric(ambiguousDesc, prometheus.GaugeValue, c.ambiguous, labels...)
	}
}
