package cdi

import (
	cdispec "tags.cncf.io/container-device-interface/specs-go"

	"github.com/tangram-gpu/tangram/pkg/gpu"
	"github.com/tangram-gpu/tangram/pkg/plugin/prepared"
)

// HardwareEdits supplies what a container needs to use real cards: device
// nodes (/dev/nvidiaN), the control nodes and the driver's user-space files.
// With fake GPUs there is nothing to inject; see NoHardware.
type HardwareEdits interface {
	// CardEdits returns the edits of one card, e.g. its /dev/nvidia<Minor>.
	// They are added to every CDI device of that card.
	CardEdits(g gpu.GPU) (cdispec.ContainerEdits, error)
	// MIGEdits returns the edits of the created MIG partition m of card
	// g: its card's node and its GPU and compute instance's capability
	// nodes (/dev/nvidia-caps).
	MIGEdits(g gpu.GPU, m prepared.MIG) (cdispec.ContainerEdits, error)
	// CommonEdits returns edits every container with any card needs once:
	// control devices, driver libraries and binaries. They go into the
	// spec-level edits, which CDI applies once per spec.
	CommonEdits() (cdispec.ContainerEdits, error)
}

// NoHardware adds nothing: fake GPUs have no device nodes or driver files.
type NoHardware struct{}

// CardEdits implements HardwareEdits.
func (NoHardware) CardEdits(gpu.GPU) (cdispec.ContainerEdits, error) {
	return cdispec.ContainerEdits{}, nil
}

// CommonEdits implements HardwareEdits.
func (NoHardware) CommonEdits() (cdispec.ContainerEdits, error) {
	return cdispec.ContainerEdits{}, nil
}

// MIGEdits implements HardwareEdits.
func (NoHardware) MIGEdits(gpu.GPU, prepared.MIG) (cdispec.ContainerEdits, error) {
	return cdispec.ContainerEdits{}, nil
}
