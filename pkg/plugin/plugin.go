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
	"github.com/tangram-gpu/tangram/pkg/gpu/fakegpu"
	"github.com/tangram-gpu/tangram/pkg/plugin/cdi"
	"github.com/tangram-gpu/tangram/pkg/plugin/checkpoint"
	"github.com/tangram-gpu/tangram/pkg/plugin/driverroot"
	"github.com/tangram-gpu/tangram/pkg/plugin/memlimit/records"
	"github.com/tangram-gpu/tangram/pkg/plugin/mps"
	"github.com/tangram-gpu/tangram/pkg/plugin/mps/control"
	"github.com/tangram-gpu/tangram/pkg/plugin/mps/standin"
	"github.com/tangram-gpu/tangram/pkg/plugin/xidtaint"
)

// Node is what the command found on this node with its GPU source and
// device model flags (shared with `dra-kubelet-plugin slices`): the cards,
// what they can enforce, and the clients and edits that reach them. It
// holds no flags: those are Options.
type Node struct {
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
	// MPSv3Available is what capability detection found: the node's
	// driver has MPS v3 (release 615 on). It decides --mps-mode=auto.
	MPSv3Available bool
	// DriverRoot is the NVIDIA driver installation (real GPUs;
	// Options.DriverRoot).
	DriverRoot driverroot.Root
	// NVMLLibrary is libnvidia-ml.so.1 under DriverRoot, for compute modes
	// (real GPUs).
	NVMLLibrary string
	// Hardware adds device nodes and driver files on real GPUs; nil means
	// none (right for fake GPUs).
	Hardware cdi.HardwareEdits
	// MIG creates and destroys MIG instances (NVML's, or the fake cards'
	// file); nil: the fake cards' file in the state directory with fake
	// GPUs, and MIG partitions refused with real ones.
	MIG gpu.MIGPartitions
	// MemoryLimitHook, set on nodes with hard share enforcement, puts
	// tangram-cdi-hook into every share's CDI device; nil means none.
	MemoryLimitHook *cdi.MemoryLimitHook
	// KubeClient is nil in offline mode: no API server, so no kubelet
	// registration and no publishing; state recovery, liveness and metrics
	// still run. Used for measuring the idle footprint without a cluster.
	KubeClient kubernetes.Interface
	// HealthWatcher reports the cards' health events to the XID taint
	// monitor (docs/health.md); nil means health is not watched: no
	// taints, and the kubelet is told device health is not supported.
	HealthWatcher gpu.HealthWatcher
}

// wiring is the running plugin's view of its options and node, with the
// flags that need parsing parsed once (Options.Validate has checked them).
type wiring struct {
	Options
	Node
	mpsMode           mps.Mode
	mpsShmSizeBytes   int64
	mpsDaemonPod      mps.DaemonPodConfig
	nonRootNamespaces labels.Selector
	xidPolicy         xidtaint.Policy
}

// newWiring validates opts and parses what Run needs of them.
func newWiring(opts Options, node Node) (*wiring, error) {
	if err := opts.Validate(); err != nil {
		return nil, fmt.Errorf("plugin options: %w", err)
	}
	w := &wiring{Options: opts, Node: node}
	var err error
	if w.mpsMode, err = mps.ParseMode(opts.MPSMode); err != nil {
		return nil, err
	}
	if w.mpsShmSizeBytes, err = opts.claimShmSizeBytes(node.FakeGPUs); err != nil {
		return nil, err
	}
	if w.mpsDaemonPod, err = opts.mpsDaemonPod(node.FakeGPUs, node.DriverRoot.HostPath); err != nil {
		return nil, err
	}
	if w.nonRootNamespaces, err = opts.nonRootNamespaces(); err != nil {
		return nil, err
	}
	if w.xidPolicy, err = opts.xidPolicy(); err != nil {
		return nil, err
	}
	return w, nil
}

