// Package nvidia implements cdi.HardwareEdits for real NVIDIA GPUs with
// NVIDIA's own CDI generator (github.com/NVIDIA/nvidia-container-toolkit/pkg/nvcdi,
// NVML mode): the card's device nodes per device, and the control devices,
// driver libraries, binaries and nvidia-cdi-hook calls once per spec.
//
// Results are cached per card UUID and computed once for the common edits:
// discovery walks the driver root and initialises NVML, which is far slower
// than a prepare should be. Call Warm at start-up to pay that cost early.
//
// This path has not run on a real GPU in this repository's CI; it is unit
// tested against go-nvml's dgxa100 mock with a fake device root.
package nvidia

import (
	"context"
	"fmt"
	"sync"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/nvidia-container-toolkit/pkg/nvcdi"
	"k8s.io/klog/v2"
	cdispec "tags.cncf.io/container-device-interface/specs-go"

	"github.com/tangram-gpu/tangram/pkg/gpu"
)

// Options say where the driver lives as seen from the plugin's container.
type Options struct {
	// DriverRoot is the root of the driver installation, "/" for a driver
	// installed on the host, "/run/nvidia/driver" for the GPU operator's
	// driver container (mounted into the plugin at the same path).
	DriverRoot string
	// DevRoot is where /dev of the host is found; defaults to DriverRoot.
	DevRoot string
	// CDIHookPath is the host path of nvidia-cdi-hook, called by the
	// runtime to create symlinks and update the ld cache in the container.
	CDIHookPath string
	// NVML replaces the real library, for tests.
	NVML nvml.Interface
}

// Hardware is a cdi.HardwareEdits backed by nvcdi.
type Hardware struct {
	lib nvcdi.Interface

	mu     sync.Mutex
	common *cdispec.ContainerEdits
	cards  map[string]cdispec.ContainerEdits
}

// New creates the generator; it does not touch NVML or the disk yet.
func New(ctx context.Context, opts Options) (*Hardware, error) {
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
	if opts.NVML != nil {
		nvcdiOpts = append(nvcdiOpts, nvcdi.WithNvmlLib(opts.NVML))
	}
	lib, err := nvcdi.New(nvcdiOpts...)
	if err != nil {
		return nil, fmt.Errorf("creating NVIDIA CDI generator: %w", err)
	}
	return &Hardware{lib: lib, cards: map[string]cdispec.ContainerEdits{}}, nil
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
	h.cards[g.UUID] = devices[0].ContainerEdits
	return copyEdits(devices[0].ContainerEdits), nil
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
		h.common = edits.ContainerEdits
		if h.common == nil {
			h.common = &cdispec.ContainerEdits{}
		}
	}
	return copyEdits(*h.common), nil
}

// copyEdits copies the slices a caller may append to; the pointed-to
// entries are never modified by pkg/cdi.
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
