package schedperf

import (
	"fmt"
	"math"
	"sort"
	"strings"
	"time"
)

// Table is the benchmark's report: one row per workload with the medians
// of runs, each run's figures, upstream's threshold, and as its last line
// the worst tangram/stock ratio. results maps a workload's ID to
// "stock"/"tangram" to pods/s per run.
func Table(workloads []Workload, results map[string]map[string][]float64, runs int, took time.Duration) string {
	var b strings.Builder
	fmt.Fprintf(&b, "\nscheduler_perf v1.37.0, SchedulingThroughput average (pods/s), median of %d runs per cell; took %s\n\n", runs, took.Round(time.Second))
	b.WriteString("| workload | nodes | stock pods/s | tangram pods/s | ratio | paired ratio | upstream threshold | stock runs | tangram runs | paired ratios |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|---|---|\n")
	worst, worstID := math.Inf(1), ""
	worstPaired, worstPairedID := math.Inf(1), ""
	for _, w := range workloads {
		r := results[w.ID()]
		s, t := median(r["stock"]), median(r["tangram"])
		ratio := math.NaN()
		if s > 0 {
			ratio = t / s
		}
		if !math.IsNaN(ratio) && ratio < worst {
			worst, worstID = ratio, w.ID()
		}
		paired := PairedRatios(r["stock"], r["tangram"])
		pairedMedian := math.NaN()
		if len(paired) > 0 {
			pairedMedian = median(paired)
			if pairedMedian < worstPaired {
				worstPaired, worstPairedID = pairedMedian, w.ID()
			}
		}
		threshold := "–"
		if w.Threshold > 0 {
			threshold = fmt.Sprintf("%g", w.Threshold)
		}
		fmt.Fprintf(&b, "| %s | %d | %.1f | %.1f | %.2f | %.2f | %s | %s | %s | %s |\n", w.ID(), w.Nodes, s, t, ratio, pairedMedian, threshold,
			runsText(r["stock"]), runsText(r["tangram"]), ratiosText(paired))
	}
	fmt.Fprintf(&b, "\nworst median paired ratio tangram/stock: %.2f at %s\nworst ratio at %s\nworst throughput ratio tangram/stock: %.2f\n", worstPaired, worstPairedID, worstID, worst)
	return b.String()
}

func runsText(v []float64) string {
	parts := make([]string, len(v))
	for i, x := range v {
		parts[i] = fmt.Sprintf("%.1f", x)
	}
	return strings.Join(parts, ", ")
}

// PairedRatios are tangram/stock per round: the two runs of round i ran
// back to back (BenchmarkPerfScheduling alternates which goes first), or
// at the same time in simultaneous mode, so
// load that drifts over the minutes of a whole benchmark on a shared
// machine cancels in their ratio, where it does not in the ratio of two
// medians taken over all rounds. A round whose stock run scheduled
// nothing has no ratio.
func PairedRatios(stock, tangram []float64) []float64 {
	var out []float64
	for i := range min(len(stock), len(tangram)) {
		if stock[i] > 0 {
			out = append(out, tangram[i]/stock[i])
		}
	}
	return out
}

func ratiosText(v []float64) string {
	parts := make([]string, len(v))
	for i, x := range v {
		parts[i] = fmt.Sprintf("%.2f", x)
	}
	return strings.Join(parts, ", ")
}

// median of v (0 for none), v left unsorted.
func median(v []float64) float64 {
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	if len(s) == 0 {
		return 0
	}
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}
