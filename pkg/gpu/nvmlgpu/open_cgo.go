//go:build cgo

package nvmlgpu

import (
	"context"
	"fmt"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"k8s.io/klog/v2"

	"github.com/tangram-gpu/tangram/pkg/gpu"
)

// Open loads and initialises the host's NVML library (libnvidia-ml.so.1)
// and returns a Source on it, plus a function that shuts NVML down; call it
// when done with the Source.
func Open(ctx context.Context) (gpu.Source, func(), error) {
	return open(ctx, nvml.New())
}

// open is Open on a given library, so that tests can pass a mock.
func open(ctx context.Context, lib nvml.Interface) (gpu.Source, func(), error) {
	if ret := lib.Init(); ret != nvml.SUCCESS {
		return nil, func() {}, fmt.Errorf("initialising NVML (is the NVIDIA driver installed and libnvidia-ml.so.1 on the library path?): %w", ret)
	}
	logger := klog.FromContext(ctx)
	shutdown := func() {
		if ret := lib.Shutdown(); ret != nvml.SUCCESS {
			logger.Error(ret, "Shutting down NVML")
		}
	}
	return New(lib), shutdown, nil
}
