package usageview

import (
	"cmp"
	"fmt"
	"io"
	"math"
	"slices"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// Parse reads one kubelet plugin's /metrics (the Prometheus text format)
// into its node: the cards with their totals and names (the series'
// device label), sorted by UUID, and every device in use in OtherDevices (Build puts them on their
// cards). Series other than the usage ones are ignored. A plugin that has
// published no round (usage not watched, or its first round still to run)
// gives a node without ReadAt.
func Parse(r io.Reader) (Node, error) {
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(r)
	if err != nil {
		return Node{}, fmt.Errorf("reading the metrics: %w", err)
	}
	var n Node
	nodeOf := func(m *dto.Metric) error {
		name := label(m, "node")
		switch {
		case name == "":
			return fmt.Errorf("a usage series has no node label")
		case n.Name == "":
			n.Name = name
		case n.Name != name:
			return fmt.Errorf("usage series of two nodes, %q and %q, in one plugin's metrics", n.Name, name)
		}
		return nil
	}
	cards := map[string]*Card{}
	devices := map[[3]string]*Device{}
	for _, name := range Metrics {
		f := families[name]
		if f == nil {
			continue
		}
		for _, m := range f.GetMetric() {
			if err := nodeOf(m); err != nil {
				return Node{}, err
			}
			v := value(m)
			if math.IsNaN(v) || math.IsInf(v, 0) {
				return Node{}, fmt.Errorf("%s: value %v", name, v)
			}
			switch name {
			case MetricRound:
				sec, frac := math.Modf(v)
				at := time.Unix(int64(sec), int64(frac*1e9)).UTC().Truncate(time.Millisecond)
				n.ReadAt = &at
			case MetricCardUsed, MetricUnaccounted, MetricUnaccountedBytes, MetricNodeProcesses, MetricAmbiguous:
				uuid := label(m, "uuid")
				c := cards[uuid]
				if c == nil {
					c = &Card{UUID: uuid, Name: label(m, "device")}
					cards[uuid] = c
				}
				switch name {
				case MetricCardUsed:
					c.UsedBytes = int64(v)
				case MetricUnaccounted:
					c.UnaccountedProcesses = int(v)
				case MetricUnaccountedBytes:
					c.UnaccountedBytes = int64(v)
				case MetricNodeProcesses:
					c.NodeProcesses = int(v)
				case MetricAmbiguous:
					c.AmbiguousProcesses = int(v)
				}
			default:
				k := [3]string{label(m, "namespace"), label(m, "claim"), label(m, "device")}
				d := devices[k]
				if d == nil {
					d = &Device{Namespace: k[0], Claim: k[1], Device: k[2]}
					devices[k] = d
				}
				switch name {
				case MetricClaimUsed:
					d.UsedBytes = int64(v)
				case MetricClaimAllowed:
					d.Share, d.AllowedBytes = true, int64(v)
				case MetricClaimOver:
					d.Share, d.Over = true, v != 0
				case MetricClaimSM:
					sm := int(math.Round(v))
					d.SMPercent = &sm
				}
			}
		}
	}
	for _, c := range cards {
		n.Cards = append(n.Cards, *c)
	}
	slices.SortFunc(n.Cards, func(a, b Card) int { return cmp.Compare(a.UUID, b.UUID) })
	for _, d := range devices {
		n.OtherDevices = append(n.OtherDevices, *d)
	}
	slices.SortFunc(n.OtherDevices, busierFirst)
	return n, nil
}

func label(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

// value is a gauge's value, or an untyped one's (a proxy may strip the
// TYPE lines).
func value(m *dto.Metric) float64 {
	if g := m.GetGauge(); g != nil {
		return g.GetValue()
	}
	return m.GetUntyped().GetValue()
}