// Run runs the plugin until ctx is cancelled (SIGTERM) or a fatal error:
// it reads what to publish, builds the driver, registers with the kubelet
// and publishes, starts the XID taint monitor, and serves liveness and
// metrics.
func Run(ctx context.Context, opts Options, node Node) error {
	w, err := newWiring(opts, node)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)

	resources, err := w.resources(ctx)
	if err != nil {
		return err
	}
	metrics := NewMetrics()
	allocatable := allocatableMemory(resources)
	claimDirs := newClaimDirs(w)
	shares, err := newShares(ctx, w, allocatable, claimDirs)
	if err != nil {
		return err
	}
	if shares != nil {
		defer shares.Close()
	}
	cfg, err := w.driverConfig(ctx, allocatable, claimDirs, shares, metrics, cancel)
	if err != nil {
		return err
	}
	if w.KubeClient != nil {
		// Warning events on the pods of shares a tenant can exceed.
		recorder, stop := newNodeEventRecorder(ctx, w.KubeClient)
		defer stop()
		cfg.Events = recorder
	}
	var driver *Driver
	monitor, err := w.newXIDTaintMonitor(func(index, gi int) (string, bool) { return driver.MIGDeviceOf(index, gi) })
	if err != nil {
		return err
	}
	if monitor != nil {
		// Events are handled once the driver exists (startTaints, below).
		cfg.DeviceHealth = monitor
	}
	if driver, err = New(ctx, cfg); err != nil {
		return err
	}

	liveness := newLiveness(shares, metrics)
	// The first publication already carries the taints known now (the
	// partitions overlapping MIG instances Tangram did not create, found
	// by start-up).
	pub := w.newTaintPublisher(monitor, driver, resources, metrics)
	initial := resources
	if pub != nil {
		initial, _, _ = pub.tainted()
	}
	helper, err := w.startKubeletHelper(ctx, driver, initial, liveness)
	if err != nil {
		return err
	}
	if helper != nil {
		// Stopping removes this pod's sockets; a pod that died without
		// it leaves them for the kubelet to find dead.
		defer helper.Stop()
	}
	if pub != nil {
		stop := w.startTaints(ctx, pub, monitor, helper)
		defer stop()
	}
	if monitor != nil {
		liveness.Details["gpus"] = func() string { return xidTaintSummary(monitor.Devices()) }
	}
	if pub != nil && pub.mig != nil {
		go driver.WatchForeignMIG(ctx, foreignMIGPollInterval)
	}
	return w.serve(ctx, cancel, liveness, metrics)
}

// newTaintPublisher is the publisher of the devices' taints: the XID
// taint monitor's, and those of the partitions overlapping MIG instances
// Tangram did not create when a card is in MIG mode; nil when neither is
// there.
func (w *wiring) newTaintPublisher(monitor *xidtaint.Monitor, driver *Driver, resources *resourceslice.DriverResources, metrics *Metrics) *taintPublisher {
	pub := &taintPublisher{node: w.NodeName, resources: resources, metrics: metrics}
	if monitor != nil {
		pub.monitor = monitor
	}
	if len(driver.migCards()) > 0 {
		pub.mig = driver
	}
	if pub.monitor == nil && pub.mig == nil {
		return nil
	}
	return pub
}

// newLiveness starts the liveness probes' checks and details (the kubelet
// helper adds its socket's check): the MPS daemon's state, reported and in
// metrics, never failing the probe: the worker retries the daemon by
// itself, and a restarted plugin would find it no better.
func newLiveness(shares *mps.Manager, metrics *Metrics) *Liveness {
	liveness := &Liveness{Checks: map[string]LivenessCheck{}, Details: map[string]func() string{}}
	if shares != nil {
		liveness.Details["mps"] = func() string { return shares.Status().String() }
		metrics.RegisterMPSStatus(shares.Status)
	}
	return liveness
}

// resources reads the Node's labels (online) and builds the
// ResourceSlices to publish.
func (w *wiring) resources(ctx context.Context) (*resourceslice.DriverResources, error) {
	nodeLabels := map[string]string{}
	if w.KubeClient != nil {
		node, err := w.KubeClient.CoreV1().Nodes().Get(ctx, w.NodeName, metav1.GetOptions{})
		if err != nil {
			return nil, fmt.Errorf("reading Node %s for its labels: %w", w.NodeName, err)
		}
		nodeLabels = node.Labels
	}
	resources, err := w.Resources(nodeLabels)
	if err != nil {
		return nil, fmt.Errorf("building ResourceSlices: %w", err)
	}
	return resources, nil
}

