// Command tangram-sim replays a GPU cluster trace (Alibaba openb format)
// through a placement policy and the real DRA allocator, and reports the
// GPU allocation ratio. See docs/placement.md.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"

	"github.com/tangram-gpu/tangram/pkg/placement"
	"github.com/tangram-gpu/tangram/pkg/placement/sim"
	"github.com/tangram-gpu/tangram/pkg/trace"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "tangram-sim:", err)
		os.Exit(1)
	}
}

func run() error {
	nodesPath := flag.String("nodes", "", "node list CSV (sn,cpu_milli,memory_mib,gpu,model)")
	podsPath := flag.String("pods", "", "task list CSV (name,cpu_milli,memory_mib,num_gpu,gpu_milli[,gpu_spec])")
	policy := flag.String("policy", "tangram", "placement policy: "+strings.Join(placement.PolicyNames, ", "))
	seed := flag.Uint64("seed", 42, "shuffle and tie-break seed (the published runs use 42..51)")
	arrival := flag.Float64("arrival", 1.3, "GPU requested in total, as a multiple of the cluster's capacity")
	asJSON := flag.Bool("json", false, "print one JSON object instead of text")
	quiet := flag.Bool("quiet", false, "no progress on stderr")
	migVariant := flag.Bool("mig", false, "replay the trace's MIG variant: every card an H100 in MIG mode, every task of one card or less one MIG partition of the smallest profile with its GPU, multi-card tasks left out (docs/placement.md)")
	reportFailures := flag.Bool("report-failures", false, "also report the GPU tasks that failed after 100% arrival (by class) and the free GPU left at the end (by card free level)")
	flag.Parse()
	if *nodesPath == "" || *podsPath == "" {
		flag.Usage()
		return errors.New("--nodes and --pods are required")
	}
	nodes, err := trace.ReadNodes(*nodesPath)
	if err != nil {
		return err
	}
	tasks, err := trace.ReadTasks(*podsPath)
	if err != nil {
		return err
	}
	if *migVariant {
		nodes, tasks = sim.MIGVariant(nodes, tasks)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	cfg := sim.Config{Policy: *policy, Seed: *seed, Arrival: *arrival, ReportFailures: *reportFailures}
	if !*quiet {
		cfg.Progress = func(done, total int) {
			fmt.Fprintf(os.Stderr, "%s seed %d: %d/%d tasks\n", *policy, *seed, done, total)
		}
	}
	res, err := sim.Run(ctx, nodes, tasks, cfg)
	if err != nil {
		return err
	}
	if *asJSON {
		return json.NewEncoder(os.Stdout).Encode(res)
	}
	fmt.Printf("policy %s, seed %d, %d tasks\n", res.Policy, res.Seed, res.Tasks)
	fmt.Printf("GPU allocation ratio at 100%% arrival: %.2f%%\n", res.AllocationRatio100)
	fmt.Printf("GPU allocation ratio at %.0f%% arrival: %.2f%%\n", *arrival*100, res.AllocationRatio130)
	fmt.Printf("tasks failed: %d (%d with GPU)\n", res.TasksFailed, res.GPUTasksFailed)
	fmt.Printf("placement time per placed task: median %.3f ms, p99 %.3f ms\n", res.MedianPlaceMillis, res.P99PlaceMillis)
	fmt.Printf("model vs allocator: %d refused, %d disagreed\n", res.AllocatorRefused, res.ModelDisagreed)
	if *reportFailures {
		fmt.Println("GPU tasks failed after 100% arrival, by class:")
		for _, f := range res.Failures {
			fmt.Printf("  %-24s %6d tasks %9d milli-GPU\n", f.Class, f.Tasks, f.Milli)
		}
		fmt.Println("free GPU at the end, by card free level:")
		for _, l := range res.Leftover {
			fmt.Printf("  %4d..%4d milli free %6d cards %9d milli-GPU\n", l.FromMilli, l.FromMilli+49, l.Cards, l.Milli)
		}
	}
	return nil
}
