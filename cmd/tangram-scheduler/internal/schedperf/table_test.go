package schedperf

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestPairedRatios(t *testing.T) {
	for _, tc := range []struct {
		name           string
		stock, tangram []float64
		want           []float64
	}{
		{"round by round", []float64{10, 20, 40}, []float64{9, 22, 20}, []float64{0.9, 1.1, 0.5}},
		{"a stock run that scheduled nothing has no ratio", []float64{0, 20}, []float64{5, 10}, []float64{0.5}},
		{"an unfinished round is left out", []float64{10, 20}, []float64{10}, []float64{1}},
		{"none", nil, nil, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, PairedRatios(tc.stock, tc.tangram)); diff != "" {
				t.Errorf("PairedRatios(%v, %v) (-want +got):\n%s", tc.stock, tc.tangram, diff)
			}
		})
	}
}

// TestTableReportsPairedAndMedianRatios: the table gives the ratio of the
// medians and the median of the per-round ratios (they differ when the runs
// of one profile are spread by load) and keeps the last line.
func TestTableReportsPairedAndMedianRatios(t *testing.T) {
	w := []Workload{{Case: "TangramSlices", Name: "share_500nodes", Nodes: 500}}
	results := map[string]map[string][]float64{w[0].ID(): {
		"stock":   {20, 10, 40},
		"tangram": {10, 20, 36},
	}}
	out := Table(w, results, 3, time.Minute)
	for _, want := range []string{
		"| TangramSlices/share_500nodes | 500 | 20.0 | 20.0 | 1.00 | 0.90 |",
		"| 0.50, 2.00, 0.90 |",
		"worst median paired ratio tangram/stock: 0.90 at TangramSlices/share_500nodes",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if last := lines[len(lines)-1]; last != "worst throughput ratio tangram/stock: 1.00" {
		t.Errorf("last line = %q, want the issue's worst throughput ratio line", last)
	}
}
