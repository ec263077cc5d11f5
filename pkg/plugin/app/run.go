// Package app is the kubelet plugin's process: its flags (Options, parsed
// once into Settings) and Run, which builds the running parts from them
// and the Node the command found: the Driver (pkg/plugin), the node's MPS,
// the kubelet helper, the taint publisher, liveness and metrics.
package app

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
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/dynamic-resource-allocation/resourceslice"
	"k8s.io/klog/v2"

	"github.com/tangram-gpu/tangram/pkg/device"
	"github.com/tangram-gpu/tangram/pkg/gpu"
	"github.com/tangram-gpu/tangram/pkg/gpu/fakegpu"
	"github.com/tangram-gpu/tangram/pkg/plugin"
	"github.com/tangram-gpu/tangram/pkg/plugin/cdi"
	"github.com/tangram-gpu/tangram/pkg/plugin/checkpoint"
	"github.com/tangram-gpu/tangram/pkg/plugin/claimstatus"
	"github.com/tangram-gpu/tangram/pkg/plugin/driverroot"
	"github.com/tangram-gpu/tangram/pkg/plugin/liveness"
	"github.com/tangram-gpu/tangram/pkg/plugin/memlimit/records"
	"github.com/tangram-gpu/tangram/pkg/plugin/mps"
	"github.com/tangram-gpu/tangram/pkg/plugin/mps/control"
	"github.com/tangram-gpu/tangram/pkg/plugin/mps/daemon"
	"github.com/tangram-gpu/tangram/pkg/plugin/mps/mpsv3"
	"github.com/tangram-gpu/tangram/pkg/plugin/mps/standin"
	"github.com/tangram-gpu/tangram/pkg/plugin/podcheck"
	"github.com/tangram-gpu/tangram/pkg/plugin/taints"
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
	// NVIDIADriver is what real GPUs need of the node's NVIDIA driver.
	NVIDIADriver
	// MIG creates and destroys MIG instances (NVML's, or the fake cards'
	// file); nil: the fake cards' file in the state directory with fake
	// GPUs, and MIG partitions refused with real ones.
	MIG gpu.MIGPartitions
	// KubeClient is nil in offline mode: no API server, so no kubelet
	// registration and no publishing; state recovery, liveness and metrics
	// still run. Used for measuring the idle footprint without a cluster.
	KubeClient kubernetes.Interface
	// HealthWatcher reports the cards' health events to the XID taint
	// monitor (docs/health.md); nil means health is not watched: no
	// taints, and the kubelet is told device health is not supported.
	HealthWatcher gpu.HealthWatcher
	// Processes lists what runs on the cards, for the usage watcher
	// (docs/observability.md); nil means usage is not watched.
	Processes gpu.ProcessLister
}

// NVIDIADriver is what real GPUs need of the node's NVIDIA driver: where
// it is, its NVML library, the CDI edits of its files and device nodes,
// and the memory limit hook on nodes with hard share enforcement. Zero
// with fake GPUs.
type NVIDIADriver struct {
	// DriverRoot is the NVIDIA driver installation (real GPUs;
	// Options.DriverRoot).
	DriverRoot driverroot.Root
	// NVMLLibrary is libnvidia-ml.so.1 under DriverRoot, for compute modes
	// (real GPUs).
	NVMLLibrary string
	// Hardware adds device nodes and driver files on real GPUs; nil means
	// none (right for fake GPUs).
	Hardware cdi.HardwareEdits
	// MemoryLimitHook, set on nodes with hard share enforcement, puts
	// tangram-cdi-hook into every share's CDI device; nil means none.
	MemoryLimitHook *cdi.MemoryLimitHook
}

// wiring is the running plugin's view of its settings and node.
type wiring struct {
	Settings
	Node
}

// newWiring joins the settings to the node they were parsed for.
func newWiring(settings Settings, node Node) (*wiring, error) {
	if !settings.parsed {
		return nil, errors.New("plugin settings were not parsed: build them with Options.Parse")
	}
	if settings.forFakeGPUs != node.FakeGPUs || settings.forDriverRoot != node.DriverRoot.Path {
		return nil, fmt.Errorf("plugin settings were parsed for fake GPUs %v and driver root %q, but the node has fake GPUs %v and driver root %q",
			settings.forFakeGPUs, settings.forDriverRoot, node.FakeGPUs, node.DriverRoot.Path)
	}
	return &wiring{Settings: settings, Node: node}, nil
}

