package app

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/pflag"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"

	"github.com/tangram-gpu/tangram/pkg/device"
	"github.com/tangram-gpu/tangram/pkg/gpu"
	"github.com/tangram-gpu/tangram/pkg/gpu/fakegpu"
	"github.com/tangram-gpu/tangram/pkg/kubeconfig"
	"github.com/tangram-gpu/tangram/pkg/plugin"
	"github.com/tangram-gpu/tangram/pkg/plugin/cdi"
	"github.com/tangram-gpu/tangram/pkg/plugin/driverroot"
	"github.com/tangram-gpu/tangram/pkg/plugin/hostbin"
	"github.com/tangram-gpu/tangram/pkg/plugin/mps"
	"github.com/tangram-gpu/tangram/pkg/plugin/mps/daemon"
	"github.com/tangram-gpu/tangram/pkg/plugin/podcheck"
	"github.com/tangram-gpu/tangram/pkg/plugin/usage"
	"github.com/tangram-gpu/tangram/pkg/plugin/xidtaint"
)

// Options are the kubelet plugin's flags, one field each, grouped by what
// they configure; Parse checks them once into the Settings Run gets. The
// GPU source and device model flags, which `dra-kubelet-plugin slices`
// shares, live in the command; what it finds on the node with them is a
// Node.
type Options struct {
	CDIRoot      string
	RegistrarDir string
	PluginDir    string
	StateDir     string
	// PodUID is the UID of the plugin's pod. Set, it enables rolling
	// updates: the old and the new plugin pod of a node run side by side,
	// each with sockets named by its UID. Empty: one plugin per node.
	PodUID string

	// HealthzAddress serves the plugin's liveness (Liveness): gRPC
	// grpc.health.v1 and HTTP /healthz.
	HealthzAddress string
	MetricsAddress string
	Kubeconfig     string
	// Publish controls ResourceSlice publishing.
	Publish bool
	// Offline runs without an API server: no kubelet registration, no
	// publishing; state recovery, liveness and metrics still run.
	Offline bool

	NonRootOptions
	MPSOptions
	HostOptions
	HealthOptions
	UsageOptions
}

// UsageOptions configure the GPU usage watcher (docs/observability.md):
// how often it reads the cards' processes, where the host's /proc is,
// what is done to a share over its memory, and the fake cards' processes.
type UsageOptions struct {
	// UsageInterval is the time between two rounds; 0 watches nothing.
	UsageInterval time.Duration
	// UsageProcRoot is the /proc of the plugin's own PID namespace, which
	// must be the host's (the chart's hostPID): NVML gives PIDs as the
	// caller's PID namespace sees them.
	UsageProcRoot string
	// UsageOverShare (--usage-over-share) and UsageUnaccounted
	// (--usage-unaccounted) are usage.Actions.
	UsageOverShare, UsageUnaccounted string
	// FakeProcessesFile is the fake cards' process list
	// (fakegpu.ProcessesFile); empty: fakegpu.ProcessesFileName in the
	// state directory.
	FakeProcessesFile string
}

// NonRootOptions are the device classes whose claims only locked-down
// pods may use, checked again at prepare (pkg/plugin/podsecurity), and
// the namespaces (a label selector, JSON) the check is limited to.
type NonRootOptions struct {
	NonRootDeviceClasses []string
	NonRootNamespaces    string
}

// MPSOptions are the flags of the node's MPS: its directories, the
// control binary, the mode, each claim's /dev/shm and where the daemon
// runs.
type MPSOptions struct {
	MPSRoot string
	// MPSControlBinary is nvidia-cuda-mps-control as a name in $PATH or a
	// path; empty means the one under the driver root (real GPUs).
	MPSControlBinary string
	// MPSMultiUser starts the classic daemon with -M (clients of any UID).
	MPSMultiUser bool
	// MPSMode is --mps-mode: classic, v3 or auto (mps.ParseMode).
	MPSMode string
	// MPSShmSize bounds each claim's /dev/shm (a quantity, above 0 on
	// real GPUs; claimShmSizeBytes).
	MPSShmSize string
	// MPSIdleGrace keeps the MPS daemon running this long after the
	// node's last share is released (mps.Timing.IdleGrace).
	MPSIdleGrace time.Duration
	// MPSDaemonMode is where the node's MPS daemon runs: MPSDaemonProcess
	// (a child of the plugin) or MPSDaemonPod (a pod of its own, which
	// outlives the plugin's pod, configured by MPSDaemonPodOptions).
	MPSDaemonMode string
	MPSDaemonPodOptions
}

