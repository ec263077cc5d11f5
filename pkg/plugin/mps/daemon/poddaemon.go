package daemon

// PodDaemon: the node's MPS daemon in a pod the plugin creates and deletes.

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
)

// PodDaemonConfig configures a PodDaemon.
type PodDaemonConfig struct {
	Client kubernetes.Interface
	// Pod describes the pod; NodeUID is filled in from the Node if empty.
	Pod PodSpec
	// StartTimeout bounds how long Ensure waits for a new or adopted pod's
	// daemon to answer (image pull included). Default 90s.
	StartTimeout time.Duration
	// StopTimeout bounds how long Stop waits for the pod to be gone.
	// Default 60s.
	StopTimeout time.Duration
	// PollInterval is how often the pod and the socket are checked. Default 250ms.
	PollInterval time.Duration
}

// PodDaemon runs the node's MPS control daemon in a pod of its own, created
// through the API server, so that the daemon outlives restarts and upgrades
// of the plugin's pod: running share workloads keep their MPS server. The
// kubelet restarts the daemon's container when it dies (restartPolicy
// Always), so no supervisor is needed here.
type PodDaemon struct {
	cfg PodDaemonConfig

	mu sync.Mutex
	// known is set once this process has seen its pod answer (created or
	// adopted); absent once it has seen no pod. Both unset: unknown, e.g.
	// right after start-up.
	known, absent bool
	// differs is set while the known pod is an adopted one whose spec
	// differs from ours: EnsureUnused replaces it.
	differs bool
}

// NewPodDaemon checks the configuration and fills in defaults.
func NewPodDaemon(cfg PodDaemonConfig) (*PodDaemon, error) {
	if cfg.Client == nil {
		return nil, errors.New("MPS daemon pod: a Kubernetes client is required")
	}
	if cfg.StartTimeout == 0 {
		cfg.StartTimeout = defaultPodStartWait
	}
	if cfg.StopTimeout == 0 {
		cfg.StopTimeout = 60 * time.Second
	}
	if cfg.PollInterval == 0 {
		cfg.PollInterval = 250 * time.Millisecond
	}
	// Fail at start-up, not at the first share, on a bad configuration.
	if _, err := BuildPod(cfg.Pod); err != nil {
		return nil, err
	}
	return &PodDaemon{cfg: cfg}, nil
}

// Name is the daemon pod's name.
func (d *PodDaemon) Name() string { return PodName(d.cfg.Pod.Prefix, d.cfg.Pod.NodeName) }

func (d *PodDaemon) pods() podClient {
	return d.cfg.Client.CoreV1().Pods(d.cfg.Pod.Namespace)
}

type podClient interface {
	Get(ctx context.Context, name string, opts metav1.GetOptions) (*corev1.Pod, error)
	Create(ctx context.Context, pod *corev1.Pod, opts metav1.CreateOptions) (*corev1.Pod, error)
	Delete(ctx context.Context, name string, opts metav1.DeleteOptions) error
}

// answers reports whether a daemon accepts connections on the control
// socket. Readiness is judged here, on the host path, rather than by the
// pod's Ready condition: the socket in the shared pipe directory is exactly
// what share containers connect to, a stale socket file left by a dead
// daemon refuses connections, and the check needs no readiness probe (the
// image has no shell or MPS client to run one) and no status round trip.
func (d *PodDaemon) answers() error {
	conn, err := net.DialTimeout("unix", d.cfg.Pod.Layout.ControlSocket(), time.Second)
	if err != nil {
		return err
	}
	return conn.Close()
}

// Ensure creates the daemon pod, or adopts the one a previous plugin
// process created, and waits until the daemon answers. A running pod whose
// spec differs from ours (older image, other cards, -M) is adopted all the
// same, with a warning: shares may be using its daemon.
func (d *PodDaemon) Ensure(ctx context.Context) error { return d.ensure(ctx, false) }

// EnsureUnused is Ensure for a caller that knows no share uses the daemon
// now: a pod whose spec differs from ours is then replaced, not adopted.
func (d *PodDaemon) EnsureUnused(ctx context.Context) error { return d.ensure(ctx, true) }

