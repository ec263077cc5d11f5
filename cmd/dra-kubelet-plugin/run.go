package main

import (
	"cmp"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/client-go/kubernetes"
	"k8s.io/dynamic-resource-allocation/resourceslice"
	"k8s.io/klog/v2"

	"github.com/tangram-gpu/tangram/pkg/device"
	"github.com/tangram-gpu/tangram/pkg/gpu"
	"github.com/tangram-gpu/tangram/pkg/kubeconfig"
	"github.com/tangram-gpu/tangram/pkg/plugin"
	"github.com/tangram-gpu/tangram/pkg/plugin/cdi"
	"github.com/tangram-gpu/tangram/pkg/plugin/cdi/nvidia"
	"github.com/tangram-gpu/tangram/pkg/plugin/driverroot"
	"github.com/tangram-gpu/tangram/pkg/plugin/enforcement"
	"github.com/tangram-gpu/tangram/pkg/plugin/hostbin"
	"github.com/tangram-gpu/tangram/pkg/plugin/mps"
	"github.com/tangram-gpu/tangram/pkg/resourceslices"
)

// runFlags are the flags of the long-running mode besides the GPU source
// and device model flags it shares with `slices`.
type runFlags struct {
	CDIRoot          string
	RegistrarDir     string
	PluginDir        string
	StateDir         string
	PodUID           string
	MPSRoot          string
	MPSControlBinary string
	MPSMultiUser     bool
	MPSMode          string
	MPSShmSize       string
	MPSIdleGrace     time.Duration
	MPSDaemon        string
	MPSDaemonImage   string
	MPSDaemonPull    string
	MPSDaemonPrefix  string
	// MPSDaemonNamespace is where the daemon pod lives; empty: $POD_NAMESPACE.
	MPSDaemonNamespace string
	MPSDaemonDriver    string
	MPSDaemonSecrets   []string
	MPSDaemonPrio      string
	HealthzAddress     string
	MetricsAddress     string
	Kubeconfig         string
	Publish            bool
	Offline            bool
	HostDriverRoot     string
	DevRoot            string
	CDIHookPath        string

	MemoryLimitHookBinary  string
	MemoryLimitHookDir     string
	MemoryLimitHookHostDir string

	NonRootDeviceClasses []string
	NonRootNamespaces    string
}

