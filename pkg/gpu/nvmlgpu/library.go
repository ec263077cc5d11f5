//go:build cgo

package nvmlgpu

import (
	"fmt"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/tangram-gpu/tangram/pkg/gpu"
)

// Library is the NVML library under src (a Source from Open or New), for
// callers that read what the Source does not publish: the GPU check's
// read-only rows (pkg/gpucheck/probe). Only cgo builds have it.
func Library(src gpu.Source) (nvml.Interface, error) {
	s, ok := src.(*source)
	if !ok {
		return nil, fmt.Errorf("the source is not NVML's (%T)", src)
	}
	return s.lib, nil
}
