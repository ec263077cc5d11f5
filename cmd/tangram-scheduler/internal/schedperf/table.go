package schedperf

import (
	"fmt"
	"math"
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
	b.WriteString("| workload | nodes | stock pods/s | tangram pods/s | ratio | upstream threshold | stock runs | tangram runs |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|\n")
	worst, worstID := math.Inf(1), ""
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
		threshold := "–"
		if w.Threshold > 0 {
			threshold = fmt.Sprintf("%g", w.Threshold)
		}
		fmt.Fprintf(&b, "| %s | %d | %.1f | %.1f | %.2f | %s | %s | %s |\n", w.ID(), w.Nodes, s, t, ratio, threshold, runsText(r["stock"]), runsText(r["tangram"]))
	}
	fmt.Fprintf(&b, "\nworst ratio at %s\nworst throughput ratio tangram/stock: %.2f\n", worstID, worst)
	return b.String()
}

func runsText(v []float64) string {
	parts := make([]string, len(v))
	for i, x := range v {
		parts[i] = fmt.Sprintf("%.1f", x)
	}
	return strings.Join(parts, ", ")
}