// Run runs the plugin until ctx is cancelled (SIGTERM) or a fatal error:
// it reads what to publish, builds the driver, registers with the kubelet
// and publishes, starts the XID taint monitor, and serves liveness and
// metrics.
func Run(ctx context.Context, settings Settings, node Node) error {
	w, err := newWiring(settings, node)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)

	resources, err := w.resources(ctx)
	if err != nil {
		return err
	}
	metrics := plugin.NewMetrics()
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
		// Warning events on the pods of shares a tenant can exceed, and
		// the usage watcher's.
		recorder, stop := taints.NewNodeEventRecorder(ctx, w.KubeClient)
		defer stop()
		cfg.Events = recorder
	}
	var driver *plugin.Driver
	monitor, err := w.newXIDTaintMonitor(func(index, gi int) (string, bool) { return driver.MIGPartitions().MIGDeviceOf(index, gi) })
	if err != nil {
		return err
	}
	if monitor != nil {
		// Events are handled once the driver exists (startTaints, below).
		cfg.DeviceHealth = monitor
	}
	if driver, err = plugin.New(ctx, cfg); err != nil {
		return err
	}

	probes := newLiveness(shares, metrics)
	// The first publication already carries the taints known now (the
	// partitions overlapping MIG instances Tangram did not create, found
	// by start-up).
	pub := w.newTaintPublisher(monitor, driver, resources, metrics)
	initial := resources
	if pub != nil {
		initial, _, _ = pub.Tainted()
	}
	helper, err := w.startKubeletHelper(ctx, driver, initial, probes)
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
		probes.Details["gpus"] = func() string { return taints.Summary(monitor.Devices()) }
	}
	if pub != nil && pub.MIG != nil {
		go driver.MIGPartitions().WatchForeignMIG(ctx)
	}
	if err := w.startUsage(ctx, driver, metrics, cfg.Events); err != nil {
		return err
	}
	return w.serve(ctx, cancel, probes, metrics)
}

// newTaintPublisher is the publisher of the devices' taints: the XID
// taint monitor's, and those of the partitions overlapping MIG instances
// Tangram did not create when a card is in MIG mode; nil when neither is
// there.
func (w *wiring) newTaintPublisher(monitor *xidtaint.Monitor, driver *plugin.Driver, resources *resourceslice.DriverResources, metrics *plugin.Metrics) *taints.Publisher {
	pub := &taints.Publisher{Node: w.NodeName, Resources: resources, Metrics: metrics}
	if monitor != nil {
		// Not a typed nil: a nil Health is health not watched.
		pub.Health = monitor
	}
	if parts := driver.MIGPartitions(); len(parts.Cards()) > 0 {
		pub.MIG = parts
	}
	if pub.Health == nil && pub.MIG == nil {
		return nil
	}
	return pub
}

