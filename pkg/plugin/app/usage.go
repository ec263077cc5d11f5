package app

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"

	"github.com/tangram-gpu/tangram/pkg/device"
	"github.com/tangram-gpu/tangram/pkg/plugin"
	"github.com/tangram-gpu/tangram/pkg/plugin/mps/daemon"
	"github.com/tangram-gpu/tangram/pkg/plugin/podcgroup"
	"github.com/tangram-gpu/tangram/pkg/plugin/usage"
)

// startUsage runs the GPU usage watcher (docs/observability.md): every
// --usage-interval it attributes the cards' processes to the prepared
// claims, serves the result as metrics and reports shares over their
// memory and processes no claim accounts for. It needs the API server
// (the node's pods say which claims each process's pod holds) and the
// host's PID namespace, which it checks first. The watcher is an extra:
// where it cannot run, the plugin says why and runs without it.
func (w *wiring) startUsage(ctx context.Context, driver *plugin.Driver, metrics *plugin.Metrics, recorder record.EventRecorder) error {
	logger := klog.FromContext(ctx)
	switch {
	case w.UsageInterval == 0:
		logger.Info("GPU usage not watched (--usage-interval=0)")
		return nil
	case w.Processes == nil:
		logger.Info("GPU usage not watched: this GPU source cannot list the cards' processes")
		return nil
	case w.KubeClient == nil:
		logger.Info("GPU usage not watched: offline, the pods' claims are not known")
		return nil
	}
	if err := checkPIDNamespace(w.UsageProcRoot, os.Getpid()); err != nil {
		logger.Error(err, "GPU usage not watched")
		return nil
	}
	var cards []usage.Card
	for _, g := range w.GPUs {
		cards = append(cards, usage.Card{UUID: g.UUID, Device: device.CardDeviceName(g.Index)})
	}
	served, err := usage.NewMetrics(metrics.Registry, w.NodeName, cards)
	if err != nil {
		return fmt.Errorf("registering the GPU usage metrics: %w", err)
	}
	pods, err := usage.NewNodePods(w.KubeClient, w.NodeName)
	if err != nil {
		return fmt.Errorf("watching the node's pods for GPU usage: %w", err)
	}
	pods.Start(ctx)
	reporter := &usage.Reporter{Recorder: recorder, Node: w.NodeName, Pod: pods.Pod,
		OverShare: w.overShare, Unaccounted: w.unaccounted, Evictor: usage.APIEvictor{Client: w.KubeClient}}
	watcher := &usage.Watcher{
		Processes: w.Processes,
		PodOf:     usage.ProcPodOf(w.UsageProcRoot),
		PodClaims: pods.Claims,
		Records:   driver.Records,
		NodePods:  func() map[string]bool { return w.nodePods(pods) },
		Interval:  w.UsageInterval,
		Publish: func(ctx context.Context, r usage.Report) {
			served.Publish(ctx, r)
			reporter.Publish(ctx, r)
		},
	}
	logger.Info("Watching GPU usage", "interval", w.UsageInterval, "procRoot", w.UsageProcRoot, "overShare", w.overShare, "unaccounted", w.unaccounted)
	go func() {
		if err := watcher.Run(ctx); err != nil {
			logger.Error(err, "GPU usage watcher stopped")
		}
	}()
	return nil
}

// componentLabel is the label the chart gives each component's pods.
const componentLabel = "app.kubernetes.io/component"

// nodePods are the UIDs of the plugin's pods on the node (its own and,
// during a rolling update, the other one; with --mps-daemon=process the
// MPS daemon and servers are their children) and of the MPS daemon's pod:
// what runs in them is the node's.
func (w *wiring) nodePods(pods *usage.NodePods) map[string]bool {
	out := map[string]bool{}
	if w.PodUID != "" {
		for _, uid := range pods.Siblings(w.PodUID, componentLabel) {
			out[uid] = true
		}
	}
	if w.MPSDaemonMode == MPSDaemonPod {
		if uid, ok := pods.UID(w.mpsDaemonPod.Namespace, daemon.PodName(w.mpsDaemonPod.Prefix, w.NodeName)); ok {
			out[uid] = true
		}
	}
	return out
}

// checkPIDNamespace checks that the usage watcher can see the tenants'
// processes. NVML gives each process's PID as the caller's PID namespace
// sees it and leaves out those it does not see (NVIDIA's kernel module
// translates them), so the plugin must run in the host's PID namespace
// (hostPID) and read the /proc of its own: procRoot/self must be this
// process (selfPID), and process 1 must be neither this process nor in
// its pod, which it is in a pod's own PID namespace.
func checkPIDNamespace(procRoot string, selfPID int) error {
	self, err := os.Readlink(filepath.Join(procRoot, "self"))
	if err != nil {
		return fmt.Errorf("--usage-proc-root=%s: reading %s/self failed (%w): is it a /proc?", procRoot, procRoot, err)
	}
	if self != strconv.Itoa(selfPID) {
		return fmt.Errorf("--usage-proc-root=%s is not the /proc of the plugin's PID namespace (it knows this process as %s, not %d): NVML gives PIDs as the plugin's PID namespace sees them; leave it at /proc and run the plugin with hostPID",
			procRoot, self, selfPID)
	}
	hostPID := "run the plugin in the host's PID namespace (hostPID: the chart does with kubeletPlugin.usage.enabled), or pass --usage-interval=0"
	if selfPID == 1 {
		return fmt.Errorf("the plugin is process 1 of its PID namespace, a pod's own: NVML lists only the processes it sees, none of the tenants'; %s", hostPID)
	}
	first, err := podcgroup.Read(procRoot, 1)
	if err != nil {
		return fmt.Errorf("reading the cgroup of process 1 in %s: %w", procRoot, err)
	}
	own, err := podcgroup.Read(procRoot, selfPID)
	if err != nil {
		return fmt.Errorf("reading this process's cgroup in %s: %w", procRoot, err)
	}
	if pod, ok := first.PodOf(); ok {
		if mine, _ := own.PodOf(); mine == pod {
			return fmt.Errorf("process 1 of the plugin's PID namespace runs in the plugin's own pod %s: NVML lists only the processes it sees, none of the tenants'; %s", pod, hostPID)
		}
	}
	return nil
}