// MPSDaemonPodOptions configure the MPS daemon's pod (--mps-daemon=pod).
type MPSDaemonPodOptions struct {
	MPSDaemonImage string
	MPSDaemonPull  string
	// MPSDaemonPrefix names the pod <prefix>-mps-<node>.
	MPSDaemonPrefix string
	// MPSDaemonNamespace is where the daemon pod lives; empty: $POD_NAMESPACE.
	MPSDaemonNamespace string
	MPSDaemonDriver    string
	MPSDaemonSecrets   []string
	MPSDaemonPrio      string
}

// HostOptions say where the host's driver, devices and /proc files are as
// the host sees them, and where tangram-cdi-hook goes: what CDI specs and
// MIG devices need on real GPUs.
type HostOptions struct {
	HostDriverRoot string
	DevRoot        string
	CDIHookPath    string
	// DriverProcRoot (--driver-proc-root) is where the NVIDIA kernel
	// module's /proc files are, for MIG devices' capability minors and major
	// (real GPUs; pkg/gpu/nvcaps); not the slices command's --proc-root.
	DriverProcRoot string

	MemoryLimitHookBinary  string
	MemoryLimitHookDir     string
	MemoryLimitHookHostDir string
}

// HealthOptions configure the XID taint monitor (docs/health.md): on or
// off, how XIDs are classified, when a taint goes, and the fake cards'
// events file.
type HealthOptions struct {
	HealthMonitor           bool
	HealthInformationalXIDs string
	HealthIgnoredXIDs       string
	HealthRecoverAfter      time.Duration
	FakeHealthEventsFile    string
}

// MPS daemon modes (--mps-daemon).
const (
	MPSDaemonProcess = "process"
	MPSDaemonPod     = "pod"
)

// HealthEventsFileName is the fake cards' health control file in the
// state directory (see docs/health.md).
const HealthEventsFileName = "health-events.jsonl"

