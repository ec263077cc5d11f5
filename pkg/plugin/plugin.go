package plugin

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/dynamic-resource-allocation/resourceslice"
	"k8s.io/klog/v2"

	"github.com/tangram-gpu/tangram/pkg/device"
	"github.com/tangram-gpu/tangram/pkg/gpu"
	"github.com/tangram-gpu/tangram/pkg/plugin/cdi"
	"github.com/tangram-gpu/tangram/pkg/plugin/checkpoint"
	"github.com/tangram-gpu/tangram/pkg/plugin/driverroot"
	gpuhealth "github.com/tangram-gpu/tangram/pkg/plugin/health"
	"github.com/tangram-gpu/tangram/pkg/plugin/mps"
	"github.com/tangram-gpu/tangram/pkg/plugin/mps/control"
	"github.com/tangram-gpu/tangram/pkg/plugin/mps/standin"
)

// PluginOptions configure the long-running kubelet plugin.
type PluginOptions struct {
	NodeName string
	GPUs     []gpu.GPU
	// FakeGPUs selects the simulated MPS backend and no hardware edits.
	FakeGPUs bool
	// Resources builds what is published from the Node's labels.
	Resources func(nodeLabels map[string]string) (*resourceslice.DriverResources, error)
	// Sharing enables MPS shares (--sharing=enabled).
	Sharing bool
	// ShareBackend is --share-backend ("mps" or "none"), the backend of
	// every share of this node (Config.ShareBackend).
	ShareBackend string
	// ShareEnforcement and ShareEnforcementReason are what the node
	// publishes (pkg/plugin/enforcement), for the claims' status and the
	// Warning events on pods whose shares are not enforced hard.
	ShareEnforcement       string
	ShareEnforcementReason string

	CDIRoot      string
	RegistrarDir string
	PluginDir    string
	StateDir     string
	MPSRoot      string
	// PodUID is the UID of the plugin's pod. Set, it enables rolling
	// updates: the old and the new plugin pod of a node run side by side,
	// each with sockets named by its UID. Empty: one plugin per node.
	PodUID string
	// MPSControlBinary is nvidia-cuda-mps-control as a name in $PATH or a
	// path; empty means the one under DriverRoot (real GPUs).
	MPSControlBinary string
	// DriverRoot is the NVIDIA driver installation (real GPUs).
	DriverRoot driverroot.Root
	// NVMLLibrary is libnvidia-ml.so.1 under DriverRoot, for compute modes
	// (real GPUs).
	NVMLLibrary string
	// MPSMultiUser starts the daemon with -M (clients of any UID).
	MPSMultiUser bool
	// MPSMode is --mps-mode: classic MPS, MPS v3 namespaces, or auto (v3
	// on drivers that have it).
	MPSMode mps.Mode
	// MPSv3Available is what capability detection found: the node's
	// driver has MPS v3 (release 615 on). It decides --mps-mode=auto.
	MPSv3Available bool
	// MPSShmSizeBytes bounds each claim's /dev/shm in MPS v3 mode (a tmpfs
	// per claim, real GPUs only).
	MPSShmSizeBytes int64
	// MPSIdleGrace keeps the MPS daemon running this long after the
	// node's last share is released (mps.Timing.IdleGrace).
	MPSIdleGrace time.Duration
	// MPSDaemonMode is where the node's MPS daemon runs: MPSDaemonProcess
	// (a child of the plugin; the default) or MPSDaemonPod (a pod of its
	// own, which outlives the plugin's pod).
	MPSDaemonMode string
	// MPSDaemonPod is the daemon pod's configuration in pod mode; the
	// node, MPS layout, cards, control binary, -M and simulation are filled
	// in from the options above.
	MPSDaemonPod   mps.DaemonPodConfig
	HealthzAddress string
	MetricsAddress string

	// KubeClient is nil in offline mode: no API server, so no kubelet
	// registration and no publishing; state recovery, health and metrics
	// still run. Used for measuring the idle footprint without a cluster.
	KubeClient kubernetes.Interface
	// Publish controls ResourceSlice publishing.
	Publish bool
	// Hardware adds device nodes and driver files on real GPUs; nil means
	// none (right for fake GPUs).
	Hardware cdi.HardwareEdits
	// MemoryLimitHook, set on nodes with hard share enforcement, puts
	// tangram-cdi-hook into every share's CDI device; nil means none.
	MemoryLimitHook *cdi.MemoryLimitHook
	// HealthWatcher reports the cards' health events (docs/health.md); nil
	// means health is not watched: no taints, and the kubelet is told
	// health is not supported.
	HealthWatcher gpu.HealthWatcher
	// HealthPolicy classifies XIDs into taints.
	HealthPolicy gpuhealth.Policy
	// HealthRecoverAfter is the quiet time after which an XID taint goes.
	HealthRecoverAfter time.Duration
	// NonRootClasses are the device classes whose claims only pods that
	// run as non-root, without privilege escalation, added capabilities
	// or privileged mode may use, checked again at prepare
	// (--nonroot-device-classes; Config.NonRootClasses).
	NonRootClasses []string
	// NonRootNamespaces limits that check to the namespaces whose labels it
	// selects (--nonroot-namespace-selector); nil: every namespace.
	NonRootNamespaces labels.Selector
}

