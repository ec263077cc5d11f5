package sim

import (
	"fmt"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"

	"github.com/tangram-gpu/tangram/pkg/gpu"
	"github.com/tangram-gpu/tangram/pkg/names"
)

// memoryStep is the granularity of memory shares (DESIGN: 7474Mi rounds to
// 7680Mi).
var memoryStep = resource.MustParse("256Mi")

// publishedDevices are the ResourceSlice devices of a shareable node.
//
// TODO(slices): this mirrors the device model of DESIGN.md until
// pkg/slices lands; then it becomes
// slices.Devices(gpus, slices.Options{NodeName: node, Sharing: true}).
func publishedDevices(node string, gpus []gpu.GPU) ([]resourceapi.Device, error) {
	devices := make([]resourceapi.Device, 0, len(gpus))
	for _, g := range gpus {
		if g.MemoryBytes <= 0 {
			return nil, fmt.Errorf("card %d of node %s reports no memory", g.Index, node)
		}
		mem := *resource.NewQuantity(g.MemoryBytes, resource.BinarySI)
		devices = append(devices, resourceapi.Device{
			Name: fmt.Sprintf("%s%d", names.DevicePrefix, g.Index),
			Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
				names.AttrType:        {StringValue: ptr.To(names.TypeGPU)},
				names.AttrUUID:        {StringValue: ptr.To(g.UUID)},
				names.AttrIndex:       {IntValue: ptr.To(int64(g.Index))},
				names.AttrProductName: {StringValue: ptr.To(g.ProductName)},
				names.AttrBrand:       {StringValue: ptr.To(g.Brand)},
				names.AttrShareable:   {BoolValue: ptr.To(true)},
			},
			Capacity: map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{
				names.CapacityMemory: {
					Value: mem,
					RequestPolicy: &resourceapi.CapacityRequestPolicy{
						Default:    ptr.To(mem),
						ValidRange: &resourceapi.CapacityRequestPolicyRange{Min: ptr.To(memoryStep), Max: ptr.To(mem), Step: ptr.To(memoryStep)},
					},
				},
				names.CapacityCompute: {
					Value: resource.MustParse("100"),
					RequestPolicy: &resourceapi.CapacityRequestPolicy{
						Default:    ptr.To(resource.MustParse("0")),
						ValidRange: &resourceapi.CapacityRequestPolicyRange{Min: ptr.To(resource.MustParse("0")), Max: ptr.To(resource.MustParse("100")), Step: ptr.To(resource.MustParse("1"))},
					},
				},
			},
			AllowMultipleAllocations: ptr.To(true),
		})
	}
	return devices, nil
}
