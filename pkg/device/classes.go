package device

import (
	"fmt"
	"strings"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// ShareEnforcementHard is the AttrShareEnforcement value of a node that
// holds shares to their limits itself (pkg/plugin/enforcement.Hard).
const ShareEnforcementHard = "hard"

// Sharing backends a node publishes as AttrShareBackend (the values of
// api/gpu/v1alpha1 SharingBackend, spelled here without importing it).
const (
	ShareBackendMPS  = "mps"
	ShareBackendNone = "none"
)

// DeviceClasses returns the classes the Helm chart publishes
// (deployments/helm/tangram/templates/deviceclasses.yaml) with its default
// values, minus labels, the shared classes' config and the optional
// extended resource name:
//   - gpu.tangram.dev: any of our GPUs;
//   - shared-gpu.tangram.dev: cards published as shareable whose node's
//     sharing backend is mps, at every enforcement level (hard,
//     compute-only, advisory);
//   - hard-shared-gpu.tangram.dev: the same, on nodes whose shareEnforcement
//     is "hard" only;
//   - mig.tangram.dev: MIG partitions of cards in MIG mode (type "mig"),
//     which the other three never select (deviceClasses.mig.enabled).
//
// Fake GPUs enforce nothing (shareEnforcement "advisory"), so simulators
// and tests allocate shares through the shared class. A test holds these,
// and StrictDeviceClasses, equal to the chart's (deployments/helm,
// TestDeviceClassesMatchGo).
//
// The selectors test that an attribute exists before reading it: a device
// without it (another driver version, a whole-card-only publication that
// omits it) then simply does not match instead of failing the CEL
// evaluation for the whole claim.
func DeviceClasses() []*resourceapi.DeviceClass {
	return DeviceClassesFor(ShareBackendMPS, false)
}

// StrictDeviceClasses are the classes with sharing.requireHardEnforcement
// true: the default shared class then also requires "hard".
func StrictDeviceClasses() []*resourceapi.DeviceClass {
	return DeviceClassesFor(ShareBackendMPS, true)
}

// DeviceClassesFor are the chart's classes with sharing.backend=backend
// and sharing.requireHardEnforcement=strict. The hard class always
// selects mps nodes: without MPS nothing holds a share's compute.
func DeviceClassesFor(backend string, strict bool) []*resourceapi.DeviceClass {
	return []*resourceapi.DeviceClass{
		deviceClass(DeviceClassName, WholeCardSelector()),
		SharedDeviceClass(SharedDeviceClassName, backend, strict),
		SharedDeviceClass(HardSharedDeviceClassName, ShareBackendMPS, true),
		deviceClass(MIGDeviceClassName, MIGSelector()),
	}
}

// WholeCardSelector selects our cards, not MIG partitions: a device of
// type "gpu" (a device without the type attribute, which every Tangram
// plugin has published, does not match rather than fail).
func WholeCardSelector() string {
	return fmt.Sprintf(`device.driver == %q && %q in device.attributes[%q] && device.attributes[%q].%s == %q`,
		DriverName, AttrType, DriverName, DriverName, AttrType, TypeGPU)
}

// MIGSelector selects our MIG partitions (type "mig").
func MIGSelector() string {
	return fmt.Sprintf(`device.driver == %q && %q in device.attributes[%q] && device.attributes[%q].%s == %q`,
		DriverName, AttrType, DriverName, DriverName, AttrType, TypeMIG)
}

// SharedDeviceClass is a class of shareable cards whose node's sharing
// backend is backend, and with hard also whose shareEnforcement is "hard".
//
// The conditions are one CEL expression, not one selector each: the
// scheduler's allocator (k8s.io/dynamic-resource-allocation v0.37
// DeviceMatches) rebuilds a device's attribute and capacity maps for every
// selector it evaluates, so each extra selector costs about as much as the
// first (docs/placement.md, BenchmarkClassSelectors in pkg/dra).
func SharedDeviceClass(name, backend string, hard bool) *resourceapi.DeviceClass {
	conditions := []string{ShareableSelector(), BackendSelector(backend)}
	if hard {
		conditions = append(conditions, HardSelector())
	}
	return deviceClass(name, AllOf(conditions...))
}

// AllOf is the CEL conjunction of expressions, each parenthesised (a
// backend condition is a disjunction). The chart writes the shared classes'
// expressions the same way, line by line.
func AllOf(expressions ...string) string {
	return "(" + strings.Join(expressions, ") && (") + ")"
}

// ShareableSelector selects our cards published as shareable.
func ShareableSelector() string {
	return fmt.Sprintf(`device.driver == %q && %q in device.attributes[%q] && device.attributes[%q].%s`,
		DriverName, AttrShareable, DriverName, DriverName, AttrShareable)
}

// BackendSelector selects cards whose node shares them with backend; a
// card without the attribute (published by a plugin before it) counts as
// mps, the only backend such a node chose for its cards by default.
func BackendSelector(backend string) string {
	if backend == ShareBackendMPS {
		return fmt.Sprintf(`!(%q in device.attributes[%q]) || device.attributes[%q].%s == %q`,
			AttrShareBackend, DriverName, DriverName, AttrShareBackend, backend)
	}
	return fmt.Sprintf(`%q in device.attributes[%q] && device.attributes[%q].%s == %q`,
		AttrShareBackend, DriverName, DriverName, AttrShareBackend, backend)
}

// HardSelector selects cards whose node enforces shares hard.
func HardSelector() string {
	return fmt.Sprintf(`%q in device.attributes[%q] && device.attributes[%q].%s == %q`,
		AttrShareEnforcement, DriverName, DriverName, AttrShareEnforcement, ShareEnforcementHard)
}

func celSelector(expression string) resourceapi.DeviceSelector {
	return resourceapi.DeviceSelector{CEL: &resourceapi.CELDeviceSelector{Expression: expression}}
}

func deviceClass(name, expression string) *resourceapi.DeviceClass {
	return &resourceapi.DeviceClass{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: resourceapi.DeviceClassSpec{
			Selectors: []resourceapi.DeviceSelector{celSelector(expression)},
		},
	}
}