// validate refuses options no flag check should have let through: a
// negative /dev/shm size would mount each claim's /dev/shm without a bound
// (only sizes above 0 get a tmpfs), a negative grace or recovery time is
// meaningless.
func (opts PluginOptions) validate() error {
	var errs []error
	if opts.MPSShmSizeBytes < 0 {
		errs = append(errs, fmt.Errorf("the MPS /dev/shm size is %d bytes: it must not be negative (0: plain directories)", opts.MPSShmSizeBytes))
	}
	if opts.MPSIdleGrace < 0 {
		errs = append(errs, fmt.Errorf("the MPS idle grace is %v: it must not be negative", opts.MPSIdleGrace))
	}
	if opts.HealthRecoverAfter < 0 {
		errs = append(errs, fmt.Errorf("the health recovery time is %v: it must not be negative", opts.HealthRecoverAfter))
	}
	return errors.Join(errs...)
}

// Run runs the plugin until ctx is cancelled (SIGTERM) or a fatal error.
func Run(ctx context.Context, opts PluginOptions) error {
	if err := opts.validate(); err != nil {
		return fmt.Errorf("plugin options: %w", err)
	}
	logger := klog.FromContext(ctx)
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)

	nodeLabels := map[string]string{}
	if opts.KubeClient != nil {
		node, err := opts.KubeClient.CoreV1().Nodes().Get(ctx, opts.NodeName, metav1.GetOptions{})
		if err != nil {
			return fmt.Errorf("reading Node %s for its labels: %w", opts.NodeName, err)
		}
		nodeLabels = node.Labels
	}
	resources, err := opts.Resources(nodeLabels)
	if err != nil {
		return fmt.Errorf("building ResourceSlices: %w", err)
	}

	allocatable := allocatableMemory(resources)
	claimDirs := newClaimDirs(opts)
	shares, err := newShares(ctx, opts, allocatable, claimDirs)
	if err != nil {
		return err
	}
	if shares != nil {
		defer shares.Close()
	}
	specStore, err := cdi.NewSpecStore(opts.CDIRoot)
	if err != nil {
		return err
	}
	hardware := opts.Hardware
	if hardware == nil {
		if !opts.FakeGPUs {
			return errors.New("internal error: real GPUs need hardware CDI edits")
		}
		hardware = cdi.NoHardware{}
	}
	// The state lock's file lives next to the checkpoint.
	if err := os.MkdirAll(opts.StateDir, 0o700); err != nil {
		return fmt.Errorf("creating state directory: %w", err)
	}
	metrics := NewMetrics()
	cfg := Config{
		NodeName:          opts.NodeName,
		GPUs:              opts.GPUs,
		AllocatableMemory: allocatable,
		State: checkpoint.Claims{
			Store:     checkpoint.NewStore(filepath.Join(opts.StateDir, "checkpoint.json")),
			StateLock: checkpoint.NewFileLock(filepath.Join(opts.StateDir, "checkpoint.lock")),
		},
		Specs: cdi.ClaimSpecs{Store: specStore, Hardware: hardware, Cards: cardsByDevice(opts.GPUs), MemoryLimitHook: opts.MemoryLimitHook,
			ClaimShmDir: claimDirs.ShmDir},
		ClaimDirs:  claimDirs,
		Configs:    ResolveConfigs,
		MPSPipeDir: mps.Layout{Root: opts.MPSRoot}.PipeDir(),
		Metrics:    metrics,
		OnFatal:    func(err error) { cancel(err) },
	}
	if shares != nil {
		cfg.Shares = shares
	}
	if opts.KubeClient != nil {
		cfg.ListClaims = APIClaimLister(opts.KubeClient)
		cfg.ClaimStatus = APIClaimStatus{Client: opts.KubeClient}
		cfg.NonRootClasses = opts.NonRootClasses
		cfg.ReservingPods = APIReservingPods(opts.KubeClient, opts.NodeName)
		if opts.NonRootNamespaces != nil {
			cfg.NonRootNamespaces = APINamespaceMatcher(opts.KubeClient, opts.NonRootNamespaces)
		}
	}
	cfg.SimulatedMPS = opts.FakeGPUs
	cfg.ShareBackend = opts.ShareBackend
	cfg.ShareEnforcement, cfg.ShareEnforcementReason = opts.ShareEnforcement, opts.ShareEnforcementReason
	if opts.KubeClient != nil {
		// Warning events on the pods of shares a tenant can exceed.
		recorder, stop := newNodeEventRecorder(ctx, opts.KubeClient)
		defer stop()
		cfg.Events = recorder
	}
	cfg.MPSv3 = shares != nil && resolveMPSMode(opts) == mps.ModeV3
	var monitor *gpuhealth.Monitor
	if opts.HealthWatcher != nil {
		monitor, err = gpuhealth.NewMonitor(gpuhealth.Config{Cards: opts.GPUs, Policy: opts.HealthPolicy, RecoverAfter: opts.HealthRecoverAfter})
		if err != nil {
			return err
		}
		cfg.Health = monitor
	}
	driver, err := New(ctx, cfg)
	if err != nil {
		return err
	}

	health := &Health{Checks: map[string]HealthCheck{}, Details: map[string]func() string{}}
	if shares != nil {
		// Reported, never failing the probe: the worker retries the daemon
		// by itself, and a restarted plugin would find it no better.
		health.Details["mps"] = func() string { return shares.Status().String() }
		metrics.RegisterMPSStatus(shares.Status)
	}
	var helper *kubeletplugin.Helper
	if opts.KubeClient != nil {
		// The kubelet creates the registry directory; ours may be new.
		if err := os.MkdirAll(opts.PluginDir, 0o750); err != nil {
			return fmt.Errorf("creating plugin directory: %w", err)
		}
		helper, err = kubeletplugin.Start(ctx, driver,
			kubeletplugin.DriverName(device.DriverName),
			kubeletplugin.KubeClient(opts.KubeClient),
			kubeletplugin.NodeName(opts.NodeName),
			kubeletplugin.RegistrarDirectoryPath(opts.RegistrarDir),
			kubeletplugin.PluginDataDirectoryPath(opts.PluginDir),
			// The helper does not serialize the calls: the driver does,
			// with its state lock (Driver.lockState), across both pods
			// of a rolling update too. The helper's own serialization
			// would make every call wait while a share waits for a
			// starting MPS daemon before that lock (Driver.awaitMPSDaemon,
			// docs/prepare.md "No long waits"); nothing it does around
			// our calls needs it (no device metadata is enabled).
			kubeletplugin.Serialize(false),
			kubeletplugin.RollingUpdate(types.UID(opts.PodUID)),
		)
		if err != nil {
			return fmt.Errorf("starting the kubelet plugin service: %w", err)
		}
		// Stopping removes this pod's sockets; a pod that died without
		// it leaves them for the kubelet to find dead.
		defer helper.Stop()
		health.Checks["dra-socket"] = DRASocketCheck(filepath.Join(opts.PluginDir, draSocketName(opts.PodUID)))
		if opts.Publish {
			if err := helper.PublishResources(ctx, *resources); err != nil {
				return fmt.Errorf("publishing ResourceSlices: %w", err)
			}
			logger.Info("Publishing ResourceSlices", "node", opts.NodeName, "gpus", len(opts.GPUs))
		}
	} else {
		logger.Info("OFFLINE: no API server configured; not registering with the kubelet and not publishing ResourceSlices")
	}
	if monitor != nil {
		pub := &healthPublisher{node: opts.NodeName, resources: resources, health: monitor, metrics: metrics}
		if helper != nil && opts.Publish {
			pub.publish = helper.PublishResources
		}
		if opts.KubeClient != nil {
			recorder, stop := newNodeEventRecorder(ctx, opts.KubeClient)
			defer stop()
			pub.recorder = recorder
		}
		health.Details["gpus"] = func() string { return healthSummary(monitor.Devices()) }
		startDeviceHealth(ctx, opts, monitor, pub)
	}

	errs := make(chan error, 2)
	if opts.HealthzAddress != "" {
		go func() { errs <- health.Serve(ctx, opts.HealthzAddress) }()
	}
	if opts.MetricsAddress != "" {
		go func() { errs <- serveMetrics(ctx, opts.MetricsAddress, metrics) }()
	}
	logger.Info("Kubelet plugin running", "node", opts.NodeName, "gpus", len(opts.GPUs), "sharing", opts.Sharing, "fakeGPUs", opts.FakeGPUs)
	select {
	case <-ctx.Done():
	case err := <-errs:
		if err != nil {
			cancel(err)
		}
	}
	if cause := context.Cause(ctx); cause != nil && !errors.Is(cause, context.Canceled) {
		return cause
	}
	logger.Info("Shutting down")
	return nil
}