// AddFlags registers the flags of `dra-kubelet-plugin run`; defaults match
// the Helm chart.
func (o *Options) AddFlags(f *pflag.FlagSet) {
	o.addXIDTaintFlags(f)
	f.StringVar(&o.CDIRoot, "cdi-root", "/var/run/cdi", "directory for the transient CDI specs the container runtime reads")
	f.StringVar(&o.RegistrarDir, "kubelet-registrar-dir", "/var/lib/kubelet/plugins_registry", "kubelet's plugin registration directory")
	f.StringVar(&o.PluginDir, "kubelet-plugin-dir", "/var/lib/kubelet/plugins/"+device.DriverName, "directory of the plugin's DRA socket")
	f.StringVar(&o.StateDir, "state-dir", "/var/lib/tangram", "directory of the prepare checkpoint")
	f.StringVar(&o.PodUID, "pod-uid", os.Getenv("POD_UID"), "UID of the plugin's pod (default: $POD_UID); enables rolling updates of the plugin (docs/configuration.md)")
	f.StringVar(&o.MPSRoot, "mps-root", "/run/tangram/mps", "root of the node's MPS daemon directories (pipe, log, shm); keep it on a tmpfs")
	f.StringVar(&o.MPSControlBinary, "mps-control-binary", "", "MPS control binary (name in $PATH or path); default: nvidia-cuda-mps-control under --driver-root; unused with fake GPUs")
	f.StringVar(&o.MPSMode, "mps-mode", string(mps.ModeAuto), "how MPS shares are enforced: v3, classic, or auto (v3 on drivers of release 615 or later; docs/configuration.md)")
	f.StringVar(&o.MPSShmSize, "mps-shm-size", DefaultMPSShmSize, "size of each claim's own /dev/shm tmpfs on real GPUs; 0 is refused there (docs/configuration.md)")
	f.DurationVar(&o.MPSIdleGrace, "mps-idle-grace", 5*time.Minute, "keep the node's MPS daemon running this long after its last share is released, so that the next share finds it ready; 0 stops it at once")
	f.BoolVar(&o.MPSMultiUser, "mps-multi-user", true, "start the classic MPS daemon with -M: one server for pods of several users at once (docs/configuration.md); MPS v3 always is")
	f.StringVar(&o.MPSDaemonMode, "mps-daemon", MPSDaemonProcess, "where the MPS control daemon runs: process (a child of the plugin) or pod (a pod of its own on this node; docs/configuration.md)")
	f.StringVar(&o.MPSDaemonImage, "mps-daemon-image", "", "image of the MPS daemon pod (--mps-daemon=pod): the plugin's own image, which runs `dra-kubelet-plugin mps-daemon`")
	f.StringVar(&o.MPSDaemonPull, "mps-daemon-image-pull-policy", string(corev1.PullIfNotPresent), "image pull policy of the MPS daemon pod")
	f.StringVar(&o.MPSDaemonPrefix, "mps-daemon-pod-prefix", "tangram", "the MPS daemon pod is <prefix>-mps-<node> in --mps-daemon-namespace")
	f.StringVar(&o.MPSDaemonNamespace, "mps-daemon-namespace", "", "namespace of the MPS daemon pod (default: $POD_NAMESPACE; docs/configuration.md)")
	f.StringSliceVar(&o.MPSDaemonSecrets, "mps-daemon-image-pull-secrets", nil, "image pull secrets (names in --mps-daemon-namespace) of the MPS daemon pod")
	f.StringVar(&o.MPSDaemonPrio, "mps-daemon-priority-class", "system-node-critical", "priority class of the MPS daemon pod; empty for none (the chart passes kubeletPlugin.priorityClassName)")
	f.StringVar(&o.MPSDaemonDriver, "mps-daemon-driver-root", "", "host path of the NVIDIA driver root, mounted read-only at /driver-root in the MPS daemon pod (default: --host-driver-root); real GPUs only")
	f.StringVar(&o.HealthzAddress, "healthz-address", ":51515", "address for gRPC health (grpc.health.v1) and HTTP /healthz; empty disables")
	f.StringVar(&o.MetricsAddress, "metrics-address", ":9400", "address for Prometheus /metrics; empty disables")
	f.StringVar(&o.Kubeconfig, "kubeconfig", "", "kubeconfig file (default: $KUBECONFIG, then the in-cluster service account)")
	f.BoolVar(&o.Publish, "publish", true, "publish ResourceSlices for this node's GPUs")
	f.StringVar(&o.HostDriverRoot, "host-driver-root", "", "the driver root as the host sees it, written into CDI specs (chart: driverRoot; default: --driver-root); real GPUs only")
	f.StringVar(&o.DevRoot, "dev-root", "", "where the host's /dev is found (default: --driver-root); real GPUs only")
	f.StringVar(&o.DriverProcRoot, "driver-proc-root", "/proc", "where the NVIDIA kernel module's /proc files are read, for MIG devices' capability nodes; real GPUs only (docs/configuration.md)")
	f.StringVar(&o.CDIHookPath, "nvidia-cdi-hook-path", "", "host path of nvidia-cdi-hook, run by the container runtime (default: nvidia-cdi-hook under --driver-root, as the host sees it); real GPUs only")
	f.StringVar(&o.MemoryLimitHookBinary, "memory-limit-hook-binary", "", "tangram-cdi-hook in this container, copied to the host on nodes with hard share enforcement (default: tangram-cdi-hook beside this program)")
	f.StringVar(&o.MemoryLimitHookDir, "memory-limit-hook-dir", "", "directory tangram-cdi-hook is copied to, a host directory mounted here (default: <state-dir>/bin)")
	f.StringVar(&o.MemoryLimitHookHostDir, "memory-limit-hook-host-dir", "", "the same directory as the host sees it, written into CDI specs (default: --memory-limit-hook-dir)")
	f.StringSliceVar(&o.NonRootDeviceClasses, "nonroot-device-classes", nil, "device classes whose claims only locked-down pods may use, checked again at prepare; empty: no check (docs/configuration.md)")
	f.StringVar(&o.NonRootNamespaces, "nonroot-namespace-selector", "", "with --nonroot-device-classes: JSON label selector of the namespaces checked; empty or {}: all (docs/configuration.md)")
	f.DurationVar(&o.UsageInterval, "usage-interval", 10*time.Second, "read what runs on the cards this often, for each share's use, the shares over their memory and the processes no claim accounts for (docs/observability.md); 0 watches nothing")
	f.StringVar(&o.UsageProcRoot, "usage-proc-root", "/proc", "the /proc of the plugin's PID namespace, where the usage watcher finds each GPU process's pod; the plugin must run in the host's PID namespace (chart: hostPID), as NVML lists only the processes the caller's PID namespace sees")
	f.StringVar(&o.UsageOverShare, "usage-over-share", string(usage.ActionReport), "what is done to the pods of a share using more GPU memory than it was given: report (a Warning event and a metric) or evict (also evict them, honouring their PodDisruptionBudgets)")
	f.StringVar(&o.UsageUnaccounted, "usage-unaccounted", string(usage.ActionReport), "what is done to a pod running a GPU process on a card it holds no claim on: report (a Warning event and a metric) or evict (also evict it, honouring its PodDisruptionBudgets); a process outside any pod is only reported")
	f.StringVar(&o.FakeProcessesFile, "fake-processes-file", "", "fake GPUs only: JSON list of the processes the fake cards run (default: "+fakegpu.ProcessesFileName+" in --state-dir; docs/observability.md)")
	f.BoolVar(&o.Offline, "offline", false, "run without an API server: no kubelet registration, no publishing (for measuring or debugging)")
}

