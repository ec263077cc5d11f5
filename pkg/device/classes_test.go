package device

import (
	"bytes"
	"os"
	"testing"

	"github.com/google/go-cmp/cmp"
	resourceapi "k8s.io/api/resource/v1"
	"sigs.k8s.io/yaml"

	gpuv1alpha1 "github.com/tangram-gpu/tangram/api/gpu/v1alpha1"
)

// TestDeviceClassesMatchE2ETestdata: the classes the local harness applies
// when no chart is installed are the Go ones (which the chart test in
// deployments/helm holds equal to the chart's).
func TestDeviceClassesMatchE2ETestdata(t *testing.T) {
	raw, err := os.ReadFile("../../test/e2e/testdata/deviceclasses.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var got []*resourceapi.DeviceClass
	for _, doc := range bytes.Split(raw, []byte("\n---\n")) {
		var dc resourceapi.DeviceClass
		if err := yaml.UnmarshalStrict(doc, &dc); err != nil {
			t.Fatalf("parsing test/e2e/testdata/deviceclasses.yaml: %v", err)
		}
		dc.TypeMeta = DeviceClasses()[0].TypeMeta
		got = append(got, &dc)
	}
	if diff := cmp.Diff(DeviceClasses(), got); diff != "" {
		t.Errorf("test/e2e/testdata/deviceclasses.yaml differs from device.DeviceClasses() (-go +file):\n%s", diff)
	}
}

// TestAPIGroupIsTheDriverName: the opaque config's API group is the driver
// name, spelled in api/ without importing this package.
func TestAPIGroupIsTheDriverName(t *testing.T) {
	if gpuv1alpha1.GroupName != DriverName {
		t.Errorf("api/gpu/v1alpha1.GroupName = %q, want the driver name %q", gpuv1alpha1.GroupName, DriverName)
	}
}