func newRunCommand() *cobra.Command {
	var (
		source     gpuSourceFlags
		model      deviceModelFlags
		flags      runFlags
		healthOpts healthFlags
	)
	cmd := &cobra.Command{
		Use:   "run",
		Short: "Run the kubelet plugin: publish this node's GPUs and prepare claims",
		Example: `  # on a node without GPUs, as root, with a kubeconfig:
  dra-kubelet-plugin run --node-name $(hostname) --fake-profile dgx-h100 --kubeconfig /etc/kubernetes/admin.conf
  # without any cluster (state recovery, health and metrics only):
  dra-kubelet-plugin run --node-name n1 --fake-profile pcie-l4 --offline`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := source.Complete(); err != nil {
				return err
			}
			// Validate the model flags before touching the node.
			if _, err := model.Options(source.NodeName, nil); err != nil {
				return err
			}
			mpsPod, err := flags.mpsDaemonPod(source.Fake(), source.DriverRoot)
			if err != nil {
				return err
			}
			mpsMode, err := mps.ParseMode(flags.MPSMode)
			if err != nil {
				return err
			}
			shmSizeBytes, err := flags.mpsShmSizeBytes()
			if err != nil {
				return err
			}
			nonRootNamespaces, err := plugin.ParseNamespaceSelector(flags.NonRootNamespaces)
			if err != nil {
				return fmt.Errorf("--nonroot-namespace-selector: %w", err)
			}
			healthPolicy, err := healthOpts.policy()
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			client, err := flags.kubeClient()
			if err != nil {
				return err
			}
			src, done, err := source.Open(ctx)
			if err != nil {
				return err
			}
			defer done()
			gpus, err := src.GPUs(ctx)
			if err != nil {
				return fmt.Errorf("listing GPUs: %w", err)
			}
			gpu.LogMIG(klog.FromContext(ctx), gpus)
			var hardware cdi.HardwareEdits = cdi.NoHardware{}
			root := flags.driverRoot(source)
			var nvmlLibrary string
			if !source.Fake() {
				if nvmlLibrary, err = root.NVMLLibraryPath(); err != nil {
					return err
				}
				hook, err := flags.cdiHookPath(root)
				if err != nil {
					return err
				}
				hw, err := nvidia.New(ctx, nvidia.Options{DriverRoot: root.Path, HostDriverRoot: root.HostPath, DevRoot: flags.DevRoot,
					CDIHookPath: hook, NVMLLibrary: nvmlLibrary})
				if err != nil {
					return fmt.Errorf("setting up CDI edits for real GPUs: %w", err)
				}
				// Driver discovery is slow; pay for it before the first prepare.
				if err := hw.Warm(gpus); err != nil {
					return fmt.Errorf("discovering NVIDIA driver files for CDI (--driver-root=%s): %w", root.Path, err)
				}
				hardware = hw
			}
			caps := model.Enforcement(ctx, source.Fake(), src, gpus)
			var memoryLimitHook *cdi.MemoryLimitHook
			if caps.Level == enforcement.Hard {
				if memoryLimitHook, err = flags.installMemoryLimitHook(root); err != nil {
					return err
				}
			}
			return plugin.Run(ctx, plugin.PluginOptions{
				Hardware:               hardware,
				MemoryLimitHook:        memoryLimitHook,
				MPSv3Available:         caps.MPSv3,
				NodeName:               source.NodeName,
				GPUs:                   gpus,
				FakeGPUs:               source.Fake(),
				Sharing:                model.Sharing == "enabled",
				ShareBackend:           model.ShareBackend,
				ShareEnforcement:       string(caps.Level),
				ShareEnforcementReason: caps.ReasonCode,
				Resources: func(labels map[string]string) (*resourceslice.DriverResources, error) {
					opts, err := model.Options(source.NodeName, labels)
					if err != nil {
						return nil, err
					}
					opts.Sysfs = source.Sysfs()
					opts.ShareEnforcement, opts.ShareEnforcementReason = string(caps.Level), caps.ReasonCode
					// opts.ShareBackend comes from --share-backend (model.Options).
					return resourceslices.DriverResources(gpus, opts)
				},
				CDIRoot:          flags.CDIRoot,
				RegistrarDir:     flags.RegistrarDir,
				PluginDir:        flags.PluginDir,
				StateDir:         flags.StateDir,
				PodUID:           flags.PodUID,
				MPSRoot:          flags.MPSRoot,
				MPSControlBinary: flags.MPSControlBinary,
				DriverRoot:       root,
				NVMLLibrary:      nvmlLibrary,
				MPSMultiUser:     flags.MPSMultiUser,
				MPSMode:          mpsMode,
				MPSShmSizeBytes:  shmSizeBytes,
				MPSIdleGrace:     flags.MPSIdleGrace,
				MPSDaemonMode:    flags.MPSDaemon,
				MPSDaemonPod:     mpsPod,
				HealthzAddress:   flags.HealthzAddress,
				MetricsAddress:   flags.MetricsAddress,
				KubeClient:       client,
				Publish:          flags.Publish,

				HealthWatcher:      healthOpts.watcher(ctx, src, source.Fake(), flags.StateDir),
				HealthPolicy:       healthPolicy,
				HealthRecoverAfter: healthOpts.RecoverAfter,

				NonRootClasses:    flags.NonRootDeviceClasses,
				NonRootNamespaces: nonRootNamespaces,
			})
		},
	}
	source.AddFlags(cmd.Flags())
	model.AddFlags(cmd.Flags())
	healthOpts.AddFlags(cmd.Flags())
	f := cmd.Flags()
	f.StringVar(&flags.CDIRoot, "cdi-root", "/var/run/cdi", "directory for the transient CDI specs the container runtime reads")
	f.StringVar(&flags.RegistrarDir, "kubelet-registrar-dir", "/var/lib/kubelet/plugins_registry", "kubelet's plugin registration directory")
	f.StringVar(&flags.PluginDir, "kubelet-plugin-dir", "/var/lib/kubelet/plugins/"+device.DriverName, "directory of the plugin's DRA socket")
	f.StringVar(&flags.StateDir, "state-dir", "/var/lib/tangram", "directory of the prepare checkpoint")
	f.StringVar(&flags.PodUID, "pod-uid", os.Getenv("POD_UID"), "UID of the plugin's pod (default: $POD_UID, which the chart sets from the downward API); enables rolling updates, where the old and the new plugin pod of a node run side by side; empty for one plugin process per node")
	f.StringVar(&flags.MPSRoot, "mps-root", "/run/tangram/mps", "root of the node's MPS daemon directories (pipe, log, shm); keep it on a tmpfs")
	f.StringVar(&flags.MPSControlBinary, "mps-control-binary", "", "MPS control binary (name in $PATH or path); default: nvidia-cuda-mps-control under --driver-root; unused with fake GPUs")
	f.StringVar(&flags.MPSMode, "mps-mode", string(mps.ModeAuto), "how MPS shares are enforced: v3 (one MPS v3 server for the node, a namespace per claim with its active-thread percentage set by the daemon, a /dev/shm per claim), classic (the legacy daemon, limits in the client environment) or auto (v3 when the driver's release is 615 or later)")
	f.StringVar(&flags.MPSShmSize, "mps-shm-size", "8Gi", "size of each claim's own /dev/shm tmpfs (every claim, whole cards and shares; real GPUs); 0 leaves a plain directory under --mps-root")
	f.DurationVar(&flags.MPSIdleGrace, "mps-idle-grace", 5*time.Minute, "keep the node's MPS daemon running this long after its last share is released, so that the next share finds it ready; 0 stops it at once")
	f.BoolVar(&flags.MPSMultiUser, "mps-multi-user", true, "start the classic MPS daemon with -M, so that pods running as different users are served at once by one MPS server (a fault in one client may then affect the others, as under MPS v3); false: one user at a time, the pods of another user wait until the running server's clients have all exited. MPS v3 always runs multi-user (-m)")
	f.StringVar(&flags.MPSDaemon, "mps-daemon", plugin.MPSDaemonProcess, "where the MPS control daemon runs: process (a child of the plugin; dies with the plugin's container) or pod (a pod of its own on this node, created through the API server; survives plugin restarts and upgrades)")
	f.StringVar(&flags.MPSDaemonImage, "mps-daemon-image", "", "image of the MPS daemon pod (--mps-daemon=pod): the plugin's own image, which runs `dra-kubelet-plugin mps-daemon`")
	f.StringVar(&flags.MPSDaemonPull, "mps-daemon-image-pull-policy", string(corev1.PullIfNotPresent), "image pull policy of the MPS daemon pod")
	f.StringVar(&flags.MPSDaemonPrefix, "mps-daemon-pod-prefix", "tangram", "the MPS daemon pod is <prefix>-mps-<node> in --mps-daemon-namespace")
	f.StringVar(&flags.MPSDaemonNamespace, "mps-daemon-namespace", "", "namespace of the MPS daemon pod (default: $POD_NAMESPACE); the chart gives the daemon pods a namespace of their own, so the plugin needs no rights where the controller and scheduler live")
	f.StringSliceVar(&flags.MPSDaemonSecrets, "mps-daemon-image-pull-secrets", nil, "image pull secrets (names in --mps-daemon-namespace) of the MPS daemon pod")
	f.StringVar(&flags.MPSDaemonPrio, "mps-daemon-priority-class", "system-node-critical", "priority class of the MPS daemon pod; empty for none (the chart passes kubeletPlugin.priorityClassName)")
	f.StringVar(&flags.MPSDaemonDriver, "mps-daemon-driver-root", "", "host path of the NVIDIA driver root, mounted read-only at /driver-root in the MPS daemon pod (default: --host-driver-root); real GPUs only")
	f.StringVar(&flags.HealthzAddress, "healthz-address", ":51515", "address for gRPC health (grpc.health.v1) and HTTP /healthz; empty disables")
	f.StringVar(&flags.MetricsAddress, "metrics-address", ":9400", "address for Prometheus /metrics; empty disables")
	f.StringVar(&flags.Kubeconfig, "kubeconfig", "", "kubeconfig file (default: $KUBECONFIG, then the in-cluster service account)")
	f.BoolVar(&flags.Publish, "publish", true, "publish ResourceSlices for this node's GPUs")
	f.StringVar(&flags.HostDriverRoot, "host-driver-root", "", "the same driver root as the host sees it (chart: driverRoot, e.g. /run/nvidia/driver), written into CDI specs; default: --driver-root; real GPUs only")
	f.StringVar(&flags.DevRoot, "dev-root", "", "where the host's /dev is found (default: --driver-root); real GPUs only")
	f.StringVar(&flags.CDIHookPath, "nvidia-cdi-hook-path", "", "host path of nvidia-cdi-hook, run by the container runtime (default: nvidia-cdi-hook under --driver-root, as the host sees it); real GPUs only")
	f.StringVar(&flags.MemoryLimitHookBinary, "memory-limit-hook-binary", "", "tangram-cdi-hook in this container, copied to the host on nodes with hard share enforcement (default: tangram-cdi-hook beside this program)")
	f.StringVar(&flags.MemoryLimitHookDir, "memory-limit-hook-dir", "", "directory tangram-cdi-hook is copied to, a host directory mounted here (default: <state-dir>/bin)")
	f.StringVar(&flags.MemoryLimitHookHostDir, "memory-limit-hook-host-dir", "", "the same directory as the host sees it, written into CDI specs (default: --memory-limit-hook-dir)")
	f.StringSliceVar(&flags.NonRootDeviceClasses, "nonroot-device-classes", nil, "device classes whose claims only locked-down pods may use (runAsNonRoot, allowPrivilegeEscalation: false, no added capabilities, not privileged on every container), checked again at prepare with the pods that reserve the claim; the chart passes admissionPolicy.sharedGPURunAsNonRoot's classes. Empty: no check")
	f.StringVar(&flags.NonRootNamespaces, "nonroot-namespace-selector", "", "with --nonroot-device-classes: check only the pods of namespaces this label selector (a metav1.LabelSelector in JSON, as the chart renders admissionPolicy.sharedGPURunAsNonRoot.namespaceSelector) selects; empty or {}: every namespace")
	f.BoolVar(&flags.Offline, "offline", false, "run without an API server: no kubelet registration, no publishing (for measuring or debugging)")
	return cmd
}

