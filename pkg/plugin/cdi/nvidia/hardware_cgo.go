//go:build cgo

package nvidia

import (
	"cmp"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/nvidia-container-toolkit/pkg/nvcdi"
	"github.com/NVIDIA/nvidia-container-toolkit/pkg/nvcdi/transform"
	transformroot "github.com/NVIDIA/nvidia-container-toolkit/pkg/nvcdi/transform/root"
	"k8s.io/klog/v2"
	cdispec "tags.cncf.io/container-device-interface/specs-go"

	"github.com/tangram-gpu/tangram/pkg/gpu"
	"github.com/tangram-gpu/tangram/pkg/gpu/nvcaps"
	"github.com/tangram-gpu/tangram/pkg/plugin/prepared"
)

// Hardware is a cdi.HardwareEdits backed by nvcdi.
type Hardware struct {
	lib nvcdi.Interface
	// toHost rewrites paths under the plugin's view of the driver root to
	// the host's; nil when both are the same.
	toHost transform.Transformer
	// devRoot is the host's /dev as the plugin sees it; procRoot the
	// kernel's /proc (MIG capability minors), procRootFlag the option
	// that sets it.
	devRoot, procRoot, procRootFlag string

	mu     sync.Mutex
	common *cdispec.ContainerEdits
	cards  map[string]cdispec.ContainerEdits
}

// New creates the generator; it does not touch NVML or the disk yet.
func New(ctx context.Context, opts Options) (*Hardware, error) {
	return newWithNVML(ctx, opts, nil)
}

// newWithNVML is New with a given NVML library (a mock in tests).
func newWithNVML(ctx context.Context, opts Options, lib nvml.Interface) (*Hardware, error) {
	nvcdiOpts := []nvcdi.Option{
		nvcdi.WithMode(nvcdi.ModeNvml),
		nvcdi.WithLogger(klogAdapter{klog.FromContext(ctx).WithName("nvcdi")}),
	}
	if opts.DriverRoot != "" {
		nvcdiOpts = append(nvcdiOpts, nvcdi.WithDriverRoot(opts.DriverRoot))
	}
	if opts.DevRoot != "" {
		nvcdiOpts = append(nvcdiOpts, nvcdi.WithDevRoot(opts.DevRoot))
	}
	if opts.CDIHookPath != "" {
		nvcdiOpts = append(nvcdiOpts, nvcdi.WithNVIDIACDIHookPath(opts.CDIHookPath))
	}
	if lib == nil && opts.NVMLLibrary != "" {
		lib = nvml.New(nvml.WithLibraryPath(opts.NVMLLibrary))
	}
	if lib != nil {
		nvcdiOpts = append(nvcdiOpts, nvcdi.WithNvmlLib(lib))
	}
	gen, err := nvcdi.New(nvcdiOpts...)
	if err != nil {
		return nil, fmt.Errorf("creating NVIDIA CDI generator: %w", err)
	}
	return &Hardware{lib: gen, toHost: hostTransformer(opts), cards: map[string]cdispec.ContainerEdits{},
		devRoot:  cmp.Or(opts.DevRoot, opts.DriverRoot, "/"),
		procRoot: cmp.Or(opts.ProcRoot, "/proc"), procRootFlag: cmp.Or(opts.ProcRootFlag, "ProcRoot")}, nil
}

// hostTransformer rewrites the plugin's driver root to the host's, and its
// dev root too when that lives inside the driver root.
func hostTransformer(opts Options) transform.Transformer {
	root := cmp.Or(opts.DriverRoot, "/")
	host := cmp.Or(opts.HostDriverRoot, root)
	if filepath.Clean(root) == filepath.Clean(host) {
		return nil
	}
	dev, hostDev := cmp.Or(opts.DevRoot, root), host
	if filepath.Clean(dev) != filepath.Clean(root) {
		hostDev = dev // a dev root of its own is taken to be a host path
	}
	return transformroot.NewDriverTransformer(
		transformroot.WithDriverRoot(root), transformroot.WithTargetDriverRoot(host),
		transformroot.WithDevRoot(dev), transformroot.WithTargetDevRoot(hostDev))
}