// addXIDTaintFlags registers the XID taint monitor's flags (their names,
// --health-*, predate the monitor's own name).
func (o *Options) addXIDTaintFlags(f *pflag.FlagSet) {
	f.BoolVar(&o.HealthMonitor, "health-monitor", true, "watch the cards' health, taint unhealthy cards in the ResourceSlice and report health to the kubelet (docs/health.md)")
	f.StringVar(&o.HealthInformationalXIDs, "health-informational-xids", joinXIDs(xidtaint.DefaultInformationalXIDs), "XIDs that only get a None taint (visible, not blocking); every XID in neither list gets NoSchedule")
	f.StringVar(&o.HealthIgnoredXIDs, "health-ignored-xids", "", "XIDs that get no taint at all (still logged)")
	f.DurationVar(&o.HealthRecoverAfter, "health-recover-after", xidtaint.DefaultRecoverAfter, "remove a card's XID taint when no new XID came for this long; 0 keeps it until the card reports recovery")
	f.StringVar(&o.FakeHealthEventsFile, "fake-health-events-file", "", "fake GPUs only: JSON-lines file of injected health events (default: "+HealthEventsFileName+" in --state-dir; `dra-kubelet-plugin health-event` appends to it)")
}

// Settings are the kubelet plugin's flags parsed and checked once
// (Options.Parse) and handed down as they are: the command uses them to
// find the node, Run to build the running parts. Only Parse makes them,
// so whoever holds Settings holds checked flags.
type Settings struct {
	Options
	// forFakeGPUs and forDriverRoot are the node facts Parse checked the
	// flags against (the GPU source's flags); Run refuses a Node that
	// differs.
	forFakeGPUs   bool
	forDriverRoot string

	mpsMode           mps.Mode
	claimShmSizeBytes int64
	// mpsDaemonPod is the daemon pod's settings that do not depend on the
	// node's cards (newShares fills those in); zero with --mps-daemon=process.
	mpsDaemonPod      daemon.PodSpec
	nonRootNamespaces labels.Selector
	xidPolicy         xidtaint.Policy
	overShare         usage.Action
	unaccounted       usage.Action
	parsed            bool
}

// Parse checks every flag and reports every bad one at once, each with its
// name and how to fix it, before anything touches the node. fake and
// driverRoot are what the GPU source flags say of the node: with real GPUs
// a claim's /dev/shm must have a size, and the MPS daemon pod mounts the
// driver root (--driver-root, as the host sees it).
func (o Options) Parse(fake bool, driverRoot string) (Settings, error) {
	s := Settings{Options: o, forFakeGPUs: fake, forDriverRoot: driverRoot}
	var errs []error
	var err error
	if s.mpsDaemonPod, err = o.mpsDaemonPod(fake, o.HostDriverRootOf(driverRoot).HostPath); err != nil {
		errs = append(errs, err)
	}
	if s.mpsMode, err = mps.ParseMode(o.MPSMode); err != nil {
		errs = append(errs, err)
	}
	if s.claimShmSizeBytes, err = o.claimShmSizeBytes(fake); err != nil {
		errs = append(errs, err)
	}
	if o.MPSIdleGrace < 0 {
		errs = append(errs, fmt.Errorf("--mps-idle-grace=%s is negative: use 0 to stop the MPS daemon as soon as the last share is released", o.MPSIdleGrace))
	}
	if s.nonRootNamespaces, err = o.nonRootNamespaces(); err != nil {
		errs = append(errs, err)
	}
	if s.xidPolicy, err = o.xidPolicy(); err != nil {
		errs = append(errs, err)
	}
	if s.overShare, err = usage.ParseAction("usage-over-share", o.UsageOverShare); err != nil {
		errs = append(errs, err)
	}
	if s.unaccounted, err = usage.ParseAction("usage-unaccounted", o.UsageUnaccounted); err != nil {
		errs = append(errs, err)
	}
	if o.UsageInterval < 0 {
		errs = append(errs, fmt.Errorf("--usage-interval=%s is negative: use 0 to watch nothing", o.UsageInterval))
	}
	if err := errors.Join(errs...); err != nil {
		return Settings{}, err
	}
	s.parsed = true
	return s, nil
}