// mpsDaemonPodCommand runs the daemon in the plugin's image (the chart's
// command is the same binary).
var mpsDaemonPodCommand = mps.DaemonPodCommand

// mpsShmSizeBytes checks --mps-shm-size and --mps-idle-grace and returns
// the size in bytes. A negative size would leave each claim's /dev/shm
// without a bound, a negative grace is meaningless: both are refused.
func (f *runFlags) mpsShmSizeBytes() (int64, error) {
	size, err := resource.ParseQuantity(f.MPSShmSize)
	if err != nil {
		return 0, fmt.Errorf("--mps-shm-size=%s: want a size such as 64Mi or 1Gi, or 0 for plain directories (%v)", f.MPSShmSize, err)
	}
	if size.Sign() < 0 {
		return 0, fmt.Errorf("--mps-shm-size=%s is negative: each claim's /dev/shm would have no bound; want a size such as 64Mi, or 0 for plain directories", f.MPSShmSize)
	}
	if f.MPSIdleGrace < 0 {
		return 0, fmt.Errorf("--mps-idle-grace=%s is negative: use 0 to stop the MPS daemon as soon as the last share is released", f.MPSIdleGrace)
	}
	return size.Value(), nil
}

// driverRoot is the driver root as the plugin and as the host see it.
func (f *runFlags) driverRoot(source gpuSourceFlags) driverroot.Root {
	return driverroot.Root{Path: source.DriverRoot, HostPath: cmp.Or(f.HostDriverRoot, source.DriverRoot)}
}

