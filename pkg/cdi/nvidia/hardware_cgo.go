//go:build cgo

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

// Hardware is a cdi.HardwareEdits backed by nvcdi.
type Hardware struct {
	lib nvcdi.Interface

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
	if lib != nil {
		nvcdiOpts = append(nvcdiOpts, nvcdi.WithNvmlLib(lib))
	}
	gen, err := nvcdi.New(nvcdiOpts...)
	if err != nil {
		return nil, fmt.Errorf("creating NVIDIA CDI generator: %w", err)
	}
	return &Hardware{lib: gen, cards: map[string]cdispec.ContainerEdits{}}, nil
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
