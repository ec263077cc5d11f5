package dra

import (
	"fmt"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/tangram-gpu/tangram/pkg/device"
)

// Claim builds a ResourceClaim in namespace "default" whose UID is its name,
// with the given requests and constraints.
func Claim(name string, constraints []resourceapi.DeviceConstraint, requests ...resourceapi.DeviceRequest) *resourceapi.ResourceClaim {
	return &resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", UID: types.UID(name)},
		Spec: resourceapi.ResourceClaimSpec{
			Devices: resourceapi.DeviceClaim{Requests: requests, Constraints: constraints},
		},
	}
}

// WholeGPUs requests count whole cards of class gpu.tangram.dev, each
// matching all CEL selectors.
func WholeGPUs(name string, count int64, selectors ...string) resourceapi.DeviceRequest {
	return request(name, device.DeviceClassName, count, nil, selectors)
}

// SharedGPU requests one share of a card of class shared-gpu.tangram.dev.
// A zero memory or compute quantity is left out of the request, so the
// card's default applies (all memory, no compute share).
func SharedGPU(name string, memory, compute resource.Quantity, selectors ...string) resourceapi.DeviceRequest {
	capacity := map[resourceapi.QualifiedName]resource.Quantity{}
	if !memory.IsZero() {
		capacity[device.CapacityMemory] = memory
	}
	if !compute.IsZero() {
		capacity[device.CapacityCompute] = compute
	}
	return request(name, device.SharedDeviceClassName, 1, capacity, selectors)
}

func request(name, class string, count int64, capacity map[resourceapi.QualifiedName]resource.Quantity, selectors []string) resourceapi.DeviceRequest {
	exact := &resourceapi.ExactDeviceRequest{
		DeviceClassName: class,
		AllocationMode:  resourceapi.DeviceAllocationModeExactCount,
		Count:           count,
	}
	for _, expr := range selectors {
		exact.Selectors = append(exact.Selectors, resourceapi.DeviceSelector{CEL: &resourceapi.CELDeviceSelector{Expression: expr}})
	}
	if len(capacity) > 0 {
		exact.Capacity = &resourceapi.CapacityRequirements{Requests: capacity}
	}
	return resourceapi.DeviceRequest{Name: name, Exactly: exact}
}

// MatchAttribute constrains the named requests (all of them when none are
// named) to devices that share the value of a driver attribute, e.g.
// MatchAttribute(device.AttrNVLinkDomain).
func MatchAttribute(attribute string, requests ...string) resourceapi.DeviceConstraint {
	full := resourceapi.FullyQualifiedName(device.DriverName + "/" + attribute)
	return resourceapi.DeviceConstraint{Requests: requests, MatchAttribute: &full}
}

// Devices lists the device names of an allocation result in result order.
func Devices(result *resourceapi.AllocationResult) []string {
	if result == nil {
		return nil
	}
	out := make([]string, 0, len(result.Devices.Results))
	for _, r := range result.Devices.Results {
		out = append(out, r.Device)
	}
	return out
}

// AdminGPU is a monitoring request: admin access to one card of class
// gpu.tangram.dev matching the selectors, asking for no memory, so it fits
// beside whatever holds the card (see resourceslices.Devices).
func AdminGPU(name string, selectors ...string) resourceapi.DeviceRequest {
	r := request(name, device.DeviceClassName, 1,
		map[resourceapi.QualifiedName]resource.Quantity{device.CapacityMemory: resource.MustParse("0")}, selectors)
	r.Exactly.AdminAccess = ptr.To(true)
	return r
}

// MIGPartition requests one MIG partition of class mig.tangram.dev of the
// given profile ("3g.40gb"; "" for any), each matching all CEL selectors.
func MIGPartition(name, profile string, selectors ...string) resourceapi.DeviceRequest {
	if profile != "" {
		selectors = append([]string{fmt.Sprintf(`device.attributes[%q].%s == %q`, device.DriverName, device.AttrMIGProfile, profile)}, selectors...)
	}
	return request(name, device.MIGDeviceClassName, 1, nil, selectors)
}