// draSocketName is the helper's name for the DRA socket in the plugin
// directory: one per pod with rolling updates.
func draSocketName(podUID string) string {
	if podUID == "" {
		return "dra.sock"
	}
	return "dra-" + podUID + ".sock"
}

// allocatableMemory returns, for each device published as shareable, the
// most memory one allocation may consume on it (device.AllocatableMemory:
// the card's memory rounded down to the share step).
func allocatableMemory(resources *resourceslice.DriverResources) map[string]int64 {
	out := map[string]int64{}
	for _, pool := range resources.Pools {
		for _, s := range pool.Slices {
			for _, dev := range s.Devices {
				if dev.AllowMultipleAllocations == nil || !*dev.AllowMultipleAllocations {
					continue
				}
				out[dev.Name] = device.AllocatableMemory(&dev)
			}
		}
	}
	return out
}

// newShares builds the MPS accounting for the cards published as
// shareable (the keys of allocatable): simulated on fake GPUs, the real
// daemon otherwise.
func newShares(ctx context.Context, opts PluginOptions, allocatable map[string]int64, claimDirs mps.ClaimDirs) (*mps.Manager, error) {
	if !opts.Sharing {
		return nil, nil
	}
	var shareable []string
	for _, g := range opts.GPUs {
		if _, ok := allocatable[device.CardDeviceName(g.Index)]; ok {
			shareable = append(shareable, g.UUID)
		}
	}
	layout := mps.Layout{Root: opts.MPSRoot}
	mode := resolveMPSMode(opts)
	klog.FromContext(ctx).Info("MPS mode", "mode", mode, "flag", opts.MPSMode)
	switch opts.MPSDaemonMode {
	case "", MPSDaemonProcess:
	case MPSDaemonPod:
		return newPodShares(ctx, opts, layout, shareable, mode, claimDirs)
	default:
		return nil, fmt.Errorf("unknown MPS daemon mode %q: want %q or %q", opts.MPSDaemonMode, MPSDaemonProcess, MPSDaemonPod)
	}
	if opts.FakeGPUs && mode == mps.ModeV3 {
		return nil, errors.New("--mps-mode=v3 with fake GPUs needs a control daemon to hold the namespaces: use --mps-daemon=pod (its stand-in daemon speaks MPS v3) or --mps-mode=classic")
	}
	if opts.FakeGPUs {
		klog.FromContext(ctx).Info("SIMULATED MPS backend (fake GPUs): shares are accounted and their CDI edits written, but no MPS daemon runs and nothing is enforced", "mpsRoot", opts.MPSRoot)
		return mps.NewManager(layout, &mps.SimulatedDaemon{Layout: layout}, &mps.RecordingComputeModeSetter{}, shareable, managerTiming(opts)), nil
	}
	binary, err := mpsControlBinary(opts)
	if err != nil {
		return nil, err
	}
	daemon := mps.NewProcessDaemon(mps.ProcessDaemonConfig{
		Layout:         layout,
		Binary:         binary,
		Wrapper:        mps.PrivateShmWrapper(layout.ShmDir()),
		VisibleDevices: shareable,
		MultiUser:      opts.MPSMultiUser || mode == mps.ModeV3,
		Protocol:       protocolOf(mode),
		Env:            mpsControlEnv(opts),
	})
	computeModes, err := mps.NewNVMLComputeModeSetter(opts.NVMLLibrary)
	if err != nil {
		return nil, fmt.Errorf("sharing is enabled on real GPUs: %w; use a cgo build or --sharing=disabled", err)
	}
	return mps.NewManager(layout, daemon, computeModes, shareable, append(v3Option(mode, claimDirs, daemon.Control, shareable), managerTiming(opts))...), nil
}

