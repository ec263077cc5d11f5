//go:build !cgo

package nvidia

import (
	"context"

	cdispec "tags.cncf.io/container-device-interface/specs-go"

	"github.com/tangram-gpu/tangram/pkg/gpu"
	"github.com/tangram-gpu/tangram/pkg/plugin/prepared"
)

// Hardware is unusable without cgo; New never returns one.
type Hardware struct{}

// New reports ErrUnavailable: nvcdi needs NVML, which needs cgo.
func New(context.Context, Options) (*Hardware, error) { return nil, ErrUnavailable }

// Warm implements the cgo API; it always fails.
func (*Hardware) Warm([]gpu.GPU) error { return ErrUnavailable }

// CardEdits implements cdi.HardwareEdits; it always fails.
func (*Hardware) CardEdits(gpu.GPU) (cdispec.ContainerEdits, error) {
	return cdispec.ContainerEdits{}, ErrUnavailable
}

// CommonEdits implements cdi.HardwareEdits; it always fails.
func (*Hardware) CommonEdits() (cdispec.ContainerEdits, error) {
	return cdispec.ContainerEdits{}, ErrUnavailable
}

// MIGEdits implements cdi.HardwareEdits; it always fails.
func (*Hardware) MIGEdits(gpu.GPU, prepared.MIG) (cdispec.ContainerEdits, error) {
	return cdispec.ContainerEdits{}, ErrUnavailable
}