// DefaultMPSShmSize is --mps-shm-size's default: a container runtime's own
// /dev/shm size (containerd's and CRI-O's sandbox default, Docker's), small
// because a claim's /dev/shm outlives the pods that write it. Its tmpfs
// pages stay charged to the memory cgroup of the pod that wrote them; once
// that pod is gone they are charged to the parent (kubepods), that is to no
// pod, until the claim is unprepared: a claim shared by pods, or kept by
// another, holds memory the kubelet's eviction cannot attribute. More is an
// admin's opt-in (chart kubeletPlugin.mps.shmSize).
const DefaultMPSShmSize = "64Mi"

// mpsShmSizeBytes parses --mps-shm-size. A negative size would leave each
// claim's /dev/shm without a bound: it is refused.
func (o *Options) mpsShmSizeBytes() (int64, error) {
	size, err := resource.ParseQuantity(o.MPSShmSize)
	if err != nil {
		return 0, fmt.Errorf("--mps-shm-size=%s: want a size such as 64Mi or 1Gi (%v)", o.MPSShmSize, err)
	}
	if size.Sign() < 0 {
		return 0, fmt.Errorf("--mps-shm-size=%s is negative: each claim's /dev/shm would have no bound; want a size such as 64Mi", o.MPSShmSize)
	}
	return size.Value(), nil
}

// claimShmSizeBytes is --mps-shm-size for a node with real GPUs (fake
// false) or fake ones. On real GPUs 0 is refused: each claim's /dev/shm
// would be a plain directory under --mps-root, on the host's file system
// (usually /run, itself a tmpfs), with no bound, its pages charged to no
// pod once their writer is gone. Fake GPUs always use plain directories
// (no tmpfs is mounted there), so any size is taken.
func (o *Options) claimShmSizeBytes(fake bool) (int64, error) {
	size, err := o.mpsShmSizeBytes()
	if err != nil {
		return 0, err
	}
	if size == 0 && !fake {
		return 0, fmt.Errorf("--mps-shm-size=%s: each claim's /dev/shm would be a plain directory under --mps-root (%s) on the host, with no size bound, "+
			"its pages charged to no pod once the pod that wrote them is gone; set a size such as %s (chart kubeletPlugin.mps.shmSize), "+
			"which the plugin mounts as a tmpfs per claim (privileged, with --mps-root mounted Bidirectional, as the chart does)",
			o.MPSShmSize, o.MPSRoot, DefaultMPSShmSize)
	}
	return size, nil
}

// nonRootNamespaces parses --nonroot-namespace-selector; nil: every namespace.
func (o *Options) nonRootNamespaces() (labels.Selector, error) {
	selector, err := podcheck.ParseNamespaceSelector(o.NonRootNamespaces)
	if err != nil {
		return nil, fmt.Errorf("--nonroot-namespace-selector: %w", err)
	}
	return selector, nil
}

