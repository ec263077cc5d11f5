//go:build !cgo

package sharing

// NewNVMLComputeModeSetter reports ErrNVMLUnavailable: NVML is loaded
// through cgo.
func NewNVMLComputeModeSetter() (ComputeModeSetter, error) {
	return nil, ErrNVMLUnavailable
}