// installMemoryLimitHook copies tangram-cdi-hook to the host, where the
// container runtime runs it, and says how CDI specs call it.
func (f *runFlags) installMemoryLimitHook(root driverroot.Root) (*cdi.MemoryLimitHook, error) {
	src := f.MemoryLimitHookBinary
	if src == "" {
		self, err := os.Executable()
		if err != nil {
			return nil, fmt.Errorf("finding tangram-cdi-hook beside this program: %w; pass --memory-limit-hook-binary", err)
		}
		src = filepath.Join(filepath.Dir(self), "tangram-cdi-hook")
	}
	dir := f.MemoryLimitHookDir
	if dir == "" {
		dir = filepath.Join(f.StateDir, "bin")
	}
	hostDir := f.MemoryLimitHookHostDir
	if hostDir == "" {
		hostDir = dir
	}
	installed, err := hostbin.Install(src, dir)
	if err != nil {
		return nil, fmt.Errorf("this node enforces shares hard, so every share's container needs tangram-cdi-hook: %w (--memory-limit-hook-binary)", err)
	}
	hostDriverRoot := root.HostPath
	if hostDriverRoot == "" {
		hostDriverRoot = root.Path
	}
	// Which pod holds each claim, for the hook (pkg/plugin/memlimit/records):
	// the state directory is mounted at the same path on the host.
	stateDir := filepath.Join(f.StateDir, "memory-limits")
	if err := os.MkdirAll(stateDir, 0o700); err != nil {
		return nil, fmt.Errorf("creating the memory limit hook's state directory: %w", err)
	}
	return &cdi.MemoryLimitHook{Path: filepath.Join(hostDir, filepath.Base(installed)), DriverRoot: hostDriverRoot, StateDir: stateDir}, nil
}