func (d *PodDaemon) ensure(ctx context.Context, unused bool) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.known && !(unused && d.differs) && d.answers() == nil {
		return nil
	}
	logger := klog.FromContext(ctx).WithValues("pod", klog.KRef(d.cfg.Pod.Namespace, d.Name()))
	// From here a pod may be created even if this call fails: forget what
	// was known, so that the next Stop asks the API server.
	d.known, d.absent, d.differs = false, false, false
	// The plugin, not the pod, creates the directories: hostPath would
	// create them 0755, and shm and log must be world-writable and sticky.
	if err := d.cfg.Pod.Layout.Create(); err != nil {
		return err
	}
	pod, err := d.pods().Get(ctx, d.Name(), metav1.GetOptions{})
	var diffs []podDiff
	if err == nil {
		diffs = d.diff(pod)
	}
	switch {
	case apierrors.IsNotFound(err):
		pod = nil
	case err != nil:
		return fmt.Errorf("reading MPS daemon pod %s/%s: %w", d.cfg.Pod.Namespace, d.Name(), err)
	case pod.DeletionTimestamp != nil || pod.Status.Phase == corev1.PodFailed || pod.Status.Phase == corev1.PodSucceeded ||
		pod.Spec.NodeName != d.cfg.Pod.NodeName:
		// A pod on its way out (or one the kubelet gave up on, e.g.
		// evicted) cannot be adopted, nor one bound to another node (its
		// daemon is not on this node's socket): replace it.
		logger.Info("Replacing the MPS daemon pod", "phase", pod.Status.Phase, "deleting", pod.DeletionTimestamp != nil, "podNode", pod.Spec.NodeName)
		if err := d.deleteAndWait(ctx, string(pod.UID)); err != nil {
			return err
		}
		pod = nil
	case len(diffs) > 0 && unused:
		// No share to disturb: bring the daemon in line with this plugin.
		logger.Info("Replacing the MPS daemon pod: its spec differs from this plugin's and no share uses it", diffKeysAndValues(diffs)...)
		if err := d.deleteAndWait(ctx, string(pod.UID)); err != nil {
			return err
		}
		pod = nil
	case len(diffs) > 0:
		// Replacing it would kill the MPS server of running shares; it is
		// replaced once the node's last share is gone.
		logger.Info("Warning: adopting an MPS daemon pod whose spec differs from this plugin's; it stays until no share uses it",
			append([]any{"uid", pod.UID}, diffKeysAndValues(diffs)...)...)
		d.differs = true
	default:
		logger.Info("Adopting the MPS daemon pod already running", "uid", pod.UID, "image", pod.Spec.Containers[0].Image)
	}
	if pod == nil {
		if err := d.create(ctx); err != nil {
			return err
		}
	}
	if err := d.waitAnswering(ctx); err != nil {
		return err
	}
	d.known, d.absent = true, false
	return nil
}

// podDiff is one setting in which a running daemon pod differs from the
// one this plugin would create.
type podDiff struct{ name, have, want string }

// diff compares the settings that change what the daemon serves: its
// image, the cards it sees, whether it accepts clients of any user and its
// MPS protocol (a legacy daemon cannot serve v3 namespaces).
func (d *PodDaemon) diff(have *corev1.Pod) []podDiff {
	want, err := BuildPod(d.cfg.Pod)
	if err != nil {
		// NewPodDaemon built it once already.
		return nil
	}
	settings := func(pod *corev1.Pod) (image, devices, multiUser, protocol string) {
		for _, c := range pod.Spec.Containers {
			if c.Name != mpsDaemonContainer {
				continue
			}
			env := envOf(c)
			return c.Image, env["CUDA_VISIBLE_DEVICES"], fmt.Sprint(slices.Contains(c.Command, "--mps-multi-user")), env["CUDA_MPS_PROTOCOL_VERSION"]
		}
		return "<no " + mpsDaemonContainer + " container>", "", "", ""
	}
	hi, hd, hm, hp := settings(have)
	wi, wd, wm, wp := settings(want)
	var out []podDiff
	for _, f := range []podDiff{{"image", hi, wi}, {"visibleDevices", hd, wd}, {"multiUser", hm, wm}, {"protocol", hp, wp}} {
		if f.have != f.want {
			out = append(out, f)
		}
	}
	if have.Spec.HostPID != want.Spec.HostPID {
		// A daemon pod of an older plugin, outside the host's PIDs.
		out = append(out, podDiff{"hostPID", fmt.Sprint(have.Spec.HostPID), fmt.Sprint(want.Spec.HostPID)})
	}
	return out
}

// diffKeysAndValues logs each difference as <name>Pod (the running pod's
// value) and <name>Plugin (what this plugin would create).
func diffKeysAndValues(diffs []podDiff) []any {
	var kv []any
	for _, f := range diffs {
		kv = append(kv, f.name+"Pod", f.have, f.name+"Plugin", f.want)
	}
	return kv
}

