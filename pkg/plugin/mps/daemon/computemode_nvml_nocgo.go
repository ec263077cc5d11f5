//go:build !cgo

package daemon

// NewNVMLComputeModeSetter reports ErrNVMLUnavailable: NVML is loaded
// through cgo.
func NewNVMLComputeModeSetter(libraryPath string) (ComputeModeSetter, error) {
	return nil, ErrNVMLUnavailable
}
