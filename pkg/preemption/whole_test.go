package preemption

import (
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/tangram-gpu/tangram/pkg/device"
)

// TestHoldsWholeByAllocatableMemory: a claim that named no memory on a
// shareable card consumed the request policy's maximum, which is below the
// capacity when the capacity is no whole number of steps (an H100's
// 81559Mi, or a card less the driver's reserved memory): it holds the whole
// card, as device.HoldsWholeCard says, and a smaller share does not.
func TestHoldsWholeByAllocatableMemory(t *testing.T) {
	capacity := resource.MustParse("81559Mi")
	dev := resourceapi.Device{Name: "gpu-0", Capacity: map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{
		device.CapacityMemory: {Value: capacity, RequestPolicy: &resourceapi.CapacityRequestPolicy{
			Default: ptr.To(resource.MustParse("81408Mi")),
			ValidRange: &resourceapi.CapacityRequestPolicyRange{Min: ptr.To(resource.MustParse("256Mi")),
				Max: ptr.To(resource.MustParse("81408Mi")), Step: ptr.To(resource.MustParse("256Mi"))}}},
	}}
	s := &search{node: Node{Name: "n", Slices: []*resourceapi.ResourceSlice{{Spec: resourceapi.ResourceSliceSpec{
		Driver: device.DriverName, Pool: resourceapi.ResourcePool{Name: "n"}, Devices: []resourceapi.Device{dev}}}}}}
	claim := func(shareID bool, memory string) *resourceapi.ResourceClaim {
		r := resourceapi.DeviceRequestAllocationResult{Driver: device.DriverName, Pool: "n", Device: "gpu-0"}
		if shareID {
			r.ShareID = ptr.To(types.UID("share"))
		}
		if memory != "" {
			r.ConsumedCapacity = map[resourceapi.QualifiedName]resource.Quantity{device.CapacityMemory: resource.MustParse(memory)}
		}
		return &resourceapi.ResourceClaim{Status: resourceapi.ResourceClaimStatus{Allocation: &resourceapi.AllocationResult{
			Devices: resourceapi.DeviceAllocationResult{Results: []resourceapi.DeviceRequestAllocationResult{r}}}}}
	}
	for _, tt := range []struct {
		name  string
		claim *resourceapi.ResourceClaim
		want  bool
	}{
		{"no share ID", claim(false, ""), true},
		{"a share that recorded no memory", claim(true, ""), true},
		{"the policy's default: all of the allocatable memory", claim(true, "81408Mi"), true},
		{"a share of 40Gi", claim(true, "40Gi"), false},
	} {
		if got := s.holdsWhole(tt.claim); got != tt.want {
			t.Errorf("%s: holdsWhole %t, want %t", tt.name, got, tt.want)
		}
	}
}
