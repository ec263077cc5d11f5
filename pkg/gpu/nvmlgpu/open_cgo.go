//go:build cgo

package nvmlgpu

import (
	"context"
	"fmt"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"k8s.io/klog/v2"

	"github.com/tangram-gpu/tangram/pkg/gpu"
)

// Available reports whether this build can load NVML (cgo builds can).
func Available() bool { return true }

// Open loads and initialises the NVML library at libraryPath (the driver
// root's libnvidia-ml.so.1, see pkg/plugin/driverroot) and returns a Source on it,
// plus a function that shuts NVML down; call it when done with the Source.
func Open(ctx context.Context, libraryPath string) (gpu.Source, func(), error) {
	if libraryPath == "" {
		return nil, func() {}, fmt.Errorf("opening NVML: no library path (internal error: resolve it under the driver root)")
	}
	return open(ctx, nvml.New(nvml.WithLibraryPath(libraryPath)), libraryPath)
}

// open is Open on a given library, so that tests can pass a mock.
func open(ctx context.Context, lib nvml.Interface, libraryPath string) (gpu.Source, func(), error) {
	if ret := lib.Init(); ret != nvml.SUCCESS {
		if ret == nvml.ERROR_LIBRARY_NOT_FOUND {
			return nil, func() {}, fmt.Errorf("loading NVML from %s: %w (is it the driver's libnvidia-ml.so.1, for this machine's architecture?)", libraryPath, ret)
		}
		return nil, func() {}, fmt.Errorf("initialising NVML from %s (is the NVIDIA kernel driver loaded?): %w", libraryPath, ret)
	}
	logger := klog.FromContext(ctx)
	shutdown := func() {
		if ret := lib.Shutdown(); ret != nvml.SUCCESS {
			logger.Error(ret, "Shutting down NVML")
		}
	}
	return New(lib), shutdown, nil
}