// forHost rewrites the edits' host paths in place (called once per result,
// before it is cached).
func (h *Hardware) forHost(e *cdispec.ContainerEdits) error {
	if h.toHost == nil {
		return nil
	}
	spec := &cdispec.Spec{ContainerEdits: *e}
	if err := h.toHost.Transform(spec); err != nil {
		return fmt.Errorf("rewriting driver paths for the host: %w", err)
	}
	*e = spec.ContainerEdits
	return nil
}

// Warm computes the common edits and those of the given cards now.
func (h *Hardware) Warm(gpus []gpu.GPU) error {
	if _, err := h.CommonEdits(); err != nil {
		return err
	}
	for _, g := range gpus {
		if _, err := h.CardEdits(g); err != nil {
			return err
		}
	}
	return nil
}

// CardEdits implements cdi.HardwareEdits.
func (h *Hardware) CardEdits(g gpu.GPU) (cdispec.ContainerEdits, error) {
	if g.UUID == "" {
		return cdispec.ContainerEdits{}, fmt.Errorf("card %d has no UUID", g.Index)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if e, ok := h.cards[g.UUID]; ok {
		return copyEdits(e), nil
	}
	devices, err := h.lib.GetDeviceSpecsByID(g.UUID)
	if err != nil {
		return cdispec.ContainerEdits{}, fmt.Errorf("discovering device nodes of %s: %w", g.UUID, err)
	}
	if len(devices) != 1 {
		return cdispec.ContainerEdits{}, fmt.Errorf("discovering device nodes of %s: got %d devices, want 1", g.UUID, len(devices))
	}
	edits := devices[0].ContainerEdits
	if err := h.forHost(&edits); err != nil {
		return cdispec.ContainerEdits{}, fmt.Errorf("device nodes of %s: %w", g.UUID, err)
	}
	h.cards[g.UUID] = edits
	return copyEdits(edits), nil
}

// capNodeMode is the file mode of a MIG device's capability nodes in the
// container. NVIDIA's MIG user guide documents the capability files'
// DeviceFileMode for config and monitor only; for the GPU and compute
// instances' access nodes it says nothing, so this is 0444, what the kernel
// module reports for monitor (DeviceFileMode: 292 on the H200 of
// docs/gpu-reports/h200-580.159.04-mig-caps.txt): readable by the
// container's users, as access to an instance needs.
const capNodeMode os.FileMode = 0o444

// MIGEdits implements cdi.HardwareEdits: the MIG device's nodes, built
// here as NVIDIA's MIG user guide describes them rather than asked of nvcdi
// (whose MIG spec reads /proc/driver/nvidia-caps/mig-minors at a fixed
// path, docs/nvml.md): the parent card's /dev/nvidia<minor> as nvcdi gives
// it for the card (without the card's DRM nodes and by-path hooks, which
// nvcdi's own MIG spec leaves out too), and the GPU and compute instance's
// /dev/nvidia-caps/nvidia-cap<N>, N from mig-minors and the major from
// the nvidia-caps line of devices, both under ProcRoot. The capability
// nodes carry their type, major and minor, so the runtime creates them in
// the container even where the host has no such node yet (the driver
// creates them only when something asks, e.g. nvidia-smi).
//
// The two files are read at every call (one per MIG device prepared), not
// cached: the driver can be reloaded, with another major, while the plugin
// runs; reading them costs a few milliseconds next to the seconds an
// instance takes to create. Not cached either: a MIG UUID lives as long as
// its instance. Unverified on a MIG-enabled GPU (docs/nvml.md).
func (h *Hardware) MIGEdits(g gpu.GPU, m prepared.MIG) (cdispec.ContainerEdits, error) {
	if m.UUID == "" || m.GPUInstanceID == nil || m.ComputeInstanceID == nil {
		return cdispec.ContainerEdits{}, fmt.Errorf("MIG partition %s at %d of card %d was not created (no UUID or instance IDs recorded)", m.Profile, m.Start, g.Index)
	}
	what := fmt.Sprintf("MIG device %s of card %d (%s)", m.UUID, g.Index, g.UUID)
	card, err := h.CardEdits(g)
	if err != nil {
		return cdispec.ContainerEdits{}, fmt.Errorf("%s: parent card: %w", what, err)
	}
	parentPath := fmt.Sprintf("/dev/nvidia%d", g.Minor)
	var edits cdispec.ContainerEdits
	for _, n := range card.DeviceNodes {
		if n.Path == parentPath {
			edits.DeviceNodes = append(edits.DeviceNodes, n)
		}
	}
	if len(edits.DeviceNodes) == 0 {
		return cdispec.ContainerEdits{}, fmt.Errorf("%s: nvcdi found no %s for the parent card under the dev root %s", what, parentPath, h.devRoot)
	}
	files, err := nvcaps.Read(h.procRoot, h.procRootFlag)
	if err != nil {
		return cdispec.ContainerEdits{}, fmt.Errorf("%s: capability minors: %w", what, err)
	}
	nodes, err := nvcaps.MIGNodes(files.Minors, files.CapsMajor, g.Minor, *m.GPUInstanceID, *m.ComputeInstanceID)
	if err != nil {
		return cdispec.ContainerEdits{}, fmt.Errorf("%s: %w", what, err)
	}
	var caps cdispec.ContainerEdits
	for _, n := range nodes {
		mode := capNodeMode
		caps.DeviceNodes = append(caps.DeviceNodes, &cdispec.DeviceNode{
			Path: n.Path, HostPath: filepath.Join(h.devRoot, n.Path),
			Type: "c", Major: int64(n.Major), Minor: int64(n.Minor), FileMode: &mode,
		})
	}
	if err := h.forHost(&caps); err != nil {
		return cdispec.ContainerEdits{}, fmt.Errorf("%s: %w", what, err)
	}
	edits.DeviceNodes = append(edits.DeviceNodes, caps.DeviceNodes...)
	return edits, nil
}

// CommonEdits implements cdi.HardwareEdits.
func (h *Hardware) CommonEdits() (cdispec.ContainerEdits, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.common == nil {
		edits, err := h.lib.GetCommonEdits()
		if err != nil {
			return cdispec.ContainerEdits{}, fmt.Errorf("discovering driver files: %w", err)
		}
		common := edits.ContainerEdits
		if common == nil {
			common = &cdispec.ContainerEdits{}
		}
		if err := h.forHost(common); err != nil {
			return cdispec.ContainerEdits{}, fmt.Errorf("driver files: %w", err)
		}
		h.common = common
	}
	return copyEdits(*h.common), nil
}

// copyEdits copies the slices a caller may append to; the pointed-to
// entries are never modified by pkg/plugin/cdi.
func copyEdits(e cdispec.ContainerEdits) cdispec.ContainerEdits {
	out := e
	out.Env = append([]string(nil), e.Env...)
	out.DeviceNodes = append([]*cdispec.DeviceNode(nil), e.DeviceNodes...)
	out.Hooks = append([]*cdispec.Hook(nil), e.Hooks...)
	out.Mounts = append([]*cdispec.Mount(nil), e.Mounts...)
	out.AdditionalGIDs = append([]uint32(nil), e.AdditionalGIDs...)
	return out
}

// klogAdapter gives nvcdi our contextual logger.
type klogAdapter struct{ logger klog.Logger }

func (a klogAdapter) Debugf(f string, args ...any) { a.logger.V(4).Info(fmt.Sprintf(f, args...)) }
func (a klogAdapter) Tracef(f string, args ...any) { a.logger.V(6).Info(fmt.Sprintf(f, args...)) }
func (a klogAdapter) Info(args ...any)             { a.logger.V(2).Info(fmt.Sprint(args...)) }
func (a klogAdapter) Infof(f string, args ...any)  { a.logger.V(2).Info(fmt.Sprintf(f, args...)) }

// nvcdi warns about every optional driver file it does not find (graphics
// libraries, X11 configs); on a compute node that is expected noise.
func (a klogAdapter) Warning(args ...any) { a.logger.V(2).Info("Warning: " + fmt.Sprint(args...)) }
func (a klogAdapter) Warningf(f string, args ...any) {
	a.logger.V(2).Info("Warning: " + fmt.Sprintf(f, args...))
}
func (a klogAdapter) Errorf(f string, args ...any) { a.logger.Error(nil, fmt.Sprintf(f, args...)) }
