//go:build helm

package helm

import (
	"context"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/dynamic-resource-allocation/cel"

	"github.com/tangram-gpu/tangram/pkg/device"
	"github.com/tangram-gpu/tangram/pkg/gpu/fakegpu"
	tangramslices "github.com/tangram-gpu/tangram/pkg/resourceslices"
)

// TestMIGDeviceClass: the chart publishes mig.tangram.dev by default and
// not with deviceClasses.mig.enabled=false; on a node with one H100 in MIG
// mode and one not, run with the scheduler's CEL, the MIG class selects
// exactly the partitions, and the whole-card and both shared classes
// select none of them (only the card not in MIG mode).
func TestMIGDeviceClass(t *testing.T) {
	objs := render(t)
	if _, ok := render(t, "deviceClasses.mig.enabled=false")["DeviceClass"][device.MIGDeviceClassName]; ok {
		t.Errorf("deviceClasses.mig.enabled=false still publishes %s", device.MIGDeviceClassName)
	}
	p, err := fakegpu.ParseProfile([]byte(`
defaults: {productName: NVIDIA H100 80GB HBM3, memory: 80Gi, migType: h100-80gb}
gpus:
- {index: 0, migMode: enabled}
- {index: 1, migMode: disabled}
`))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	gpus, err := fakegpu.NewFakeSource("node-a", p).GPUs(ctx)
	if err != nil {
		t.Fatal(err)
	}
	devices, err := tangramslices.Devices(gpus, tangramslices.Options{NodeName: "node-a", Sharing: true, ShareEnforcement: "hard", ShareBackend: "mps"})
	if err != nil {
		t.Fatal(err)
	}
	partitions := 0
	for _, name := range []string{device.DeviceClassName, device.SharedDeviceClassName, device.HardSharedDeviceClassName, device.MIGDeviceClassName} {
		dc := objs.get(t, "DeviceClass", name).(*resourceapi.DeviceClass)
		for _, d := range devices {
			isMIG := d.Attributes[device.AttrType].StringValue != nil && *d.Attributes[device.AttrType].StringValue == device.TypeMIG
			matched := true
			for _, sel := range dc.Spec.Selectors {
				compiled := cel.GetCompiler(cel.Features{EnableConsumableCapacity: true}).CompileCELExpression(sel.CEL.Expression, cel.Options{})
				if compiled.Error != nil {
					t.Fatalf("%s selector does not compile: %v", name, compiled.Error)
				}
				ok, _, err := compiled.DeviceMatches(ctx, cel.Device{Driver: device.DriverName, AllowMultipleAllocations: d.AllowMultipleAllocations,
					Attributes: d.Attributes, Capacity: d.Capacity})
				if err != nil {
					t.Errorf("%s on %s: %v", name, d.Name, err)
				}
				matched = matched && ok
			}
			if want := isMIG == (name == device.MIGDeviceClassName); matched != want {
				t.Errorf("%s matches %s (MIG partition %v): %v, want %v", name, d.Name, isMIG, matched, want)
			}
			if isMIG && name == device.MIGDeviceClassName {
				partitions++
			}
		}
	}
	if partitions != 25 {
		t.Errorf("%d MIG partitions published for an H100 in MIG mode, want the guide's 25", partitions)
	}
}
