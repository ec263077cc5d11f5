package schedperf

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/dynamic-resource-allocation/structured"
	fwk "k8s.io/kube-scheduler/framework"
	frameworkruntime "k8s.io/kubernetes/pkg/scheduler/framework/runtime"
	perf "k8s.io/kubernetes/test/integration/scheduler_perf"

	"github.com/tangram-gpu/tangram/cmd/tangram-scheduler/internal/packing"
	"github.com/tangram-gpu/tangram/cmd/tangram-scheduler/internal/preempt"
)

func TestMain(m *testing.M) {
	if err := perf.InitTests(); err != nil {
		fmt.Fprintf(os.Stderr, "%v\n", err)
		os.Exit(1)
	}
	os.Exit(m.Run())
}

// Defaults of make bench-scheduler-perf; the environment variables of
// the same names (TANGRAM_PERF_*) replace them.
var (
	// The defaults fit make bench-scheduler-perf's 30 minutes on the 2-core
	// machine with 3 runs (docs/placement.md); upstream's costlier
	// workloads (5000pods_500nodes, half_500nodes, full_500nodes, ...) run
	// when named.
	defaultUpstream = []string{
		"SchedulingWithResourceClaimTemplate/half_100nodes",
		"SchedulingWithResourceClaimTemplate/empty_500nodes",
		"SchedulingWithResourceClaimTemplate/match_empty_500nodes",
		"ConsumableCapacity/empty_500nodes",
	}
	defaultTangram = []string{
		"share_100nodes",
		"share_500nodes", "whole_500nodes",
		"share_1213nodes",
		"nvlink2_500nodes", "nvlink4_500nodes",
	}
	upstreamFiles = []string{
		"test/integration/scheduler_perf/dra/performance-config.yaml",
		"test/integration/scheduler_perf/dra/consumablecapacity/performance-config.yaml",
	}
)

func envList(name string, def []string) []string {
	v, ok := os.LookupEnv(name)
	if !ok {
		return def
	}
	if v == "none" {
		return nil
	}
	var out []string
	for _, s := range strings.Split(v, ",") {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out
}

func k8sModuleDir(b *testing.B) string {
	if dir := os.Getenv("TANGRAM_K8S_DIR"); dir != "" {
		return dir
	}
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "k8s.io/kubernetes").Output()
	if err != nil {
		b.Fatalf("finding k8s.io/kubernetes in the module cache (set TANGRAM_K8S_DIR): %v", err)
	}
	return strings.TrimSpace(string(out))
}

