package sim

import (
	resourceapi "k8s.io/api/resource/v1"

	"github.com/tangram-gpu/tangram/pkg/gpu"
	"github.com/tangram-gpu/tangram/pkg/resourceslices"
)

// publishedDevices are the ResourceSlice devices the kubelet plugin
// publishes for a node that shares its cards.
func publishedDevices(node string, gpus []gpu.GPU) ([]resourceapi.Device, error) {
	return resourceslices.Devices(gpus, resourceslices.Options{NodeName: node, Sharing: true})
}