func envOf(c corev1.Container) map[string]string {
	out := map[string]string{}
	for _, e := range c.Env {
		out[e.Name] = e.Value
	}
	return out
}

func (d *PodDaemon) create(ctx context.Context) error {
	cfg := d.cfg.Pod
	if cfg.NodeUID == "" {
		node, err := d.cfg.Client.CoreV1().Nodes().Get(ctx, cfg.NodeName, metav1.GetOptions{})
		if err != nil {
			return fmt.Errorf("reading Node %s to own the MPS daemon pod: %w", cfg.NodeName, err)
		}
		cfg.NodeUID = string(node.UID)
	}
	pod, err := BuildPod(cfg)
	if err != nil {
		return err
	}
	created, err := d.pods().Create(ctx, pod, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		// Someone (an earlier attempt whose answer was lost) was first.
		klog.FromContext(ctx).Info("MPS daemon pod appeared meanwhile; adopting it", "pod", klog.KObj(pod))
		return nil
	}
	if err != nil {
		return fmt.Errorf("creating MPS daemon pod %s/%s: %w", pod.Namespace, pod.Name, err)
	}
	klog.FromContext(ctx).Info("Created the MPS daemon pod", "pod", klog.KObj(created), "uid", created.UID, "image", cfg.Image, "simulated", cfg.Simulate)
	return nil
}

// waitAnswering polls the control socket until it answers, the start
// timeout passes, ctx ends, or the pod's status shows it cannot start; the
// error names the pod and its status.
func (d *PodDaemon) waitAnswering(ctx context.Context) error {
	start := time.Now()
	ctx, cancel := context.WithTimeout(ctx, d.cfg.StartTimeout)
	defer cancel()
	ticker := time.NewTicker(d.cfg.PollInterval)
	defer ticker.Stop()
	// The socket is cheap to try; the pod's status costs an API call, so it
	// is read less often.
	statusEvery := 4 * d.cfg.PollInterval
	var lastStatus time.Time
	for {
		err := d.answers()
		if err == nil {
			klog.FromContext(ctx).V(2).Info("MPS daemon answers", "pod", klog.KRef(d.cfg.Pod.Namespace, d.Name()), "socket", d.cfg.Pod.Layout.ControlSocket())
			return nil
		}
		if time.Since(lastStatus) >= statusEvery {
			lastStatus = time.Now()
			// A read error is not fatal: the socket may still answer.
			if pod, getErr := d.pods().Get(ctx, d.Name(), metav1.GetOptions{}); getErr == nil {
				if why := cannotStart(pod); why != "" {
					return fmt.Errorf("MPS daemon pod %s/%s cannot start (%s), gave up after %s without waiting for the daemon on %s: %s",
						d.cfg.Pod.Namespace, d.Name(), why, time.Since(start).Round(time.Millisecond), d.cfg.Pod.Layout.ControlSocket(), d.summarize(pod))
				}
			}
		}
		select {
		case <-ctx.Done():
			// The status is read with a fresh context: ours has expired.
			statusCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			defer cancel()
			// The caller's deadline (the kubelet's) may come before ours.
			return fmt.Errorf("MPS daemon pod %s/%s did not answer on %s after %s (limit %s, %v; last error: %v): %s",
				d.cfg.Pod.Namespace, d.Name(), d.cfg.Pod.Layout.ControlSocket(), time.Since(start).Round(time.Millisecond),
				d.cfg.StartTimeout, ctx.Err(), err, d.describe(statusCtx))
		case <-ticker.C:
		}
	}
}

// fatalWaitingReasons are container waiting reasons that need someone to
// fix the image, its name, a secret or a config map: waiting longer only
// delays the error the kubelet retries with. ContainerCreating and
// CrashLoopBackOff are not here: the first passes, and a crash loop may be
// a daemon that starts on a later attempt.
var fatalWaitingReasons = map[string]bool{
	"ErrImagePull":               true,
	"ImagePullBackOff":           true,
	"CreateContainerConfigError": true,
	"InvalidImageName":           true,
}

// cannotStart says why the pod's daemon cannot come up without someone's
// help, or "" when it may still.
func cannotStart(pod *corev1.Pod) string {
	switch pod.Status.Phase {
	case corev1.PodFailed, corev1.PodSucceeded:
		// Failed with a reason (OutOfcpu, NodeAffinity, Evicted...) is
		// also how the kubelet rejects a pod at admission.
		if pod.Status.Reason != "" {
			return fmt.Sprintf("phase %s: %s", pod.Status.Phase, pod.Status.Reason)
		}
		return "phase " + string(pod.Status.Phase)
	}
	for _, cs := range pod.Status.ContainerStatuses {
		if w := cs.State.Waiting; w != nil && fatalWaitingReasons[w.Reason] {
			return fmt.Sprintf("container %s: %s", cs.Name, w.Reason)
		}
	}
	return ""
}

