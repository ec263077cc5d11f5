// Command bench-placement replays the openb traces with every placement
// policy and seed, and writes a Markdown table of the GPU allocation ratio
// and a PNG plot of the ratio against arrival. `make bench-placement` runs it.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"time"

	"github.com/tangram-gpu/tangram/pkg/placement"
	"github.com/tangram-gpu/tangram/pkg/placement/sim"
	"github.com/tangram-gpu/tangram/pkg/trace"
)

// lists are the task lists of the published table, by column name.
var lists = []string{"default", "gpushare100", "multigpu50"}

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "bench-placement:", err)
		os.Exit(1)
	}
}

type job struct {
	list   string
	policy string
	seed   uint64
}

func run() error {
	traces := flag.String("traces", "../shared/traces/openb", "directory with openb_node_list_gpu_node.csv and openb_pod_list_<list>.csv")
	markdown := flag.String("markdown", "docs/placement-results.md", "where to write the results table")
	plotPath := flag.String("plot", "docs/placement-results.png", "where to write the plot (PNG)")
	rawPath := flag.String("json", "", "optional: write every run's result as JSON lines here")
	seeds := flag.Int("seeds", 10, "number of seeds, from 42")
	policies := flag.String("policies", strings.Join(placement.PolicyNames, ","), "comma-separated policies")
	parallel := flag.Int("parallel", min(runtime.NumCPU(), 2), "replays at once")
	flag.Parse()

	nodes, err := trace.ReadNodes(filepath.Join(*traces, "openb_node_list_gpu_node.csv"))
	if err != nil {
		return err
	}
	tasks := map[string][]trace.Task{}
	for _, l := range lists {
		if tasks[l], err = trace.ReadTasks(filepath.Join(*traces, "openb_pod_list_"+l+".csv")); err != nil {
			return err
		}
	}
	var jobs []job
	for _, l := range lists {
		for _, p := range strings.Split(*policies, ",") {
			for s := 0; s < *seeds; s++ {
				jobs = append(jobs, job{list: l, policy: p, seed: uint64(42 + s)})
			}
		}
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	start := time.Now()
	results := make([]*sim.Result, len(jobs))
	errs := make([]error, len(jobs))
	next := make(chan int)
	var wg sync.WaitGroup
	var mu sync.Mutex
	done := 0
	for w := 0; w < max(*parallel, 1); w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				j := jobs[i]
				results[i], errs[i] = sim.Run(ctx, nodes, tasks[j.list], sim.Config{Policy: j.policy, Seed: j.seed, Arrival: 1.3})
				mu.Lock()
				done++
				if errs[i] == nil {
					fmt.Fprintf(os.Stderr, "[%3d/%d %5.0fs] %-11s %-14s seed %d: %.2f%% at 130%%, median %.2f ms\n",
						done, len(jobs), time.Since(start).Seconds(), j.list, j.policy, j.seed, results[i].AllocationRatio130, results[i].MedianPlaceMillis)
				}
				mu.Unlock()
			}
		}()
	}
	for i := range jobs {
		next <- i
	}
	close(next)
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			return fmt.Errorf("%s/%s/seed %d: %w", jobs[i].list, jobs[i].policy, jobs[i].seed, err)
		}
	}
	elapsed := time.Since(start)

	if *rawPath != "" {
		if err := writeRaw(*rawPath, jobs, results); err != nil {
			return err
		}
	}
	sum := summarize(jobs, results)
	if err := os.WriteFile(*markdown, []byte(renderMarkdown(sum, len(nodes), *seeds, *parallel, elapsed)), 0o644); err != nil {
		return fmt.Errorf("writing the table: %w", err)
	}
	if err := writePlot(*plotPath, sum); err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "wrote %s and %s in %s\n", *markdown, *plotPath, elapsed.Round(time.Second))
	return nil
}

func writeRaw(path string, jobs []job, results []*sim.Result) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("writing raw results: %w", err)
	}
	defer f.Close()
	enc := json.NewEncoder(f)
	for i, r := range results {
		if err := enc.Encode(struct {
			List string `json:"list"`
			*sim.Result
		}{jobs[i].list, r}); err != nil {
			return fmt.Errorf("writing raw results: %w", err)
		}
	}
	return nil
}
