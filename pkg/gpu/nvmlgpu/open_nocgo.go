//go:build !cgo

package nvmlgpu

import (
	"context"

	"github.com/tangram-gpu/tangram/pkg/gpu"
)

// Available reports whether this build can load NVML: not without cgo.
func Available() bool { return false }

// Open reports ErrNVMLUnavailable: go-nvml needs cgo to load NVML. The
// returned cleanup function is a no-op, so callers can defer it either way.
func Open(ctx context.Context, libraryPath string) (gpu.Source, func(), error) {
	return nil, func() {}, ErrNVMLUnavailable
}

// Partitions reports ErrNVMLUnavailable: NVML needs cgo.
func Partitions(gpu.Source) (gpu.MIGPartitions, error) { return nil, ErrNVMLUnavailable }

// QueryMIG reports ErrNVMLUnavailable: NVML needs cgo. (The GPU check,
// pkg/gpucheck/probe, links it; without this a !cgo build of the probe
// did not compile.)
func QueryMIG(gpu.Source) ([]gpu.MIGQuery, error) { return nil, ErrNVMLUnavailable }