// describe summarises the pod's status for an error message.
func (d *PodDaemon) describe(ctx context.Context) string {
	pod, err := d.pods().Get(ctx, d.Name(), metav1.GetOptions{})
	if err != nil {
		return fmt.Sprintf("reading the pod: %v", err)
	}
	return d.summarize(pod)
}

func (d *PodDaemon) summarize(pod *corev1.Pod) string {
	parts := []string{"phase " + string(pod.Status.Phase)}
	if pod.Status.Reason != "" || pod.Status.Message != "" {
		parts = append(parts, fmt.Sprintf("reason %s %s", pod.Status.Reason, pod.Status.Message))
	}
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Status != corev1.ConditionTrue {
			parts = append(parts, fmt.Sprintf("not scheduled: %s %s", c.Reason, c.Message))
		}
	}
	for _, cs := range pod.Status.ContainerStatuses {
		s := fmt.Sprintf("container %s restarts %d", cs.Name, cs.RestartCount)
		switch {
		case cs.State.Waiting != nil:
			s += fmt.Sprintf(", waiting: %s %s", cs.State.Waiting.Reason, cs.State.Waiting.Message)
		case cs.State.Terminated != nil:
			s += fmt.Sprintf(", terminated: %s (exit %d) %s", cs.State.Terminated.Reason, cs.State.Terminated.ExitCode, cs.State.Terminated.Message)
		case cs.State.Running != nil:
			s += ", running"
		}
		if t := cs.LastTerminationState.Terminated; t != nil {
			s += fmt.Sprintf(", last exit %d (%s)", t.ExitCode, t.Reason)
		}
		parts = append(parts, s)
	}
	return strings.Join(parts, "; ") + fmt.Sprintf(" (kubectl -n %s logs %s)", d.cfg.Pod.Namespace, d.Name())
}

// Stop deletes the daemon pod and waits until it is gone. Without a pod it
// succeeds; once this process has seen no pod it asks the API server no
// more, since every whole-card unprepare on an idle node calls Stop.
func (d *PodDaemon) Stop(ctx context.Context) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.absent {
		return nil
	}
	if err := d.deleteAndWait(ctx, ""); err != nil {
		return err
	}
	d.known, d.absent, d.differs = false, true, false
	return nil
}

// deleteAndWait deletes the pod (only the one with uid, when set) and polls
// until no such pod exists.
func (d *PodDaemon) deleteAndWait(ctx context.Context, uid string) error {
	logger := klog.FromContext(ctx).WithValues("pod", klog.KRef(d.cfg.Pod.Namespace, d.Name()))
	opts := metav1.DeleteOptions{}
	if uid != "" {
		opts.Preconditions = &metav1.Preconditions{UID: ptr.To(types.UID(uid))}
	}
	err := d.pods().Delete(ctx, d.Name(), opts)
	switch {
	case apierrors.IsNotFound(err):
		return nil
	case apierrors.IsConflict(err):
		// Another pod of that name replaced it already.
		return nil
	case err != nil:
		return fmt.Errorf("deleting MPS daemon pod %s/%s: %w", d.cfg.Pod.Namespace, d.Name(), err)
	}
	logger.Info("Deleted the MPS daemon pod; waiting until it is gone")
	ctx, cancel := context.WithTimeout(ctx, d.cfg.StopTimeout)
	defer cancel()
	ticker := time.NewTicker(d.cfg.PollInterval)
	defer ticker.Stop()
	for {
		pod, err := d.pods().Get(ctx, d.Name(), metav1.GetOptions{})
		if apierrors.IsNotFound(err) || (err == nil && uid != "" && string(pod.UID) != uid) {
			logger.Info("MPS daemon pod is gone")
			return nil
		}
		select {
		case <-ctx.Done():
			status := "unknown"
			if err == nil {
				status = "phase " + string(pod.Status.Phase)
			}
			return fmt.Errorf("MPS daemon pod %s/%s still exists %s after deletion (%s): %w", d.cfg.Pod.Namespace, d.Name(), d.cfg.StopTimeout, status, ctx.Err())
		case <-ticker.C:
		}
	}
}

// Close does nothing: the pod keeps running for the shares in use, and the
// next plugin process adopts it.
func (d *PodDaemon) Close() {}