// managerTiming is the Manager's timing from the options: the idle grace;
// the other waits keep their defaults (mps.Timing).
func managerTiming(opts PluginOptions) mps.ManagerOption {
	return mps.WithTiming(mps.Timing{IdleGrace: opts.MPSIdleGrace})
}

// resolveMPSMode is where --mps-mode=auto is decided: v3 where capability
// detection (pkg/plugin/enforcement) found MPS v3.
func resolveMPSMode(opts PluginOptions) mps.Mode {
	mode := opts.MPSMode
	if mode == "" {
		mode = mps.ModeAuto
	}
	return mps.ResolveMode(mode, opts.MPSv3Available)
}

func protocolOf(mode mps.Mode) int {
	if mode == mps.ModeV3 {
		return 3
	}
	return 2
}

// newClaimDirs makes each claim's own /dev/shm (whole cards and shares
// alike): a size-bounded tmpfs on real GPUs (--mps-shm-size above 0),
// plain directories under the MPS root otherwise.
func newClaimDirs(opts PluginOptions) mps.ClaimDirs {
	dirs := mps.ClaimDirs{Layout: mps.Layout{Root: opts.MPSRoot}, ShmSizeBytes: opts.MPSShmSizeBytes}
	if !opts.FakeGPUs && opts.MPSShmSizeBytes > 0 {
		dirs.Mounter = mps.TmpfsMounter{}
	}
	return dirs
}

