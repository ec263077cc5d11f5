// Package nvidia implements cdi.HardwareEdits for real NVIDIA GPUs with
// NVIDIA's own CDI generator (github.com/NVIDIA/nvidia-container-toolkit/pkg/nvcdi,
// NVML mode): the card's device nodes per device, and the control devices,
// driver libraries, binaries and nvidia-cdi-hook calls once per spec. A MIG
// device's nodes are built here instead (MIGEdits: the card's node from
// nvcdi, the instance's capability nodes from pkg/gpu/nvcaps).
//
// Results are cached per card UUID and computed once for the common edits:
// discovery walks the driver root and initialises NVML, which is far slower
// than a prepare should be. Call Warm at start-up to pay that cost early.
//
// This path has not run on a real GPU in this repository's CI; it is unit
// tested against go-nvml's dgxa100 mock with a fake device root and against
// the C mock libnvidia-ml.so.1 (hack/mock-nvml). nvcdi loads
// NVML through cgo; a binary built with CGO_ENABLED=0 gets ErrUnavailable
// from New and must use cdi.NoHardware.
package nvidia

import "errors"

// ErrUnavailable is returned by New in binaries built without cgo.
var ErrUnavailable = errors.New("NVIDIA CDI generation needs cgo (NVML); this binary was built without it")

// Options say where the driver lives as seen from the plugin's container.
type Options struct {
	// DriverRoot is the root of the driver installation as the plugin sees
	// it: "/" for a driver installed on the host and a plugin on the host,
	// /driver-root in the chart's pod.
	DriverRoot string
	// HostDriverRoot is the same root as the host (the container runtime)
	// sees it, e.g. /run/nvidia/driver for the GPU operator's driver; the
	// spec's host paths are rewritten from DriverRoot to it. Empty means
	// the same as DriverRoot.
	HostDriverRoot string
	// DevRoot is where /dev of the host is found; defaults to DriverRoot.
	DevRoot string
	// CDIHookPath is nvidia-cdi-hook, called by the runtime to create
	// symlinks and update the ld cache in the container: a path under
	// DriverRoot (rewritten like every other path) or a host path.
	CDIHookPath string
	// NVMLLibrary is libnvidia-ml.so.1 under DriverRoot; empty means
	// go-nvml's default (the dynamic linker's search path).
	NVMLLibrary string
	// ProcRoot is where the kernel's /proc is found: MIG devices' capability
	// minors (driver/nvidia-caps/mig-minors) and the nvidia-caps major
	// (devices) are read there. Empty means /proc (kernel files are
	// global: a container's /proc has them on a real node).
	ProcRoot string
	// ProcRootFlag names the option that sets ProcRoot, for messages.
	ProcRootFlag string
}