// BenchmarkPerfScheduling runs every selected workload RUNS times with the
// stock profile and with tangram-scheduler's, alternating which goes first,
// and prints the medians. Run it with -benchtime=1x (make
// bench-scheduler-perf); etcd must be on PATH.
//
// Environment: TANGRAM_PERF_UPSTREAM (case/workload IDs of upstream's
// files), TANGRAM_PERF_TANGRAM (<kind>_<n>nodes), TANGRAM_PERF_RUNS (3),
// TANGRAM_PERF_DURATION (steady-state duration of the Tangram workloads,
// 10s as upstream's), TANGRAM_PERF_OPENB_NODES (the openb node list),
// TANGRAM_PERF_OUT (a directory for the harness's JSON and the table).
func BenchmarkPerfScheduling(b *testing.B) {
	runs := 3
	if v := os.Getenv("TANGRAM_PERF_RUNS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			b.Fatalf("TANGRAM_PERF_RUNS=%q: want a positive number", v)
		}
		runs = n
	}
	duration := "10s"
	if v := os.Getenv("TANGRAM_PERF_DURATION"); v != "" {
		duration = v
	}
	out := os.Getenv("TANGRAM_PERF_OUT")
	if out == "" {
		out = b.TempDir()
	}
	dataDir := filepath.Join(out, "data-items")
	tmplDir := filepath.Join(out, "templates")
	for _, d := range []string{dataDir, tmplDir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			b.Fatal(err)
		}
	}
	openb := os.Getenv("TANGRAM_PERF_OPENB_NODES")
	if openb == "" {
		openb = "../../../../../shared/traces/openb/openb_node_list_gpu_node.csv"
	}

	workloads, err := UpstreamWorkloads(k8sModuleDir(b), upstreamFiles, envList("TANGRAM_PERF_UPSTREAM", defaultUpstream))
	if err != nil {
		b.Fatal(err)
	}
	tangram, err := TangramWorkloads(tmplDir, openb, envList("TANGRAM_PERF_TANGRAM", defaultTangram), duration)
	if err != nil {
		b.Fatal(err)
	}
	workloads = append(workloads, tangram...)
	if len(workloads) == 0 {
		b.Fatal("no workload selected (TANGRAM_PERF_UPSTREAM and TANGRAM_PERF_TANGRAM are both empty)")
	}
	schedConfig, err := WriteSchedulerConfig(out, "tangram", 5)
	if err != nil {
		b.Fatal(err)
	}

	// As upstream's BenchmarkPerfScheduling (topic "dra"): the allocator
	// its thresholds are for.
	structured.EnableAllocators("incubating")
	defer structured.EnableAllocators()
	perf.PerfSchedulingLabelFilter = BenchLabel
	// Per-plugin durations of ours in the harness's JSON, beside the stock ones.
	perf.PluginNames = append(perf.PluginNames, packing.Name, preempt.Name)
	if err := flag.Set("data-items-dir", dataDir); err != nil {
		b.Fatal(err)
	}

	// Counts the plugins tangram-scheduler's profile builds: a run that
	// built none measured the stock scheduler under the wrong name.
	var built atomic.Int64
	registry := frameworkruntime.Registry{}
	for name, factory := range Registry() {
		registry[name] = func(ctx context.Context, obj runtime.Object, h fwk.Handle) (fwk.Plugin, error) {
			built.Add(1)
			return factory(ctx, obj, h)
		}
	}

	profiles := envList("TANGRAM_PERF_PROFILES", []string{"stock", "tangram"})
	for _, p := range profiles {
		if p != "stock" && p != "tangram" {
			b.Fatalf("TANGRAM_PERF_PROFILES=%v: want stock and/or tangram", profiles)
		}
	}
	mode := os.Getenv("TANGRAM_PERF_MODE")
	switch mode {
	case "", "sequential":
		mode = "sequential"
	case "simultaneous":
	default:
		b.Fatalf("TANGRAM_PERF_MODE=%q: want sequential or simultaneous", mode)
	}

	fmt.Printf("schedperf: %d workloads x %d profiles x %d runs, %s; templates and data in %s\n", len(workloads), len(profiles), runs, mode, out)
	start := time.Now()
	results := map[string]map[string][]float64{}
	if mode == "simultaneous" {
		for _, w := range workloads {
			results[w.ID()] = map[string][]float64{}
			for r := range runs {
				got, err := runSimultaneously(out, w, r)
				if err != nil {
					b.Fatalf("%s, round %d: %v", w.ID(), r+1, err)
				}
				for sched, tp := range got {
					fmt.Printf("schedperf: %s %s run %d: %.1f pods/s (simultaneous)\n", w.ID(), sched, r+1, tp)
					results[w.ID()][sched] = append(results[w.ID()][sched], tp)
				}
			}
		}
		writeReport(b, out, workloads, results, runs, start, mode)
		return
	}
	for _, w := range workloads {
		results[w.ID()] = map[string][]float64{}
		for r := range runs {
			order := slices.Clone(profiles)
			if r%2 == 1 {
				slices.Reverse(order)
			}
			for _, sched := range order {
				cfgPath := ""
				var reg frameworkruntime.Registry
				if sched == "tangram" {
					cfgPath, reg = schedConfig, registry
				}
				data, err := w.Config(cfgPath)
				if err != nil {
					b.Fatal(err)
				}
				topic := runName(sched, w, r)
				file := filepath.Join(out, topic+".yaml")
				if err := os.WriteFile(file, data, 0o644); err != nil {
					b.Fatal(err)
				}
				before := built.Load()
				t0 := time.Now()
				if !b.Run(topic, func(b *testing.B) {
					perf.RunBenchmarkPerfScheduling(b, file, topic, reg)
				}) {
					b.Fatalf("%s with the %s profile, run %d, failed (harness log above; per-workload logs in $ARTIFACTS)", w.ID(), sched, r+1)
				}
				if sched == "tangram" && built.Load() == before {
					b.Fatalf("%s: tangram-scheduler's profile built none of its plugins", w.ID())
				}
				tp, err := throughput(dataDir, topic)
				if err != nil {
					b.Fatalf("%s, %s, run %d: %v", w.ID(), sched, r+1, err)
				}
				fmt.Printf("schedperf: %s %s run %d: %.1f pods/s (%s)\n", w.ID(), sched, r+1, tp, time.Since(t0).Round(time.Second))
				results[w.ID()][sched] = append(results[w.ID()][sched], tp)
			}
		}
	}
	writeReport(b, out, workloads, results, runs, start, mode)
}

// writeReport prints the table, and writes it and the raw figures
// (results.json, what a parent in simultaneous mode reads) to out.
func writeReport(b *testing.B, out string, workloads []Workload, results map[string]map[string][]float64, runs int, start time.Time, mode string) {
	table := Table(workloads, results, runs, time.Since(start))
	if mode == "simultaneous" {
		table = "\nsimultaneous mode: in each round the stock and the tangram run ran at the same time, in two processes sharing the machine" + table
	}
	fmt.Print(table)
	if err := os.WriteFile(filepath.Join(out, "table.md"), []byte(table), 0o644); err != nil {
		b.Fatal(err)
	}
	raw, err := json.Marshal(results)
	if err != nil {
		b.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(out, "results.json"), raw, 0o644); err != nil {
		b.Fatal(err)
	}
}

