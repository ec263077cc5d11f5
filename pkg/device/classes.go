package device

import (
	"fmt"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// DeviceClasses returns the two classes the Helm chart publishes
// (deployments/helm/tangram/templates/deviceclasses.yaml) with
// sharing.requireHardEnforcement=false, minus labels, the shared class's
// default config and the optional extended resource name:
// gpu.tangram.dev (any of our GPUs) and shared-gpu.tangram.dev (only cards
// published as shareable). Fake GPUs enforce nothing (shareEnforcement
// "advisory"), so simulators and tests allocate against these; a test holds
// them, and HardEnforcedDeviceClasses, equal to the chart's
// (deployments/helm, TestDeviceClassesMatchGo).
//
// The shared class tests that the attribute exists before reading it: a
// device without it (another driver version, a whole-card-only publication
// that omits it) then simply does not match instead of failing the CEL
// evaluation for the whole claim.
func DeviceClasses() []*resourceapi.DeviceClass {
	return []*resourceapi.DeviceClass{
		deviceClass(DeviceClassName, fmt.Sprintf(`device.driver == %q`, DriverName)),
		deviceClass(SharedDeviceClassName, fmt.Sprintf(`device.driver == %q && %q in device.attributes[%q] && device.attributes[%q].%s`,
			DriverName, AttrShareable, DriverName, DriverName, AttrShareable)),
	}
}

// ShareEnforcementHard is the AttrShareEnforcement value of a node that
// holds shares to their limits itself (pkg/plugin/enforcement.Hard).
const ShareEnforcementHard = "hard"

// HardEnforcedDeviceClasses are the classes as the chart renders them by
// default (sharing.requireHardEnforcement=true): the shared class also
// requires the node's shareEnforcement to be "hard".
func HardEnforcedDeviceClasses() []*resourceapi.DeviceClass {
	classes := DeviceClasses()
	shared := classes[1]
	shared.Spec.Selectors = append(shared.Spec.Selectors, resourceapi.DeviceSelector{CEL: &resourceapi.CELDeviceSelector{
		Expression: fmt.Sprintf(`%q in device.attributes[%q] && device.attributes[%q].%s == %q`,
			AttrShareEnforcement, DriverName, DriverName, AttrShareEnforcement, ShareEnforcementHard)}})
	return classes
}

func deviceClass(name, expression string) *resourceapi.DeviceClass {
	return &resourceapi.DeviceClass{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: resourceapi.DeviceClassSpec{
			Selectors: []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{Expression: expression}}},
		},
	}
}
