package sim

import (
	resourceapi "k8s.io/api/resource/v1"

	"github.com/tangram-gpu/tangram/pkg/gpu"
	"github.com/tangram-gpu/tangram/pkg/slices"
)

// publishedDevices are the ResourceSlice devices the kubelet plugin
// publishes for a node that shares its cards.
func publishedDevices(node string, gpus []gpu.GPU) ([]resourceapi.Device, error) {
	return slices.Devices(gpus, slices.Options{NodeName: node, Sharing: true})
}
