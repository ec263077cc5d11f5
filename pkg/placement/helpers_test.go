package placement

import (
	"context"
	"fmt"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/tangram-gpu/tangram/pkg/device"
	"github.com/tangram-gpu/tangram/pkg/gpu"
	"github.com/tangram-gpu/tangram/pkg/resourceslices"
)

// testNodeSpec describes a small node for hand-checked scenarios.
type testNodeSpec struct {
	name     string
	cpuMilli int64
	memMiB   int64
	model    string
	cards    int
	// cardMemory is each card's memory in bytes; 0 means testCardMemory.
	cardMemory int64
}

const testCardMemory = 16 << 30

// testDevices are the devices the plugin publishes for a sharing node.
func testDevices(t testing.TB, spec testNodeSpec) []resourceapi.Device {
	t.Helper()
	mem := spec.cardMemory
	if mem == 0 {
		mem = testCardMemory
	}
	gpus := make([]gpu.GPU, spec.cards)
	for i := range gpus {
		gpus[i] = gpu.GPU{Index: i, Minor: i, UUID: fmt.Sprintf("GPU-%s-%d", spec.name, i), ProductName: spec.model, MemoryBytes: mem}
	}
	devices, err := resourceslices.Devices(gpus, resourceslices.Options{NodeName: spec.name, Sharing: true})
	if err != nil {
		t.Fatal(err)
	}
	return devices
}

// testCluster builds model nodes and a DRA validator for specs.
func testCluster(t testing.TB, specs ...testNodeSpec) ([]*Node, *DRAValidator) {
	t.Helper()
	var nodes []*Node
	bySlice := map[string][]*resourceapi.ResourceSlice{}
	for _, spec := range specs {
		devices := testDevices(t, spec)
		n, err := NodeFromDevices(spec.name, spec.cpuMilli, spec.memMiB, devices)
		if err != nil {
			t.Fatal(err)
		}
		nodes = append(nodes, n)
		nodeName := spec.name
		bySlice[spec.name] = []*resourceapi.ResourceSlice{{
			ObjectMeta: metav1.ObjectMeta{Name: spec.name},
			Spec: resourceapi.ResourceSliceSpec{
				Driver: device.DriverName, NodeName: &nodeName, Devices: devices,
				Pool: resourceapi.ResourcePool{Name: spec.name, ResourceSliceCount: 1},
			},
		}}
	}
	v, err := NewDRAValidator(context.Background(), bySlice)
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

// once counts every sample entry one time.
func once(int) int { return 1 }