// newLiveness starts the liveness probes' checks and details (the kubelet
// helper adds its socket's check): the MPS daemon's state, reported and in
// metrics, never failing the probe: the worker retries the daemon by
// itself, and a restarted plugin would find it no better.
func newLiveness(shares *mps.Manager, metrics *plugin.Metrics) *liveness.Server {
	probes := &liveness.Server{Checks: map[string]liveness.Check{}, Details: map[string]func() string{}}
	if shares != nil {
		probes.Details["mps"] = func() string { return shares.Status().String() }
		metrics.RegisterMPSStatus(shares.Status)
	}
	return probes
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
func (w *wiring) driverConfig(ctx context.Context, allocatable map[string]int64, claimDirs daemon.ClaimDirs, shares *mps.Manager,
	metrics *plugin.Metrics, cancel context.CancelCauseFunc) (plugin.Config, error) {
	specStore, err := cdi.NewSpecStore(w.CDIRoot)
	if err != nil {
		return plugin.Config{}, err
	}
	hardware := w.Hardware
	if hardware == nil {
		if !w.FakeGPUs {
			return plugin.Config{}, errors.New("internal error: real GPUs need hardware CDI edits")
		}
		hardware = cdi.NoHardware{}
	}
	// The state lock's file lives next to the checkpoint.
	if err := os.MkdirAll(w.StateDir, 0o700); err != nil {
		return plugin.Config{}, fmt.Errorf("creating state directory: %w", err)
	}
	migParts := w.MIG
	if migParts == nil && w.FakeGPUs {
		migParts = fakegpu.NewPartitions(filepath.Join(w.StateDir, fakegpu.PartitionsFileName))
	}
	specs := cdi.ClaimSpecs{Store: specStore, Hardware: hardware, Cards: plugin.CardsByDevice(w.GPUs), MemoryLimitHook: w.MemoryLimitHook,
		ClaimShmDir: claimDirs.ShmDir}
	if shares != nil {
		specs.MPS = shares
	}
	cfg := plugin.Config{
		KindConfig: plugin.KindConfig{MIG: migParts},
		Inventory:  plugin.Inventory{NodeName: w.NodeName, GPUs: w.GPUs, AllocatableMemory: allocatable},
		State: checkpoint.Claims{
			Store:     checkpoint.NewStore(filepath.Join(w.StateDir, "checkpoint.json")),
			StateLock: checkpoint.NewFileLock(filepath.Join(w.StateDir, "checkpoint.lock")),
		},
		Specs:        specs,
		ClaimDirs:    claimDirs,
		Configs:      plugin.ResolveConfigs,
		MPSPipeDir:   daemon.Layout{Root: w.MPSRoot}.PipeDir(),
		Metrics:      metrics,
		OnFatal:      func(err error) { cancel(err) },
		ShareBackend: w.ShareBackend,
		ShareStatus: claimstatus.Node{
			Simulated: w.FakeGPUs,
			V3:        shares != nil && resolveMPSMode(w) == mps.ModeV3,
			Level:     w.ShareEnforcement,
			Reason:    w.ShareEnforcementReason,
		},
	}
	if shares != nil {
		// Not a typed nil: a nil Shares is sharing disabled.
		cfg.Shares = shares
	}
	// Swept at start-up, also on a node no longer hard: the records of
	// claims an earlier start prepared go once they are not prepared.
	cfg.MemoryLimitRecords = records.Dir{Path: plugin.MemoryLimitStateDir(w.StateDir)}
	if w.KubeClient != nil {
		cfg.ListClaims = plugin.APIClaimLister(w.KubeClient)
		cfg.ClaimStatus = claimstatus.API{Client: w.KubeClient}
		cfg.PodCheck = podcheck.Checker{Classes: w.NonRootDeviceClasses, ReservingPods: podcheck.APIReservingPods(w.KubeClient, w.NodeName)}
		if w.nonRootNamespaces != nil {
			cfg.PodCheck.Namespaces = podcheck.APINamespaceMatcher(w.KubeClient, w.nonRootNamespaces)
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
func (w *wiring) startKubeletHelper(ctx context.Context, driver *plugin.Driver, resources *resourceslice.DriverResources, probes *liveness.Server) (*kubeletplugin.Helper, error) {
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
		// starting MPS daemon before that lock (mpsshare.Effects.BeforeLock,
		// docs/prepare.md "No long waits"); nothing it does around
		// our calls needs it (no device metadata is enabled).
		kubeletplugin.Serialize(false),
		kubeletplugin.RollingUpdate(types.UID(w.PodUID)),
	)
	if err != nil {
		return nil, fmt.Errorf("starting the kubelet plugin service: %w", err)
	}
	probes.Checks["dra-socket"] = liveness.DRASocket(filepath.Join(w.PluginDir, draSocketName(w.PodUID)))
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
func (w *wiring) startTaints(ctx context.Context, pub *taints.Publisher, monitor *xidtaint.Monitor, helper *kubeletplugin.Helper) (stop func()) {
	if helper != nil && w.Publish {
		pub.Publish = helper.PublishResources
	}
	stop = func() {}
	if monitor != nil {
		if w.KubeClient != nil {
			pub.Recorder, stop = taints.NewNodeEventRecorder(ctx, w.KubeClient)
		}
		go monitor.Run(ctx, w.HealthWatcher, pub.OnChanges)
		klog.FromContext(ctx).Info("Watching GPU health", "recoverAfter", w.HealthRecoverAfter,
			"informationalXIDs", fmt.Sprint(w.xidPolicy.InformationalXIDs), "ignoredXIDs", fmt.Sprint(w.xidPolicy.IgnoredXIDs))
	}
	go pub.Run(ctx)
	return stop
}

// serve serves liveness and metrics until ctx ends or either fails.
func (w *wiring) serve(ctx context.Context, cancel context.CancelCauseFunc, probes *liveness.Server, metrics *plugin.Metrics) error {
	logger := klog.FromContext(ctx)
	errs := make(chan error, 2)
	if w.HealthzAddress != "" {
		go func() { errs <- probes.Serve(ctx, w.HealthzAddress) }()
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

// newShares builds the node's MPS for the cards published as shareable
// (the keys of allocatable), once, with mps.New, wherever its daemon runs:
// only the daemon and the control of v3 namespaces depend on that
// (newMPSDaemon).
func newShares(ctx context.Context, w *wiring, allocatable map[string]int64, claimDirs daemon.ClaimDirs) (*mps.Manager, error) {
	if !w.Sharing {
		return nil, nil
	}
	var shareable []string
	for _, g := range w.GPUs {
		if _, ok := allocatable[device.CardDeviceName(g.Index)]; ok {
			shareable = append(shareable, g.UUID)
		}
	}
	layout := daemon.Layout{Root: w.MPSRoot}
	mode := resolveMPSMode(w)
	klog.FromContext(ctx).Info("MPS mode", "mode", mode, "flag", w.mpsMode)
	v3Server := ""
	if mode == mps.ModeV3 {
		v3Server = mpsv3.DefaultServer
	}
	if err := mps.CheckSocketPaths(layout, v3Server); err != nil {
		return nil, err
	}
	d, v3Control, err := w.newMPSDaemon(ctx, layout, shareable, mode)
	if err != nil {
		return nil, err
	}
	computeModes, err := w.computeModes()
	if err != nil {
		return nil, err
	}
	settings := mps.Settings{
		Layout:         layout,
		ShareableCards: shareable,
		Daemon:         d,
		ComputeModes:   computeModes,
		Timing:         mps.Timing{IdleGrace: w.MPSIdleGrace},
	}
	if mode == mps.ModeV3 {
		settings.V3Control, settings.ClaimDirs = v3Control, claimDirs
	}
	return mps.New(settings), nil
}

// computeModes switches the shareable cards' compute modes: recorded only
// on fake GPUs, through NVML on real ones.
func (w *wiring) computeModes() (daemon.ComputeModeSetter, error) {
	if w.FakeGPUs {
		return &daemon.RecordingComputeModeSetter{}, nil
	}
	setter, err := daemon.NewNVMLComputeModeSetter(w.NVMLLibrary)
	if err != nil {
		return nil, fmt.Errorf("sharing is enabled on real GPUs: %w; use a cgo build or --sharing=disabled", err)
	}
	return setter, nil
}

// newMPSDaemon is the one part of MPS that depends on where the daemon
// runs (--mps-daemon): the daemon itself and, in v3 mode, the control
// through which the plugin sends the namespace commands.
func (w *wiring) newMPSDaemon(ctx context.Context, layout daemon.Layout, shareable []string, mode mps.Mode) (daemon.Daemon, control.Func, error) {
	switch w.MPSDaemonMode {
	case "", MPSDaemonProcess:
		return w.newProcessDaemon(ctx, layout, shareable, mode)
	case MPSDaemonPod:
		return w.newPodDaemon(ctx, layout, shareable, mode)
	default:
		return nil, nil, fmt.Errorf("unknown MPS daemon mode %q: want %q or %q", w.MPSDaemonMode, MPSDaemonProcess, MPSDaemonPod)
	}
}

// newProcessDaemon runs the node's daemon as a child of the plugin, or
// simulates it on fake GPUs.
func (w *wiring) newProcessDaemon(ctx context.Context, layout daemon.Layout, shareable []string, mode mps.Mode) (daemon.Daemon, control.Func, error) {
	if w.FakeGPUs && mode == mps.ModeV3 {
		return nil, nil, errors.New("--mps-mode=v3 with fake GPUs needs a control daemon to hold the namespaces: use --mps-daemon=pod (its stand-in daemon speaks MPS v3) or --mps-mode=classic")
	}
	if w.FakeGPUs {
		klog.FromContext(ctx).Info("SIMULATED MPS backend (fake GPUs): shares are accounted and their CDI edits written, but no MPS daemon runs and nothing is enforced", "mpsRoot", w.MPSRoot)
		return &daemon.SimulatedDaemon{Layout: layout}, nil, nil
	}
	binary, err := mpsControlBinary(w)
	if err != nil {
		return nil, nil, err
	}
	d := daemon.NewProcessDaemon(daemon.ProcessDaemonConfig{
		Layout:         layout,
		Binary:         binary,
		Wrapper:        daemon.PrivateShmWrapper(layout.ShmDir()),
		VisibleDevices: shareable,
		MultiUser:      w.MPSMultiUser || mode == mps.ModeV3,
		Protocol:       protocolOf(mode),
		Env:            mpsControlEnv(w),
	})
	return d, d.Control, nil
}

// newPodDaemon runs the node's daemon in a pod of its own: a stand-in
// daemon on fake GPUs, nvidia-cuda-mps-control on real ones. The plugin
// sends the v3 commands itself, as a client of the pod's daemon through
// the shared pipe directory.
func (w *wiring) newPodDaemon(ctx context.Context, layout daemon.Layout, shareable []string, mode mps.Mode) (daemon.Daemon, control.Func, error) {
	if w.KubeClient == nil {
		return nil, nil, errors.New("--mps-daemon=pod needs the API server to create the daemon's pod; use --mps-daemon=process offline")
	}
	podCfg := w.mpsDaemonPod
	podCfg.NodeName = w.NodeName
	podCfg.Layout = layout
	podCfg.VisibleDevices = shareable
	podCfg.Simulate = w.FakeGPUs
	podCfg.MultiUser = w.MPSMultiUser || mode == mps.ModeV3
	podCfg.Protocol = protocolOf(mode)
	podCfg.ControlBinary = w.MPSControlBinary
	d, err := daemon.NewPodDaemon(daemon.PodDaemonConfig{Client: w.KubeClient, Pod: podCfg})
	if err != nil {
		return nil, nil, fmt.Errorf("configuring the MPS daemon pod: %w", err)
	}
	if w.FakeGPUs {
		klog.FromContext(ctx).Info("SIMULATED MPS backend (fake GPUs) in a daemon pod: a stand-in daemon listens on the control socket, nothing is enforced", "pod", klog.KRef(podCfg.Namespace, d.Name()), "mpsRoot", w.MPSRoot)
		return d, standin.Control(layout.PipeDir()), nil
	}
	klog.FromContext(ctx).Info("MPS daemon runs in its own pod", "pod", klog.KRef(podCfg.Namespace, d.Name()), "image", podCfg.Image)
	if mode != mps.ModeV3 {
		return d, nil, nil
	}
	binary, err := mpsControlBinary(w)
	if err != nil {
		return nil, nil, err
	}
	return d, control.Binary(nil, binary, layout.PipeDir(), control.WithEnv(mpsControlEnv(w)...)), nil
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
// Options.Parse refuses at 0 there), plain directories under the MPS root
// with fake GPUs.
func newClaimDirs(opts *wiring) daemon.ClaimDirs {
	dirs := daemon.ClaimDirs{Layout: daemon.Layout{Root: opts.MPSRoot}, ShmSizeBytes: opts.claimShmSizeBytes}
	if !opts.FakeGPUs && opts.claimShmSizeBytes > 0 {
		dirs.Mounter = daemon.TmpfsMounter{}
	}
	return dirs
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

func serveMetrics(ctx context.Context, addr string, m *plugin.Metrics) error {
	listener, err := liveness.ListenShared(ctx, addr)
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