// v3Option configures a Manager for MPS v3: namespaces through ctl, and
// the claims' own /dev/shm (the same directories the driver makes for
// every claim).
func v3Option(mode mps.Mode, dirs mps.ClaimDirs, ctl control.Func, shareable []string) []mps.ManagerOption {
	if mode != mps.ModeV3 {
		return nil
	}
	namespaces := mps.NewV3Namespaces(ctl, shareable)
	// A namespace's pipe directory as the daemon reports it is checked
	// against the one containers mount.
	namespaces.PipeDir = dirs.Layout.PipeDir()
	return []mps.ManagerOption{mps.WithV3(namespaces, dirs)}
}

// mpsControlBinary finds nvidia-cuda-mps-control: under the driver root
// unless a name or path was given.
func mpsControlBinary(opts PluginOptions) (string, error) {
	if opts.MPSControlBinary == "" {
		binary, err := opts.DriverRoot.Executable(driverroot.MPSControl)
		if err != nil {
			return "", fmt.Errorf("sharing is enabled but the MPS control binary is missing: %w; or pass --mps-control-binary=<path>, or --sharing=disabled", err)
		}
		return binary, nil
	}
	binary, err := exec.LookPath(opts.MPSControlBinary)
	if err != nil {
		return "", fmt.Errorf("sharing is enabled but the MPS control binary %q was not found (%v); pass --mps-control-binary=<path>, leave it empty to use the driver root's, or pass --sharing=disabled", opts.MPSControlBinary, err)
	}
	return binary, nil
}

