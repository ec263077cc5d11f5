package placement

import (
	"context"
	"fmt"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/tangram-gpu/tangram/pkg/names"
)

// testNodeSpec describes a small node for hand-checked scenarios.
type testNodeSpec struct {
	name     string
	cpuMilli int64
	memMiB   int64
	model    string
	cards    int
}

const testCardMemory = 16 << 30

// testDevices mirrors the devices pkg/slices publishes for shareable cards.
func testDevices(spec testNodeSpec) []resourceapi.Device {
	step := resource.MustParse("256Mi")
	mem := *resource.NewQuantity(testCardMemory, resource.BinarySI)
	var devices []resourceapi.Device
	for i := 0; i < spec.cards; i++ {
		devices = append(devices, resourceapi.Device{
			Name: fmt.Sprintf("gpu-%d", i),
			Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
				names.AttrUUID:        {StringValue: ptr.To(fmt.Sprintf("GPU-%s-%d", spec.name, i))},
				names.AttrIndex:       {IntValue: ptr.To(int64(i))},
				names.AttrProductName: {StringValue: ptr.To(spec.model)},
			},
			Capacity: map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{
				names.CapacityMemory: {Value: mem, RequestPolicy: &resourceapi.CapacityRequestPolicy{
					Default:    ptr.To(mem),
					ValidRange: &resourceapi.CapacityRequestPolicyRange{Min: ptr.To(step), Max: ptr.To(mem), Step: ptr.To(step)},
				}},
				names.CapacityCompute: {Value: resource.MustParse("100"), RequestPolicy: &resourceapi.CapacityRequestPolicy{
					Default:    ptr.To(resource.MustParse("0")),
					ValidRange: &resourceapi.CapacityRequestPolicyRange{Min: ptr.To(resource.MustParse("0")), Max: ptr.To(resource.MustParse("100")), Step: ptr.To(resource.MustParse("1"))},
				}},
			},
			AllowMultipleAllocations: ptr.To(true),
		})
	}
	return devices
}

// testCluster builds model nodes and a DRA validator for specs.
func testCluster(t testing.TB, specs ...testNodeSpec) ([]*Node, *DRAValidator) {
	t.Helper()
	var nodes []*Node
	slices := map[string][]*resourceapi.ResourceSlice{}
	for _, spec := range specs {
		devices := testDevices(spec)
		n, err := NodeFromDevices(spec.name, spec.cpuMilli, spec.memMiB, devices)
		if err != nil {
			t.Fatal(err)
		}
		nodes = append(nodes, n)
		nodeName := spec.name
		slices[spec.name] = []*resourceapi.ResourceSlice{{
			ObjectMeta: metav1.ObjectMeta{Name: spec.name},
			Spec: resourceapi.ResourceSliceSpec{
				Driver: names.DriverName, NodeName: &nodeName, Devices: devices,
				Pool: resourceapi.ResourcePool{Name: spec.name, ResourceSliceCount: 1},
			},
		}}
	}
	v, err := NewDRAValidator(context.Background(), slices)
	if err != nil {
		t.Fatal(err)
	}
	return nodes, v
}

// place commits r on the given node and cards through the real allocator,
// failing the test if the allocator disagrees.
func place(t testing.TB, v *DRAValidator, n *Node, r Request, cards ...int) {
	t.Helper()
	consumed, err := v.Allocate(context.Background(), n, r, cards, true)
	if err != nil {
		t.Fatal(err)
	}
	if consumed == nil {
		t.Fatalf("allocator refused %s on %s cards %v", r.Name, n.Name, cards)
	}
	n.Commit(r, consumed)
}

func share(name string, cpu, milli int64) Request {
	return Request{Name: name, CPUMilli: cpu, MemoryMiB: 1024, ShareMilli: milli}
}

func whole(name string, cpu int64, cards int) Request {
	return Request{Name: name, CPUMilli: cpu, MemoryMiB: 1024, WholeCards: cards}
}
