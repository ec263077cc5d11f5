package dra

import (
	"context"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/dynamic-resource-allocation/cel"
	"k8s.io/utils/ptr"

	"github.com/tangram-gpu/tangram/pkg/device"
	"github.com/tangram-gpu/tangram/pkg/gpu/fakegpu"
	"github.com/tangram-gpu/tangram/pkg/resourceslices"
)

// upstreamDevice is one device of scheduler_perf's
// resourceslice-basic-devices.yaml (v1.37.0), as its template renders it.
func upstreamDevice() cel.Device {
	s := func(v string) resourceapi.DeviceAttribute { return resourceapi.DeviceAttribute{StringValue: ptr.To(v)} }
	return cel.Device{
		Driver: "test-driver.cdi.k8s.io",
		Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
			"driver": s("xe"), "driverVersion": {VersionValue: ptr.To("1.2.3")}, "resource.k8s.io/pciRoot": s("0"),
			"family": s("Arc Pro B-Series"), "health": s("Healthy"), "model": s("B60"), "pciAddress": s("0000:01:00.0"),
			"pciId": s("0xe211"), "pciRoot": s("00"), "resource.kubernetes.io/pciBusID": s("0000:01:00.0"),
			"resource.kubernetes.io/pciRoot": s("pci0000:00"), "sriov": {BoolValue: ptr.To(true)}, "type": s("gpu"),
		},
		Capacity: map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{
			"memory": {Value: resource.MustParse("24480Mi")}, "millicores": {Value: resource.MustParse("1k")},
		},
	}
}

// tangramDevice is gpu-0 of a fake DGX H100 as the node plugin publishes
// it with sharing on.
func tangramDevice(tb testing.TB) cel.Device {
	profile, err := fakegpu.BuiltinProfile("dgx-h100")
	if err != nil {
		tb.Fatal(err)
	}
	gpus, err := fakegpu.NewFakeSource("node", profile).GPUs(context.Background())
	if err != nil {
		tb.Fatal(err)
	}
	devices, err := resourceslices.Devices(gpus, resourceslices.Options{NodeName: "node", Sharing: true})
	if err != nil {
		tb.Fatal(err)
	}
	d := devices[0]
	return cel.Device{Driver: device.DriverName, AllowMultipleAllocations: d.AllowMultipleAllocations, Attributes: d.Attributes, Capacity: d.Capacity}
}

func classExpressions(tb testing.TB, name string) []string {
	for _, dc := range device.DeviceClasses() {
		if dc.Name != name {
			continue
		}
		var out []string
		for _, s := range dc.Spec.Selectors {
			out = append(out, s.CEL.Expression)
		}
		return out
	}
	tb.Fatalf("no DeviceClass %s", name)
	return nil
}

// BenchmarkClassSelectors is what the scheduler's allocator pays per
// device and class: one DeviceMatches per CEL selector, each of which
// rebuilds the device's attribute and capacity maps (and parses every
// version attribute) before evaluating. docs/placement.md ("Why the
// allocator is slower on Tangram's slices") quotes it.
func BenchmarkClassSelectors(b *testing.B) {
	shared := classExpressions(b, device.SharedDeviceClassName)
	// The shared class as the chart wrote it before, one selector per
	// condition: what docs/placement.md compares the one expression with.
	twoSelectors := []string{device.ShareableSelector(), device.BackendSelector(device.ShareBackendMPS)}
	withoutVersions := tangramDevice(b)
	attrs := map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{}
	for k, v := range withoutVersions.Attributes {
		if v.VersionValue == nil {
			attrs[k] = v
		}
	}
	withoutVersions.Attributes = attrs
	for _, tc := range []struct {
		name        string
		device      cel.Device
		expressions []string
	}{
		{"upstream device, upstream class", upstreamDevice(), []string{`device.driver == "test-driver.cdi.k8s.io"`}},
		{"tangram device, whole class", tangramDevice(b), classExpressions(b, device.DeviceClassName)},
		{"tangram device, shared class (one expression)", tangramDevice(b), shared},
		{"tangram device, shared class as two selectors (before)", tangramDevice(b), twoSelectors},
		{"tangram device without version attributes, shared class as two selectors", withoutVersions, twoSelectors},
	} {
		b.Run(tc.name, func(b *testing.B) {
			var compiled []cel.CompilationResult
			for _, e := range tc.expressions {
				r := CELCache().GetOrCompile(e)
				if r.Error != nil {
					b.Fatalf("%s: %v", e, r.Error)
				}
				compiled = append(compiled, r)
			}
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				for _, c := range compiled {
					ok, _, err := c.DeviceMatches(ctx, tc.device)
					if err != nil || !ok {
						b.Fatalf("DeviceMatches = %v, %v; want a match", ok, err)
					}
				}
			}
		})
	}
}
