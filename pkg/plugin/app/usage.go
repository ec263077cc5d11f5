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
// host's /proc, which it checks first: a plugin told to watch that cannot
// says so at start-up, not in every round.
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
	// Unreadable (no procfs?): taken as the host's, procRoot's own checks stand.
	ownPIDNamespace, _ := os.Readlink("/proc/self/ns/pid")
	if err := checkProcRoot(w.UsageProcRoot, ownPIDNamespace); err != nil {
		return err
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
	reporter := &usage.Reporter{Recorder: recorder, Node: w.NodeName, Pod: pods.Pod, OverShare: w.overShare, Evictor: usage.APIEvictor{Client: w.KubeClient}}
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
	logger.Info("Watching GPU usage", "interval", w.UsageInterval, "procRoot", w.UsageProcRoot, "overShare", w.overShare)
	go func() {
		if err := watcher.Run(ctx); err != nil {
			logger.Error(err, "GPU usage watcher stopped")
		}
	}()
	return nil
}

// nodePods are the UIDs of the plugin's pod (with --mps-daemon=process
// the MPS daemon and servers are its children) and of the MPS daemon's
// pod: what runs in them is the node's.
func (w *wiring) nodePods(pods *usage.NodePods) map[string]bool {
	out := map[string]bool{}
	if w.PodUID != "" {
		out[w.PodUID] = true
	}
	if w.MPSDaemonMode == MPSDaemonPod {
		if uid, ok := pods.UID(w.mpsDaemonPod.Namespace, daemon.PodName(w.mpsDaemonPod.Prefix, w.NodeName)); ok {
			out[uid] = true
		}
	}
	return out
}

// checkProcRoot checks that procRoot is the host's /proc, where the
// usage watcher reads each GPU process's cgroup. NVML gives the host's
// PIDs: a /proc of the plugin's own PID namespace (a pod without hostPID)
// would find none of them, or the wrong ones. procRoot/self is this
// process as the PID namespace of that /proc sees it: the PID this
// process knows itself by, outside the host's PID namespace, means that
// /proc is its own. ownPIDNamespace is /proc/self/ns/pid's link.
func checkProcRoot(procRoot, ownPIDNamespace string) error {
	fix := "mount the host's /proc there (the chart mounts it at /host-proc), or pass --usage-interval=0 to watch nothing"
	if _, err := podcgroup.Read(procRoot, 1); err != nil {
		return fmt.Errorf("--usage-proc-root=%s: the GPU usage watcher finds each GPU process's pod there, but reading %s/1/cgroup failed (%w); %s",
			procRoot, procRoot, err, fix)
	}
	self, err := os.Readlink(filepath.Join(procRoot, "self"))
	if err != nil {
		return fmt.Errorf("--usage-proc-root=%s: reading %s/self failed (%w): is it a /proc? %s", procRoot, procRoot, err, fix)
	}
	if ownPIDNamespace != "" && ownPIDNamespace != initialPIDNamespace && self == strconv.Itoa(os.Getpid()) {
		return fmt.Errorf("--usage-proc-root=%s is the /proc of the plugin's own PID namespace (%s), not the host's: NVML gives the host's PIDs; %s", procRoot, ownPIDNamespace, fix)
	}
	return nil
}

// initialPIDNamespace is the host's PID namespace as /proc/self/ns/pid
// names it (the kernel's PROC_PID_INIT_INO).
const initialPIDNamespace = "pid:[4026531836]"