// driverConfig builds the driver's stores and clients: the checkpoint and
// its lock, the CDI specs, MIG, the API clients of claim status and the
// pod check.
func (w *wiring) driverConfig(ctx context.Context, allocatable map[string]int64, claimDirs mps.ClaimDirs, shares *mps.Manager,
	metrics *Metrics, cancel context.CancelCauseFunc) (Config, error) {
	specStore, err := cdi.NewSpecStore(w.CDIRoot)
	if err != nil {
		return Config{}, err
	}
	hardware := w.Hardware
	if hardware == nil {
		if !w.FakeGPUs {
			return Config{}, errors.New("internal error: real GPUs need hardware CDI edits")
		}
		hardware = cdi.NoHardware{}
	}
	// The state lock's file lives next to the checkpoint.
	if err := os.MkdirAll(w.StateDir, 0o700); err != nil {
		return Config{}, fmt.Errorf("creating state directory: %w", err)
	}
	migParts := w.MIG
	if migParts == nil && w.FakeGPUs {
		migParts = fakegpu.NewPartitions(filepath.Join(w.StateDir, fakegpu.PartitionsFileName))
	}
	cfg := Config{
		MIG:               migParts,
		NodeName:          w.NodeName,
		GPUs:              w.GPUs,
		AllocatableMemory: allocatable,
		State: checkpoint.Claims{
			Store:     checkpoint.NewStore(filepath.Join(w.StateDir, "checkpoint.json")),
			StateLock: checkpoint.NewFileLock(filepath.Join(w.StateDir, "checkpoint.lock")),
		},
		Specs: cdi.ClaimSpecs{Store: specStore, Hardware: hardware, Cards: cardsByDevice(w.GPUs), MemoryLimitHook: w.MemoryLimitHook,
			ClaimShmDir: claimDirs.ShmDir},
		ClaimDirs:    claimDirs,
		Configs:      ResolveConfigs,
		MPSPipeDir:   mps.Layout{Root: w.MPSRoot}.PipeDir(),
		Metrics:      metrics,
		OnFatal:      func(err error) { cancel(err) },
		SimulatedMPS: w.FakeGPUs,
		ShareBackend: w.ShareBackend,
		MPSv3:        shares != nil && resolveMPSMode(w) == mps.ModeV3,

		ShareEnforcement:       w.ShareEnforcement,
		ShareEnforcementReason: w.ShareEnforcementReason,
	}
	if shares != nil {
		cfg.Shares = shares
	}
	// Swept at start-up, also on a node no longer hard: the records of
	// claims an earlier start prepared go once they are not prepared.
	cfg.MemoryLimitRecords = records.Dir{Path: MemoryLimitStateDir(w.StateDir)}
	if w.KubeClient != nil {
		cfg.ListClaims = APIClaimLister(w.KubeClient)
		cfg.ClaimStatus = APIClaimStatus{Client: w.KubeClient}
		cfg.NonRootClasses = w.NonRootDeviceClasses
		cfg.ReservingPods = APIReservingPods(w.KubeClient, w.NodeName)
		if w.nonRootNamespaces != nil {
			cfg.NonRootNamespaces = APINamespaceMatcher(w.KubeClient, w.nonRootNamespaces)
		}
	}
	return cfg, nil
}

// newXIDTaintMonitor builds the XID taint monitor; nil when health is not
// watched. migDevice names a MIG instance's device (the driver's, once
// it exists).
func (w *wiring) newXIDTaintMonitor(migDevice func(index, gi int) (string, bool)) (*xidtaint.Monitor, error) {
	if w.HealthWatcher == nil {
		return nil, nil
	}
	return xidtaint.NewMonitor(xidtaint.Config{Cards: w.GPUs, Policy: w.xidPolicy, RecoverAfter: w.HealthRecoverAfter, MIGDevice: migDevice})
}

// startKubeletHelper registers the driver with the kubelet, adds the DRA
// socket to the liveness checks and publishes the ResourceSlices; offline
// it does nothing and returns nil.
func (w *wiring) startKubeletHelper(ctx context.Context, driver *Driver, resources *resourceslice.DriverResources, liveness *Liveness) (*kubeletplugin.Helper, error) {
	logger := klog.FromContext(ctx)
	if w.KubeClient == nil {
		logger.Info("OFFLINE: no API server configured; not registering with the kubelet and not publishing ResourceSlices")
		return nil, nil
	}
	// The kubelet creates the registry directory; ours may be new.
	if err := os.MkdirAll(w.PluginDir, 0o750); err != nil {
		return nil, fmt.Errorf("creating plugin directory: %w", err)
	}
	helper, err := kubeletplugin.Start(ctx, driver,
		kubeletplugin.DriverName(device.DriverName),
		kubeletplugin.KubeClient(w.KubeClient),
		kubeletplugin.NodeName(w.NodeName),
		kubeletplugin.RegistrarDirectoryPath(w.RegistrarDir),
		kubeletplugin.PluginDataDirectoryPath(w.PluginDir),
		// The helper does not serialize the calls: the driver does,
		// with its state lock (Driver.lockState), across both pods
		// of a rolling update too. The helper's own serialization
		// would make every call wait while a share waits for a
		// starting MPS daemon before that lock (Driver.awaitMPSDaemon,
		// docs/prepare.md "No long waits"); nothing it does around
		// our calls needs it (no device metadata is enabled).
		kubeletplugin.Serialize(false),
		kubeletplugin.RollingUpdate(types.UID(w.PodUID)),
	)
	if err != nil {
		return nil, fmt.Errorf("starting the kubelet plugin service: %w", err)
	}
	liveness.Checks["dra-socket"] = DRASocketCheck(filepath.Join(w.PluginDir, draSocketName(w.PodUID)))
	if w.Publish {
		if err := helper.PublishResources(ctx, *resources); err != nil {
			helper.Stop()
			return nil, fmt.Errorf("publishing ResourceSlices: %w", err)
		}
		logger.Info("Publishing ResourceSlices", "node", w.NodeName, "gpus", len(w.GPUs))
	}
	return helper, nil
}

