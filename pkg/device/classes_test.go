package device

import (
	"testing"

	gpuv1alpha1 "github.com/tangram-gpu/tangram/api/gpu/v1alpha1"
)

// The DeviceClasses have one owner, DeviceClasses(); the chart test in
// deployments/helm (TestDeviceClassesMatchGo) holds the chart's rendered
// classes equal to it, and every test deployment installs the chart.

// TestAPIGroupIsTheDriverName: the opaque config's API group is the driver
// name, spelled in api/ without importing this package.
func TestAPIGroupIsTheDriverName(t *testing.T) {
	if gpuv1alpha1.GroupName != DriverName {
		t.Errorf("api/gpu/v1alpha1.GroupName = %q, want the driver name %q", gpuv1alpha1.GroupName, DriverName)
	}
}
