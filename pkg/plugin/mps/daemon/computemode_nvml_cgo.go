//go:build cgo

package daemon

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// NewNVMLComputeModeSetter returns the NVML-backed setter using the NVML
// library at libraryPath (the driver root's libnvidia-ml.so.1).
func NewNVMLComputeModeSetter(libraryPath string) (ComputeModeSetter, error) {
	if libraryPath == "" {
		return nil, errors.New("setting compute modes: no NVML library path (internal error: resolve it under the driver root)")
	}
	return &NVMLComputeModeSetter{LibraryPath: libraryPath}, nil
}

// NVMLComputeModeSetter sets compute modes through NVML. It needs the NVIDIA
// driver's libnvidia-ml.so and root privileges; it has been tested against
// go-nvml's dgxa100 mock and the C mock library (hack/mock-nvml), not on a
// real GPU.
type NVMLComputeModeSetter struct {
	// Lib is the NVML library; nil means the one at LibraryPath.
	Lib nvml.Interface
	// LibraryPath is libnvidia-ml.so.1 under the driver root.
	LibraryPath string

	once    sync.Once
	initErr error
	mu      sync.Mutex
}

// SetComputeMode sets the card's compute mode, initialising NVML on first
// use. NVML stays initialised for the life of the process.
func (n *NVMLComputeModeSetter) SetComputeMode(_ context.Context, uuid string, mode ComputeMode) error {
	n.once.Do(func() {
		if n.Lib == nil {
			n.Lib = nvml.New(nvml.WithLibraryPath(n.LibraryPath))
		}
		if ret := n.Lib.Init(); ret != nvml.SUCCESS {
			n.initErr = fmt.Errorf("initialising NVML to set compute modes: %s", ret.Error())
		}
	})
	if n.initErr != nil {
		return n.initErr
	}
	var nvmlMode nvml.ComputeMode
	switch mode {
	case ComputeModeDefault:
		nvmlMode = nvml.COMPUTEMODE_DEFAULT
	case ComputeModeExclusiveProcess:
		nvmlMode = nvml.COMPUTEMODE_EXCLUSIVE_PROCESS
	default:
		return fmt.Errorf("setting compute mode of %s: unknown mode %q", uuid, mode)
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	device, ret := n.Lib.DeviceGetHandleByUUID(uuid)
	if ret != nvml.SUCCESS {
		return fmt.Errorf("finding card %s in NVML: %s", uuid, ret.Error())
	}
	if ret := device.SetComputeMode(nvmlMode); ret != nvml.SUCCESS {
		return fmt.Errorf("setting compute mode of %s to %s: %s", uuid, mode, ret.Error())
	}
	return nil
}