// startTaints runs the publisher of the devices' taints (slices, and with
// the XID taint monitor its metrics and Node events) and the monitor over
// the GPU source's events; stop ends the Node event recorder.
func (w *wiring) startTaints(ctx context.Context, pub *taintPublisher, monitor *xidtaint.Monitor, helper *kubeletplugin.Helper) (stop func()) {
	if helper != nil && w.Publish {
		pub.publish = helper.PublishResources
	}
	stop = func() {}
	if monitor != nil {
		if w.KubeClient != nil {
			pub.recorder, stop = newNodeEventRecorder(ctx, w.KubeClient)
		}
		go monitor.Run(ctx, w.HealthWatcher, pub.onChanges)
		klog.FromContext(ctx).Info("Watching GPU health", "recoverAfter", w.HealthRecoverAfter,
			"informationalXIDs", fmt.Sprint(w.xidPolicy.InformationalXIDs), "ignoredXIDs", fmt.Sprint(w.xidPolicy.IgnoredXIDs))
	}
	go pub.run(ctx)
	return stop
}

// serve serves liveness and metrics until ctx ends or either fails.
func (w *wiring) serve(ctx context.Context, cancel context.CancelCauseFunc, liveness *Liveness, metrics *Metrics) error {
	logger := klog.FromContext(ctx)
	errs := make(chan error, 2)
	if w.HealthzAddress != "" {
		go func() { errs <- liveness.Serve(ctx, w.HealthzAddress) }()
	}
	if w.MetricsAddress != "" {
		go func() { errs <- serveMetrics(ctx, w.MetricsAddress, metrics) }()
	}
	logger.Info("Kubelet plugin running", "node", w.NodeName, "gpus", len(w.GPUs), "sharing", w.Sharing, "fakeGPUs", w.FakeGPUs)
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
func newShares(ctx context.Context, opts *wiring, allocatable map[string]int64, claimDirs mps.ClaimDirs) (*mps.Manager, error) {
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
	klog.FromContext(ctx).Info("MPS mode", "mode", mode, "flag", opts.mpsMode)
	v3Server := ""
	if mode == mps.ModeV3 {
		v3Server = mps.DefaultV3Server
	}
	if err := layout.CheckSocketPaths(v3Server); err != nil {
		return nil, err
	}
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
func managerTiming(opts *wiring) mps.ManagerOption {
	return mps.WithTiming(mps.Timing{IdleGrace: opts.MPSIdleGrace})
}

// resolveMPSMode is where --mps-mode=auto is decided: v3 where capability
// detection (pkg/plugin/enforcement) found MPS v3.
func resolveMPSMode(opts *wiring) mps.Mode {
	mode := opts.mpsMode
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
// alike): a size-bounded tmpfs on real GPUs (--mps-shm-size, which
// newWiring refuses at 0 there), plain directories under the MPS root
// with fake GPUs.
func newClaimDirs(opts *wiring) mps.ClaimDirs {
	dirs := mps.ClaimDirs{Layout: mps.Layout{Root: opts.MPSRoot}, ShmSizeBytes: opts.mpsShmSizeBytes}
	if !opts.FakeGPUs && opts.mpsShmSizeBytes > 0 {
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
func mpsControlBinary(opts *wiring) (string, error) {
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
func mpsControlEnv(opts *wiring) []string {
	if opts.MPSControlBinary != "" {
		return nil
	}
	return opts.DriverRoot.ToolEnv()
}

// newPodShares runs the node's daemon in a pod of its own: a stand-in
// daemon on fake GPUs, nvidia-cuda-mps-control on real ones.
func newPodShares(ctx context.Context, opts *wiring, layout mps.Layout, shareable []string, mode mps.Mode, claimDirs mps.ClaimDirs) (*mps.Manager, error) {
	if opts.KubeClient == nil {
		return nil, errors.New("--mps-daemon=pod needs the API server to create the daemon's pod; use --mps-daemon=process offline")
	}
	podCfg := opts.mpsDaemonPod
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