// mpsControlEnv runs the driver root's control binary with the driver
// root's own libraries (as NVIDIA's DRA driver does); a binary given by
// name or path runs as it is.
func mpsControlEnv(opts PluginOptions) []string {
	if opts.MPSControlBinary != "" {
		return nil
	}
	return opts.DriverRoot.ToolEnv()
}

// MPS daemon modes (--mps-daemon).
const (
	MPSDaemonProcess = "process"
	MPSDaemonPod     = "pod"
)

// newPodShares runs the node's daemon in a pod of its own: a stand-in
// daemon on fake GPUs, nvidia-cuda-mps-control on real ones.
func newPodShares(ctx context.Context, opts PluginOptions, layout mps.Layout, shareable []string, mode mps.Mode, claimDirs mps.ClaimDirs) (*mps.Manager, error) {
	if opts.KubeClient == nil {
		return nil, errors.New("--mps-daemon=pod needs the API server to create the daemon's pod; use --mps-daemon=process offline")
	}
	podCfg := opts.MPSDaemonPod
	podCfg.NodeName = opts.NodeName
	podCfg.Layout = layout
	podCfg.VisibleDevices = shareable
	podCfg.Simulate = opts.FakeGPUs
	podCfg.MultiUser = opts.MPSMultiUser || mode == mps.ModeV3
	podCfg.Protocol = protocolOf(mode)
	podCfg.ControlBinary = opts.MPSControlBinary
	if opts.FakeGPUs {
		// The stand-in needs no driver.
		podCfg.DriverRoot = ""
	}
	daemon, err := mps.NewPodDaemon(mps.PodDaemonConfig{Client: opts.KubeClient, Pod: podCfg})
	if err != nil {
		return nil, fmt.Errorf("configuring the MPS daemon pod: %w", err)
	}
	if opts.FakeGPUs {
		klog.FromContext(ctx).Info("SIMULATED MPS backend (fake GPUs) in a daemon pod: a stand-in daemon listens on the control socket, nothing is enforced", "pod", klog.KRef(podCfg.Namespace, daemon.Name()), "mpsRoot", opts.MPSRoot)
		return mps.NewManager(layout, daemon, &mps.RecordingComputeModeSetter{}, shareable,
			append(v3Option(mode, claimDirs, standin.Control(layout.PipeDir()), shareable), managerTiming(opts))...), nil
	}
	computeModes, err := mps.NewNVMLComputeModeSetter(opts.NVMLLibrary)
	if err != nil {
		return nil, fmt.Errorf("sharing is enabled on real GPUs: %w; use a cgo build or --sharing=disabled", err)
	}
	managerOpts := []mps.ManagerOption{managerTiming(opts)}
	if mode == mps.ModeV3 {
		// The plugin sends the v3 commands itself, as a client of the
		// pod's daemon through the shared pipe directory.
		binary, err := mpsControlBinary(opts)
		if err != nil {
			return nil, err
		}
		managerOpts = append(managerOpts, v3Option(mode, claimDirs, control.Binary(nil, binary, layout.PipeDir(), control.WithEnv(mpsControlEnv(opts)...)), shareable)...)
	}
	klog.FromContext(ctx).Info("MPS daemon runs in its own pod", "pod", klog.KRef(podCfg.Namespace, daemon.Name()), "image", podCfg.Image)
	return mps.NewManager(layout, daemon, computeModes, shareable, managerOpts...), nil
}

func serveMetrics(ctx context.Context, addr string, m *Metrics) error {
	listener, err := listenShared(ctx, addr)
	if err != nil {
		return fmt.Errorf("listening for metrics on %s: %w", addr, err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(m.Registry, promhttp.HandlerOpts{}))
	server := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		<-ctx.Done()
		shutdownCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = server.Shutdown(shutdownCtx)
	}()
	klog.FromContext(ctx).Info("Serving metrics", "address", listener.Addr().String(), "path", "/metrics")
	if err := server.Serve(listener); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("serving metrics: %w", err)
	}
	return nil
}
