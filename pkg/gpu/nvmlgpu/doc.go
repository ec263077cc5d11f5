// Package nvmlgpu lists a node's GPUs through NVIDIA's NVML library.
//
// go-nvml's nvml package only compiles with cgo (its types live in cgo
// files), while release images are built with CGO_ENABLED=0. The package is
// therefore split by build tag:
//
//   - Open exists in every build. With cgo it loads libnvidia-ml.so.1 at run
//     time (dlopen; nothing is linked at build time); without cgo it returns
//     ErrNVMLUnavailable, so callers compile either way and fall back to a
//     fake profile.
//   - New, which reads the cards from any nvml.Interface (the real library
//     or a go-nvml mock), exists only in cgo builds.
//   - The NVLink topology computation is plain Go and builds everywhere.
//
// Values a card reports oddly (unsupported calls, unparsable versions, no
// NUMA node) are logged and left out of that card; a card whose UUID cannot
// be read is skipped. Nothing a device reports aborts the listing of the
// other cards.
package nvmlgpu

import "errors"

// ErrNVMLUnavailable is returned by Open in a binary built without cgo.
var ErrNVMLUnavailable = errors.New("this binary was built without cgo; NVML is unavailable: use --fake-profile or a cgo build")

// Names of the NVML event types the health monitor registers for, as
// gpu.HealthRegistration reports them.
const (
	EventNameXidCriticalError  = "XidCriticalError"
	EventNameGpuRecoveryAction = "GpuRecoveryAction"
)