// nonWord is what runName replaces in a workload's ID.
var nonWord = regexp.MustCompile(`[^A-Za-z0-9]+`)

// runName names run r of w with profile sched: the harness's topic, and in
// simultaneous mode the run's directory.
func runName(sched string, w Workload, r int) string {
	return fmt.Sprintf("%s_%s_r%d", sched, nonWord.ReplaceAllString(w.ID(), "_"), r)
}

// runSimultaneously runs round r of w with the stock and the tangram
// profile at the same time, each in a process of its own (this test
// binary again, one profile, one run: the harness's metrics and flags are
// process-wide), and returns each one's pods/s. Load from elsewhere on a
// shared machine then falls on both runs of a round alike, which running
// them one after the other cannot promise; each gets about half of what
// the machine has, so the absolute figures are lower than sequential ones.
func runSimultaneously(out string, w Workload, r int) (map[string]float64, error) {
	type child struct {
		sched, dir string
		cmd        *exec.Cmd
		log        *os.File
	}
	var children []child
	defer func() {
		for _, c := range children {
			c.log.Close()
		}
	}()
	start := func(sched string) error {
		dir := filepath.Join(out, "simultaneous", runName(sched, w, r))
		if err := os.MkdirAll(filepath.Join(dir, "artifacts"), 0o755); err != nil {
			return err
		}
		log, err := os.Create(filepath.Join(dir, "bench.log"))
		if err != nil {
			return err
		}
		upstream, tangram := w.ID(), "none"
		if w.Source == "tangram" {
			upstream, tangram = "none", w.Name
		}
		cmd := exec.Command(os.Args[0], "-test.run=^$", "-test.bench=^BenchmarkPerfScheduling$", "-test.benchtime=1x", "-test.timeout=60m")
		cmd.Env = append(os.Environ(),
			"TANGRAM_PERF_MODE=sequential", "TANGRAM_PERF_PROFILES="+sched, "TANGRAM_PERF_RUNS=1",
			"TANGRAM_PERF_UPSTREAM="+upstream, "TANGRAM_PERF_TANGRAM="+tangram,
			"TANGRAM_PERF_OUT="+dir, "ARTIFACTS="+filepath.Join(dir, "artifacts"))
		cmd.Stdout, cmd.Stderr = log, log
		if err := cmd.Start(); err != nil {
			log.Close()
			return fmt.Errorf("starting the %s run: %w", sched, err)
		}
		children = append(children, child{sched: sched, dir: dir, cmd: cmd, log: log})
		return nil
	}
	for _, sched := range []string{"stock", "tangram"} {
		if err := start(sched); err != nil {
			// A run already started would otherwise go on loading the
			// machine for up to its 60-minute timeout.
			for _, c := range children {
				_ = c.cmd.Process.Kill()
				_ = c.cmd.Wait()
			}
			return nil, err
		}
	}
	got := map[string]float64{}
	var errs []string
	for _, c := range children {
		sched := c.sched
		if err := c.cmd.Wait(); err != nil {
			errs = append(errs, fmt.Sprintf("the %s run failed (%v); its log: %s", sched, err, c.log.Name()))
			continue
		}
		raw, err := os.ReadFile(filepath.Join(c.dir, "results.json"))
		if err != nil {
			errs = append(errs, fmt.Sprintf("the %s run left no results (%v); its log: %s", sched, err, c.log.Name()))
			continue
		}
		var res map[string]map[string][]float64
		if err := json.Unmarshal(raw, &res); err != nil || len(res[w.ID()][sched]) != 1 {
			errs = append(errs, fmt.Sprintf("the %s run's results.json has no figure for %s (%v)", sched, w.ID(), err))
			continue
		}
		got[sched] = res[w.ID()][sched][0]
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("%s", strings.Join(errs, "; "))
	}
	return got, nil
}

// throughput reads the SchedulingThroughput average the harness wrote for
// topic.
func throughput(dir, topic string) (float64, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*_benchmark_"+topic+"_*.json"))
	if err != nil || len(files) != 1 {
		return 0, fmt.Errorf("want one data file of topic %s in %s, found %v (%v); did the workload fail?", topic, dir, files, err)
	}
	data, err := os.ReadFile(files[0])
	if err != nil {
		return 0, err
	}
	var items struct {
		DataItems []struct {
			Data   map[string]float64 `json:"data"`
			Labels map[string]string  `json:"labels"`
		} `json:"dataItems"`
	}
	if err := json.Unmarshal(data, &items); err != nil {
		return 0, fmt.Errorf("parsing %s: %w", files[0], err)
	}
	for _, it := range items.DataItems {
		if it.Labels["Metric"] == "SchedulingThroughput" {
			return it.Data["Average"], nil
		}
	}
	return 0, fmt.Errorf("%s has no SchedulingThroughput", files[0])
}
