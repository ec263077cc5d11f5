package usage

import (
	"context"
	"errors"
	"fmt"
	"time"

	"k8s.io/klog/v2"

	"github.com/tangram-gpu/tangram/pkg/gpu"
	"github.com/tangram-gpu/tangram/pkg/plugin/podcgroup"
	"github.com/tangram-gpu/tangram/pkg/plugin/prepared"
)

// Watcher attributes the node's GPU processes every Interval and hands
// each Report to Publish. Of the Driver it takes only a copy of the
// records (Records), so a prepare or the health stream waits at most for
// that copy, never for NVML or /proc.
type Watcher struct {
	Processes gpu.ProcessLister
	// PodOf returns the UID of process pid's pod, "" outside any pod,
	// and podcgroup.ErrProcessGone for a process that exited (ProcPodOf).
	PodOf func(pid int) (string, error)
	// PodClaims returns the claims of the node's pods ("namespace/name"
	// by pod UID; ClaimsOfPods).
	PodClaims func(ctx context.Context) (map[string][]string, error)
	// Records returns the prepared claims (Driver.Records).
	Records func() map[string]prepared.Claim
	// NodePods, if set, returns the UIDs of the node's own daemons' pods
	// (Inputs.NodePods).
	NodePods func() map[string]bool
	// Interval is the time between two rounds (Run).
	Interval time.Duration
	Publish  func(context.Context, Report)
}

// Once reads every source once and attributes what it read. A card NVML
// could not list, or a process whose cgroup could not be read, is left
// out and logged; the round still counts the rest. NVML listing nothing
// at all, or the pods' claims failing, fails the round: it would read as
// nothing running, or every process as a stray.
func (w *Watcher) Once(ctx context.Context) (Report, error) {
	logger := klog.FromContext(ctx)
	procs, err := w.Processes.GPUProcesses(ctx)
	switch {
	case err != nil && procs == nil:
		// Nothing listed: a round would read as nothing running.
		return Report{}, fmt.Errorf("listing the GPU processes: %w", err)
	case err != nil:
		logger.Error(err, "Listing the GPU processes of some cards failed; they are left out of this round")
	}
	claims, err := w.PodClaims(ctx)
	if err != nil {
		return Report{}, fmt.Errorf("reading the claims of the node's pods: %w", err)
	}
	in := Inputs{Processes: procs, PodOf: map[int]string{}, ClaimsOf: claims, Records: w.Records()}
	if w.NodePods != nil {
		in.NodePods = w.NodePods()
	}
	for _, p := range procs {
		if _, done := in.PodOf[p.PID]; done {
			continue
		}
		pod, err := w.PodOf(p.PID)
		switch {
		case errors.Is(err, podcgroup.ErrProcessGone):
			continue
		case err != nil:
			logger.Error(err, "Reading a GPU process's pod failed; it is left out of this round", "pid", p.PID, "card", p.Card)
			continue
		}
		in.PodOf[p.PID] = pod
	}
	return Attribute(in), nil
}

// Run publishes a round every Interval until ctx ends. A failed round is
// logged, not published (the last good one stays), and the next one runs.
func (w *Watcher) Run(ctx context.Context) error {
	if w.Interval <= 0 || w.Publish == nil {
		return fmt.Errorf("the GPU usage watcher needs an interval above 0 (%s) and somewhere to publish", w.Interval)
	}
	logger := klog.FromContext(ctx)
	ticker := time.NewTicker(w.Interval)
	defer ticker.Stop()
	for {
		if r, err := w.Once(ctx); err != nil {
			logger.Error(err, "GPU usage round failed; the next one runs in the interval", "interval", w.Interval)
		} else {
			w.Publish(ctx, r)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-ticker.C:
		}
	}
}

// ProcPodOf reads a process's pod from <procRoot>/<pid>/cgroup.
func ProcPodOf(procRoot string) func(pid int) (string, error) {
	return func(pid int) (string, error) {
		c, err := podcgroup.Read(procRoot, pid)
		if err != nil {
			return "", err
		}
		pod, _ := c.PodOf()
		return pod, nil
	}
}
