package dra_test

import (
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/dynamic-resource-allocation/structured"
	"k8s.io/utils/ptr"

	"github.com/tangram-gpu/tangram/pkg/device"
	"github.com/tangram-gpu/tangram/pkg/dra"
)

// TestAllocatedState: admin access takes nothing, a result with a share ID
// is a share with its consumed capacity, any other result is exclusive.
func TestAllocatedState(t *testing.T) {
	result := func(dev string, share string, admin bool) resourceapi.DeviceRequestAllocationResult {
		r := resourceapi.DeviceRequestAllocationResult{Request: "r", Driver: device.DriverName, Pool: "p", Device: dev, AdminAccess: ptr.To(admin)}
		if share != "" {
			r.ShareID = ptr.To(types.UID(share))
			r.ConsumedCapacity = map[resourceapi.QualifiedName]resource.Quantity{device.CapacityMemory: resource.MustParse("20Gi")}
		}
		return r
	}
	claim := &resourceapi.ResourceClaim{Status: resourceapi.ResourceClaimStatus{Allocation: &resourceapi.AllocationResult{
		Devices: resourceapi.DeviceAllocationResult{Results: []resourceapi.DeviceRequestAllocationResult{
			result("gpu-0", "", false), result("gpu-1", "s1", false), result("gpu-2", "", true),
		}}}}}
	unallocated := &resourceapi.ResourceClaim{}
	state := dra.AllocatedState([]*resourceapi.ResourceClaim{claim, unallocated})

	id := func(dev string) structured.DeviceID { return structured.MakeDeviceID(device.DriverName, "p", dev) }
	if !state.AllocatedDevices.Has(id("gpu-0")) || state.AllocatedDevices.Len() != 1 {
		t.Errorf("exclusive devices = %v, want only gpu-0", state.AllocatedDevices.UnsortedList())
	}
	if !state.AllocatedSharedDeviceIDs.Has(structured.MakeSharedDeviceID(id("gpu-1"), ptr.To(types.UID("s1")))) || state.AllocatedSharedDeviceIDs.Len() != 1 {
		t.Errorf("shares = %v, want only gpu-1/s1", state.AllocatedSharedDeviceIDs.UnsortedList())
	}
	if _, ok := state.AggregatedCapacity[id("gpu-1")]; !ok || len(state.AggregatedCapacity) != 1 {
		t.Errorf("consumed capacity recorded for %v, want only gpu-1", state.AggregatedCapacity)
	}
}
