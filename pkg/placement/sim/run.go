package sim

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/tangram-gpu/tangram/pkg/trace"
)

// Config selects one replay.
type Config struct {
	Policy string
	Seed   uint64
	// Arrival is the GPU requested in total as a multiple of capacity (1.3).
	Arrival float64
	// Progress, when set, is called every so many tasks.
	Progress func(done, total int)
	// ReportFailures fills Result.Failures and Result.Leftover.
	ReportFailures bool
}

// Point is one step of the allocation curve.
type Point struct {
	// ArrivedPercent is the GPU requested so far, in percent of capacity.
	ArrivedPercent int `json:"arrivedPercent"`
	// AllocationRatio is the GPU allocated, in percent of capacity.
	AllocationRatio float64 `json:"allocationRatio"`
}

// Result is the outcome of one replay.
type Result struct {
	Policy             string  `json:"policy"`
	Seed               uint64  `json:"seed"`
	Tasks              int     `json:"tasks"`
	TasksFailed        int     `json:"tasksFailed"`
	GPUTasksFailed     int     `json:"gpuTasksFailed"`
	AllocationRatio100 float64 `json:"allocationRatio100"`
	AllocationRatio130 float64 `json:"allocationRatio130"`
	MedianPlaceMillis  float64 `json:"medianPlaceMillis"`
	P99PlaceMillis     float64 `json:"p99PlaceMillis"`
	// AllocatorRefused and ModelDisagreed count placements where the model
	// and the real allocator differed; both should be 0.
	AllocatorRefused int     `json:"allocatorRefused"`
	ModelDisagreed   int     `json:"modelDisagreed"`
	Curve            []Point `json:"curve"`
	// Failures are the GPU tasks that found no node after 100% arrival, by
	// class; Leftover is the free GPU at the end by card free level. Both
	// only with Config.ReportFailures.
	Failures []FailureClass `json:"failures,omitempty"`
	Leftover []FreeLevel    `json:"leftover,omitempty"`
}

// Run replays tasks (the whole list, arranged per the published protocol)
// on nodes with the configured policy.
func Run(ctx context.Context, nodes []trace.Node, tasks []trace.Task, cfg Config) (*Result, error) {
	cluster, err := BuildCluster(nodes)
	if err != nil {
		return nil, err
	}
	arrival, err := trace.Arrival(tasks, cluster.CapacityMilli, cfg.Seed, cfg.Arrival)
	if err != nil {
		return nil, err
	}
	sched, err := NewScheduler(ctx, cluster, cfg.Policy, tasks, cfg.Seed)
	if err != nil {
		return nil, err
	}
	res := &Result{Policy: cfg.Policy, Seed: cfg.Seed, Tasks: len(arrival)}
	capacity := float64(cluster.CapacityMilli)
	var arrived, allocated int64
	nextPoint := 0
	ratio := func() float64 { return float64(allocated) * 100 / capacity }
	durations := make([]time.Duration, 0, len(arrival))
	failures := failureTally{}
	for i, r := range Requests(arrival) {
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("replay interrupted after %d of %d tasks: %w", i, len(arrival), err)
		}
		arrived += r.GPUMilli()
		// Points the arrival passes before this task count what was
		// allocated before it.
		for ; float64(nextPoint)*capacity/100 < float64(arrived) && nextPoint <= int(cfg.Arrival*100); nextPoint++ {
			res.Curve = append(res.Curve, Point{ArrivedPercent: nextPoint, AllocationRatio: ratio()})
		}
		start := time.Now()
		_, ok, err := sched.Place(ctx, r)
		elapsed := time.Since(start)
		if err != nil {
			return nil, err
		}
		if ok {
			durations = append(durations, elapsed)
			allocated += r.GPUMilli()
		} else {
			res.TasksFailed++
			if r.GPUMilli() > 0 {
				res.GPUTasksFailed++
			}
			if cfg.ReportFailures && r.GPUMilli() > 0 && float64(arrived) > capacity {
				failures.add(r)
			}
		}
		if cfg.Progress != nil && (i+1)%1000 == 0 {
			cfg.Progress(i+1, len(arrival))
		}
	}
	for ; nextPoint <= int(cfg.Arrival*100+1e-9); nextPoint++ {
		res.Curve = append(res.Curve, Point{ArrivedPercent: nextPoint, AllocationRatio: ratio()})
	}
	for _, p := range res.Curve {
		if p.ArrivedPercent == 100 {
			res.AllocationRatio100 = p.AllocationRatio
		}
	}
	res.AllocationRatio130 = ratio()
	if cfg.ReportFailures {
		res.Failures = failures.classes()
		res.Leftover = leftover(cluster.Nodes)
	}
	res.AllocatorRefused = sched.Stats.Refused
	res.ModelDisagreed = sched.Stats.Disagreed
	if len(durations) > 0 {
		slices.Sort(durations)
		res.MedianPlaceMillis = float64(durations[len(durations)/2].Microseconds()) / 1000
		res.P99PlaceMillis = float64(durations[len(durations)*99/100].Microseconds()) / 1000
	}
	return res, nil
}