// xidPolicy parses the XID lists and checks --health-recover-after.
func (o *Options) xidPolicy() (xidtaint.Policy, error) {
	informational, err := xidtaint.ParseXIDList(o.HealthInformationalXIDs)
	if err != nil {
		return xidtaint.Policy{}, fmt.Errorf("--health-informational-xids: %w", err)
	}
	ignored, err := xidtaint.ParseXIDList(o.HealthIgnoredXIDs)
	if err != nil {
		return xidtaint.Policy{}, fmt.Errorf("--health-ignored-xids: %w", err)
	}
	p := xidtaint.Policy{InformationalXIDs: informational, IgnoredXIDs: ignored}
	if err := p.Validate(); err != nil {
		return xidtaint.Policy{}, fmt.Errorf("--health-informational-xids and --health-ignored-xids: %w", err)
	}
	if o.HealthRecoverAfter < 0 {
		return xidtaint.Policy{}, fmt.Errorf("--health-recover-after=%s is negative: use 0 to recover only on a recovery event", o.HealthRecoverAfter)
	}
	return p, nil
}

// mpsDaemonPodCommand runs the daemon in the plugin's image (the chart's
// command is the same binary).
var mpsDaemonPodCommand = daemon.PodCommand

// mpsDaemonPod checks the --mps-daemon flags and returns the pod settings
// that do not depend on the node's cards (the driver fills those in).
// hostDriverRoot is the driver root as the host sees it: the daemon pod's
// default when --mps-daemon-driver-root is not set.
func (o *Options) mpsDaemonPod(fake bool, hostDriverRoot string) (daemon.PodSpec, error) {
	switch o.MPSDaemonMode {
	case MPSDaemonProcess:
		return daemon.PodSpec{}, nil
	case MPSDaemonPod:
	default:
		return daemon.PodSpec{}, fmt.Errorf("--mps-daemon=%q: want %s or %s", o.MPSDaemonMode, MPSDaemonProcess, MPSDaemonPod)
	}
	namespace := o.MPSDaemonNamespace
	if namespace == "" {
		namespace = os.Getenv("POD_NAMESPACE")
	}
	switch {
	case o.MPSDaemonImage == "":
		return daemon.PodSpec{}, errors.New("--mps-daemon=pod needs --mps-daemon-image (the plugin's own image)")
	case namespace == "":
		return daemon.PodSpec{}, errors.New("--mps-daemon=pod needs --mps-daemon-namespace or $POD_NAMESPACE (the namespace the daemon pod is created in)")
	case strings.HasPrefix(namespace, "kube-"):
		// The plugin may create pods where its daemon lives; kube-*
		// namespaces hold the cluster's own components and are often
		// exempt from admission policies.
		source := "--mps-daemon-namespace"
		if o.MPSDaemonNamespace == "" {
			source = "$POD_NAMESPACE"
		}
		return daemon.PodSpec{}, fmt.Errorf("%s=%s: the MPS daemon pod may not live in a kube-* namespace, which holds the cluster's own components and would come within reach of the plugin's pod rights; give it a namespace of its own (--mps-daemon-namespace)", source, namespace)
	}
	pull := corev1.PullPolicy(o.MPSDaemonPull)
	switch pull {
	case corev1.PullAlways, corev1.PullIfNotPresent, corev1.PullNever:
	default:
		return daemon.PodSpec{}, fmt.Errorf("--mps-daemon-image-pull-policy=%q: want Always, IfNotPresent or Never", o.MPSDaemonPull)
	}
	cfg := daemon.PodSpec{
		Prefix:            o.MPSDaemonPrefix,
		Namespace:         namespace,
		PodImage:          daemon.PodImage{Image: o.MPSDaemonImage, ImagePullPolicy: pull, ImagePullSecrets: o.MPSDaemonSecrets},
		Command:           mpsDaemonPodCommand,
		PriorityClassName: o.MPSDaemonPrio,
	}
	if !fake {
		cfg.DriverRoot = cmp.Or(o.MPSDaemonDriver, o.HostDriverRoot, hostDriverRoot)
	}
	return cfg, nil
}

// HostDriverRootOf is the driver root (--driver-root, path) as the plugin and,
// with --host-driver-root, as the host sees it.
func (o *Options) HostDriverRootOf(path string) driverroot.Root {
	return driverroot.Root{Path: path, HostPath: cmp.Or(o.HostDriverRoot, path)}
}

// NewKubeClient returns the API server's client; nil with --offline.
func (o *Options) NewKubeClient() (kubernetes.Interface, error) {
	if o.Offline {
		return nil, nil
	}
	config, _, err := kubeconfig.Load(kubeconfig.Options{Path: o.Kubeconfig, UserAgent: "tangram-dra-kubelet-plugin"})
	if err != nil {
		return nil, fmt.Errorf("%w (or pass --offline)", err)
	}
	client, err := kubernetes.NewForConfig(config)
	if err != nil {
		return nil, fmt.Errorf("creating Kubernetes client: %w", err)
	}
	return client, nil
}

