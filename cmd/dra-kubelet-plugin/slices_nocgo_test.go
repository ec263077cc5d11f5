//go:build !cgo

package main

import (
	"errors"
	"testing"

	"github.com/tangram-gpu/tangram/pkg/gpu/nvmlgpu"
)

// Without cgo the plugin says so, rather than that the driver root lacks
// NVML: a library it could not load anyway.
func TestSlicesWithoutCgo(t *testing.T) {
	_, err := runCommand(t, "slices", "--node-name", "n", "--driver-root", t.TempDir())
	if !errors.Is(err, nvmlgpu.ErrNVMLUnavailable) {
		t.Errorf("error %v, want ErrNVMLUnavailable", err)
	}
}
