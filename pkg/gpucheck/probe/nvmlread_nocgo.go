//go:build !cgo

package probe

import (
	"github.com/tangram-gpu/tangram/pkg/gpu"
	"github.com/tangram-gpu/tangram/pkg/gpu/nvmlgpu"
	"github.com/tangram-gpu/tangram/pkg/gpucheck"
)

// nvmlMemory reports ErrNVMLUnavailable: NVML needs cgo (nvmlread.go).
func nvmlMemory(gpu.Source) ([]gpucheck.CardMemory, error) { return nil, nvmlgpu.ErrNVMLUnavailable }

// nvmlProcesses reports ErrNVMLUnavailable: NVML needs cgo (nvmlread.go).
func nvmlProcesses(gpu.Source, string) (compute, mps gpucheck.ProcessList, err error) {
	return compute, mps, nvmlgpu.ErrNVMLUnavailable
}