// cdiHookPath is --nvidia-cdi-hook-path, or else nvidia-cdi-hook under the
// driver root (a path nvcdi rewrites to the host's view with the rest).
func (f *runFlags) cdiHookPath(root driverroot.Root) (string, error) {
	if f.CDIHookPath != "" {
		return f.CDIHookPath, nil
	}
	hook, err := root.Executable(driverroot.NVIDIACDIHook)
	if err != nil {
		return "", fmt.Errorf("CDI specs for real GPUs call nvidia-cdi-hook: %w; or pass --nvidia-cdi-hook-path=<host path> (make nvidia-cdi-hook builds one)", err)
	}
	return hook, nil
}

// mpsDaemonPod checks the --mps-daemon flags and returns the pod settings
// that do not depend on the node's cards (the driver fills those in).
// driverRoot is --driver-root: the daemon pod's default host driver root
// when neither --mps-daemon-driver-root nor --host-driver-root is set.
func (f *runFlags) mpsDaemonPod(fake bool, driverRoot string) (mps.DaemonPodConfig, error) {
	switch f.MPSDaemon {
	case plugin.MPSDaemonProcess:
		return mps.DaemonPodConfig{}, nil
	case plugin.MPSDaemonPod:
	default:
		return mps.DaemonPodConfig{}, fmt.Errorf("--mps-daemon=%q: want %s or %s", f.MPSDaemon, plugin.MPSDaemonProcess, plugin.MPSDaemonPod)
	}
	namespace := f.MPSDaemonNamespace
	if namespace == "" {
		namespace = os.Getenv("POD_NAMESPACE")
	}
	switch {
	case f.MPSDaemonImage == "":
		return mps.DaemonPodConfig{}, errors.New("--mps-daemon=pod needs --mps-daemon-image (the plugin's own image)")
	case namespace == "":
		return mps.DaemonPodConfig{}, errors.New("--mps-daemon=pod needs --mps-daemon-namespace or $POD_NAMESPACE (the namespace the daemon pod is created in)")
	case strings.HasPrefix(namespace, "kube-"):
		// The plugin may create pods where its daemon lives; kube-*
		// namespaces hold the cluster's own components and are often
		// exempt from admission policies.
		source := "--mps-daemon-namespace"
		if f.MPSDaemonNamespace == "" {
			source = "$POD_NAMESPACE"
		}
		return mps.DaemonPodConfig{}, fmt.Errorf("%s=%s: the MPS daemon pod may not live in a kube-* namespace, which holds the cluster's own components and would come within reach of the plugin's pod rights; give it a namespace of its own (--mps-daemon-namespace)", source, namespace)
	}
	pull := corev1.PullPolicy(f.MPSDaemonPull)
	switch pull {
	case corev1.PullAlways, corev1.PullIfNotPresent, corev1.PullNever:
	default:
		return mps.DaemonPodConfig{}, fmt.Errorf("--mps-daemon-image-pull-policy=%q: want Always, IfNotPresent or Never", f.MPSDaemonPull)
	}
	cfg := mps.DaemonPodConfig{
		Prefix:            f.MPSDaemonPrefix,
		Namespace:         namespace,
		Image:             f.MPSDaemonImage,
		ImagePullPolicy:   pull,
		ImagePullSecrets:  f.MPSDaemonSecrets,
		Command:           mpsDaemonPodCommand,
		PriorityClassName: f.MPSDaemonPrio,
	}
	if !fake {
		cfg.DriverRoot = cmp.Or(f.MPSDaemonDriver, f.HostDriverRoot, driverRoot)
	}
	return cfg, nil
}

// kubeClient returns nil in offline mode.
func (f *runFlags) kubeClient() (kubernetes.Interface, error) {
	if f.Offline {
		return nil, nil
	}
	config, _, err := kubeconfig.Load(kubeconfig.Options{Path: f.Kubeconfig, UserAgent: "tangram-dra-kubelet-plugin"})
	if err != nil {
		return nil, fmt.Errorf("%w (or pass --offline)", err)
	}
	client, err := kubernetes.NewForConfig(config)
	if err != nil {
		return nil, fmt.Errorf("creating Kubernetes client: %w", err)
	}
	return client, nil
}
