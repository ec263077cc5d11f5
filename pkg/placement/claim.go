package placement

import (
	"fmt"
	"strconv"
	"strings"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/tangram-gpu/tangram/pkg/device"
)

// Claim builds the ResourceClaim a pod with request r would carry: whole
// cards from the GPU class with count, a MIG partition from the MIG class
// with a profile selector, a share from the shared class with
// capacity requests (compute, memory as ShareOn computes them for card
// shareCard), a productName selector for r.Models. With pin set, a selector
// on the index attribute restricts it to the given cards, so that the
// allocator, run for the chosen node, validates exactly that placement.
func Claim(n *Node, r Request, cards []int, pin bool) (*resourceapi.ResourceClaim, error) {
	if r.GPUMilli() == 0 {
		return nil, fmt.Errorf("request %s asks for no GPU, so it needs no claim", r.Name)
	}
	want := r.WholeCards
	if r.ShareMilli > 0 || r.MIGProfile != "" {
		want = 1
	}
	if len(cards) != want {
		return nil, fmt.Errorf("request %s: %d cards chosen for %d wanted", r.Name, len(cards), want)
	}
	req := resourceapi.ExactDeviceRequest{
		DeviceClassName: device.DeviceClassName,
		AllocationMode:  resourceapi.DeviceAllocationModeExactCount,
		Count:           int64(want),
	}
	if len(r.Models) > 0 {
		quoted := make([]string, len(r.Models))
		for i, m := range r.Models {
			quoted[i] = strconv.Quote(m)
		}
		req.Selectors = append(req.Selectors, celSelector(fmt.Sprintf(`device.attributes[%q].%s in [%s]`,
			device.DriverName, device.AttrProductName, strings.Join(quoted, ", "))))
	}
	if pin {
		idx := make([]string, len(cards))
		for i, c := range cards {
			v, err := cardIndex(n.Cards[c].Device)
			if err != nil {
				return nil, err
			}
			idx[i] = strconv.Itoa(v)
		}
		// A card in MIG mode is pinned through its partitions' parentIndex.
		attr := device.AttrIndex
		if r.MIGProfile != "" {
			attr = device.AttrParentIndex
		}
		req.Selectors = append(req.Selectors, celSelector(fmt.Sprintf(`device.attributes[%q].%s in [%s]`,
			device.DriverName, attr, strings.Join(idx, ", "))))
	}
	if r.MIGProfile != "" {
		// One partition of the profile.
		req.DeviceClassName = device.MIGDeviceClassName
		req.Selectors = append(req.Selectors, celSelector(fmt.Sprintf(`device.attributes[%q].%s == %q`,
			device.DriverName, device.AttrMIGProfile, r.MIGProfile)))
	}
	if r.ShareMilli > 0 {
		req.DeviceClassName = device.SharedDeviceClassName
		s := ShareOn(&n.Cards[cards[0]], r.ShareMilli)
		req.Capacity = &resourceapi.CapacityRequirements{Requests: map[resourceapi.QualifiedName]resource.Quantity{
			device.CapacityMemory: *resource.NewQuantity(s.Memory, resource.BinarySI),
		}}
		if n.Cards[cards[0]].Compute.Value > 0 {
			req.Capacity.Requests[device.CapacityCompute] = *resource.NewQuantity(s.Compute, resource.DecimalSI)
		}
	}
	return &resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Name: r.Name, Namespace: "default", UID: types.UID("claim-" + r.Name)},
		Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{
			Requests: []resourceapi.DeviceRequest{{Name: "gpu", Exactly: &req}},
		}},
	}, nil
}

func celSelector(expr string) resourceapi.DeviceSelector {
	return resourceapi.DeviceSelector{CEL: &resourceapi.CELDeviceSelector{Expression: expr}}
}

// cardIndex reads N from a card's device name "gpu-N".
func cardIndex(deviceName string) (int, error) {
	ref, err := device.ParseDeviceName(deviceName)
	if err != nil || ref.MIG != nil {
		return 0, fmt.Errorf("device %q is not named %s<index>; cannot pin it", deviceName, device.DevicePrefix)
	}
	return ref.Index, nil
}
