// Command bench-scheduler measures scheduling throughput of the stock
// kube-scheduler 1.37 and of tangram-scheduler side by side on a real API
// server and etcd of its own (ports and data directory apart from the local
// cluster's, so it needs no cluster lock): N API-only nodes publish fake
// DGX H100 and openb-shaped ResourceSlices, then M pods with pre-created
// claims (about 70% shares of 10-40 GiB, 30% of 1-8 whole cards) are
// scheduled by one scheduler at a time, each run from a fresh etcd so both
// start from identical state. No kubelet runs: pods only need binding.
// See docs/placement.md ("Scheduler throughput").
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"k8s.io/klog/v2"
)

func main() {
	var cfg config
	var nodes string
	flag.StringVar(&nodes, "nodes", "100,1213", "node counts to measure, comma-separated")
	flag.IntVar(&cfg.pods, "pods", 2000, "pods per run")
	flag.IntVar(&cfg.runs, "runs", 3, "runs per scheduler and node count (the median is reported)")
	flag.StringVar(&cfg.kubeBin, "kube-bin", "", "directory with kube-apiserver and kube-scheduler 1.37")
	flag.StringVar(&cfg.etcd, "etcd", "", "etcd binary")
	flag.StringVar(&cfg.tangram, "tangram-scheduler", "", "tangram-scheduler binary")
	flag.StringVar(&cfg.traces, "traces", "", "directory with openb_node_list_gpu_node.csv (the openb-shaped nodes)")
	flag.StringVar(&cfg.workDir, "work-dir", "", "directory for etcd data, certificates and logs (emptied per run)")
	flag.StringVar(&cfg.policy, "policy", "tangram", "TangramPacking policy")
	flag.DurationVar(&cfg.timeout, "timeout", 15*time.Minute, "longest one scheduler may take for the pods of a run")
	flag.Uint64Var(&cfg.seed, "seed", 42, "seed of the pod mix")
	flag.Parse()
	for _, s := range strings.Split(nodes, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < 2 {
			fmt.Fprintf(os.Stderr, "--nodes %q: want node counts of at least 2, comma-separated\n", nodes)
			os.Exit(2)
		}
		cfg.nodeCounts = append(cfg.nodeCounts, n)
	}
	for name, path := range map[string]string{"--kube-bin": cfg.kubeBin, "--etcd": cfg.etcd, "--tangram-scheduler": cfg.tangram,
		"--traces": cfg.traces, "--work-dir": cfg.workDir} {
		if path == "" {
			fmt.Fprintf(os.Stderr, "%s is required (make bench-scheduler sets every flag)\n", name)
			os.Exit(2)
		}
	}
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()
	if err := run(ctx, cfg); err != nil {
		klog.FromContext(ctx).Error(err, "bench-scheduler failed")
		os.Exit(1)
	}
}

type config struct {
	nodeCounts                              []int
	pods, runs                              int
	kubeBin, etcd, tangram, traces, workDir string
	policy                                  string
	timeout                                 time.Duration
	seed                                    uint64
}

// schedulers are measured in this order in every run.
var schedulers = []string{"stock", "tangram"}

func run(ctx context.Context, cfg config) error {
	var ratioAtLargest float64
	largest := 0
	var rows []string
	for _, n := range cfg.nodeCounts {
		results := map[string][]result{}
		for r := range cfg.runs {
			for _, sched := range schedulers {
				res, err := measure(ctx, cfg, n, sched)
				if err != nil {
					return fmt.Errorf("%d nodes, run %d, %s: %w", n, r+1, sched, err)
				}
				fmt.Printf("nodes=%d run=%d scheduler=%s: %s\n", n, r+1, sched, res)
				results[sched] = append(results[sched], res)
			}
		}
		stock, tangram := median(results["stock"]), median(results["tangram"])
		ratio := tangram.podsPerSecond / stock.podsPerSecond
		rows = append(rows, fmt.Sprintf("| %d | %d | %.1f | %.1f | %.2f | %d / %.1f%% | %d / %.1f%% |", n, cfg.pods,
			stock.podsPerSecond, tangram.podsPerSecond, ratio,
			stock.bound, stock.gpuAllocation*100, tangram.bound, tangram.gpuAllocation*100))
		if n >= largest {
			largest, ratioAtLargest = n, ratio
		}
	}
	fmt.Printf("\nmedian of %d runs each (pods/s: pods settled, i.e. bound or found unschedulable, per second from the first to the last)\n\n", cfg.runs)
	fmt.Println("| nodes | pods | stock pods/s | tangram pods/s | ratio | stock bound / GPU allocated | tangram bound / GPU allocated |")
	fmt.Println("|---|---|---|---|---|---|---|")
	for _, r := range rows {
		fmt.Println(r)
	}
	fmt.Printf("\nthroughput ratio tangram/stock at %d nodes: %.2f\n", largest, ratioAtLargest)
	return nil
}

// result is one scheduler's run.
type result struct {
	podsPerSecond float64
	settled       int
	bound         int
	// gpuAllocation is the GPU handed out at the end over the capacity.
	gpuAllocation float64
	elapsed       time.Duration
	// example is why one pod was not bound.
	example string
}

func (r result) String() string {
	s := fmt.Sprintf("%.1f pods/s (%d settled in %s), %d bound, GPU allocated %.1f%%",
		r.podsPerSecond, r.settled, r.elapsed.Round(time.Millisecond), r.bound, r.gpuAllocation*100)
	if r.example != "" {
		s += "; not bound, e.g. " + r.example
	}
	return s
}

// median is the run with the median throughput.
func median(rs []result) result {
	sorted := append([]result(nil), rs...)
	sort.Slice(sorted, func(a, b int) bool { return sorted[a].podsPerSecond < sorted[b].podsPerSecond })
	return sorted[len(sorted)/2]
}

// measure runs one scheduler over a fresh control plane.
func measure(ctx context.Context, cfg config, nodes int, sched string) (result, error) {
	dir := filepath.Join(cfg.workDir, fmt.Sprintf("n%d-%s", nodes, sched))
	if err := os.RemoveAll(dir); err != nil {
		return result{}, fmt.Errorf("emptying %s: %w", dir, err)
	}
	cp, err := startControlPlane(ctx, cfg, dir)
	if err != nil {
		return result{}, err
	}
	defer cp.stop()
	c, err := cp.client()
	if err != nil {
		return result{}, err
	}
	objects, err := buildObjects(cfg.traces, nodes, cfg.pods, cfg.seed)
	if err != nil {
		return result{}, err
	}
	if err := objects.create(ctx, c); err != nil {
		return result{}, err
	}
	s, err := cp.startScheduler(ctx, cfg, sched)
	if err != nil {
		return result{}, err
	}
	res, err := watchScheduling(ctx, c, cfg.pods, cfg.timeout)
	s.stop()
	if err != nil {
		return result{}, fmt.Errorf("%w (scheduler log: %s)", err, s.logPath)
	}
	if res.gpuAllocation, err = gpuAllocation(ctx, c); err != nil {
		return result{}, err
	}
	return res, nil
}
