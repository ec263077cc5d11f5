package v1alpha1

import (
	"encoding/json"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// SharingBackend says how the shares of one card are isolated.
type SharingBackend string

const (
	// BackendMPS enforces every share with NVIDIA MPS per-client limits:
	// pinned device memory and, when set, the active thread percentage.
	BackendMPS SharingBackend = "mps"
	// BackendNone only accounts shares in the scheduler. Nothing stops a
	// container from using more memory or compute than it was given.
	BackendNone SharingBackend = "none"

	// DefaultBackend is used when a config does not name a backend.
	DefaultBackend = BackendMPS
)

// SupportedBackends lists the accepted sharing.backend values, in the order
// error messages show them.
var SupportedBackends = []SharingBackend{BackendMPS, BackendNone}

// GpuConfig is the opaque configuration of gpu.tangram.dev devices.
//
// +kubebuilder:object:root=true
type GpuConfig struct {
	metav1.TypeMeta `json:",inline"`

	// Sharing applies to results that are shares of a card (the claim
	// requested a memory capacity); whole cards ignore it.
	Sharing *Sharing `json:"sharing,omitempty"`
}

// Sharing configures how shares are isolated.
type Sharing struct {
	// Backend is "mps" (default) or "none".
	Backend SharingBackend `json:"backend,omitempty"`

	// MPS holds settings for the mps backend; forbidden with "none".
	MPS *MPSSettings `json:"mps,omitempty"`
}

// MPSSettings are defaults for shares enforced by MPS.
//
// There is deliberately no default memory limit: every share's memory is
// decided by the scheduler (the request, or the class's default) and recorded
// in the allocation, and the limit the container gets is exactly that amount.
type MPSSettings struct {
	// DefaultActiveThreadPercentage caps the share of the card's streaming
	// multiprocessors a container may use when its claim requested no
	// `compute` capacity (time-shared shares). 1..100. Unset means no cap.
	// A share that requested compute always gets its requested percentage.
	DefaultActiveThreadPercentage *int32 `json:"defaultActiveThreadPercentage,omitempty"`
}

// String renders the config as JSON for logs; the embedded TypeMeta would
// otherwise print only apiVersion and kind.
func (c *GpuConfig) String() string {
	if c == nil {
		return "<nil>"
	}
	b, err := json.Marshal(c)
	if err != nil {
		return fmt.Sprintf("<unprintable GpuConfig: %v>", err)
	}
	return string(b)
}