// NVIDIACDIHookPath is --nvidia-cdi-hook-path, or else nvidia-cdi-hook
// under the driver root (a path nvcdi rewrites to the host's view with the
// rest).
func (o *Options) NVIDIACDIHookPath(root driverroot.Root) (string, error) {
	if o.CDIHookPath != "" {
		return o.CDIHookPath, nil
	}
	hook, err := root.Executable(driverroot.NVIDIACDIHook)
	if err != nil {
		return "", fmt.Errorf("CDI specs for real GPUs call nvidia-cdi-hook: %w; or pass --nvidia-cdi-hook-path=<host path> (make nvidia-cdi-hook builds one)", err)
	}
	return hook, nil
}

// InstallMemoryLimitHook copies tangram-cdi-hook to the host, where the
// container runtime runs it, and says how CDI specs call it.
func (o *Options) InstallMemoryLimitHook(root driverroot.Root) (*cdi.MemoryLimitHook, error) {
	src := o.MemoryLimitHookBinary
	if src == "" {
		self, err := os.Executable()
		if err != nil {
			return nil, fmt.Errorf("finding tangram-cdi-hook beside this program: %w; pass --memory-limit-hook-binary", err)
		}
		src = filepath.Join(filepath.Dir(self), "tangram-cdi-hook")
	}
	dir := cmp.Or(o.MemoryLimitHookDir, filepath.Join(o.StateDir, "bin"))
	hostDir := cmp.Or(o.MemoryLimitHookHostDir, dir)
	installed, err := hostbin.Install(src, dir)
	if err != nil {
		return nil, fmt.Errorf("this node enforces shares hard, so every share's container needs tangram-cdi-hook: %w (--memory-limit-hook-binary)", err)
	}
	// Which pod holds each claim, for the hook (pkg/plugin/memlimit/records):
	// the state directory is mounted at the same path on the host.
	stateDir := plugin.MemoryLimitStateDir(o.StateDir)
	if err := os.MkdirAll(stateDir, 0o700); err != nil {
		return nil, fmt.Errorf("creating the memory limit hook's state directory: %w", err)
	}
	return &cdi.MemoryLimitHook{Path: filepath.Join(hostDir, filepath.Base(installed)), DriverRoot: cmp.Or(root.HostPath, root.Path), StateDir: stateDir}, nil
}

// NewHealthWatcher returns where the XID taint monitor's events come from:
// the events file for fake cards, NVML's event set for real ones; nil when
// --health-monitor=false or when the source cannot watch.
func (o *Options) NewHealthWatcher(ctx context.Context, src gpu.Source, fake bool) gpu.HealthWatcher {
	if !o.HealthMonitor {
		klog.FromContext(ctx).Info("GPU health monitor disabled (--health-monitor=false): no health taints, the kubelet gets no device health")
		return nil
	}
	if fake {
		return gpu.FileHealthWatcher{Path: HealthEventsFile(o.FakeHealthEventsFile, o.StateDir)}
	}
	if w, ok := src.(gpu.HealthWatcher); ok {
		return w
	}
	klog.FromContext(ctx).Info("This GPU source cannot watch health events; health is not monitored")
	return nil
}

// NewProcessLister returns what lists the cards' processes for the usage
// watcher: the fake cards' file, or NVML's source; nil when the source
// cannot list them.
func (o *Options) NewProcessLister(src gpu.Source, fake bool) gpu.ProcessLister {
	if fake {
		return fakegpu.ProcessesFile{Path: cmp.Or(o.FakeProcessesFile, filepath.Join(o.StateDir, fakegpu.ProcessesFileName))}
	}
	lister, _ := src.(gpu.ProcessLister)
	return lister
}

// HealthEventsFile is the fake cards' events file: --fake-health-events-file,
// else HealthEventsFileName in the state directory.
func HealthEventsFile(flag, stateDir string) string {
	return cmp.Or(flag, filepath.Join(stateDir, HealthEventsFileName))
}

func joinXIDs(xids []uint64) string {
	s := make([]string, len(xids))
	for i, x := range xids {
		s[i] = strconv.FormatUint(x, 10)
	}
	return strings.Join(s, ",")
}
