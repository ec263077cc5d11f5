package diagnosis

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/tangram-gpu/tangram/pkg/cluster"
	"github.com/tangram-gpu/tangram/pkg/device"
)

// Hand-built clusters: every card is 80Gi; shareable cards carry the
// request policies pkg/resourceslices publishes (256Mi memory step, compute
// 0..100 with default 0).

const zoneKey = "example.com/ib-zone"

type testCluster struct{ snap cluster.Snapshot }

func newTestCluster() *testCluster {
	return &testCluster{snap: cluster.Snapshot{Classes: device.DeviceClasses()}}
}

// node adds a node whose card i is in NVLink domain domains[i].
func (c *testCluster) node(name, zone string, shareable bool, domains ...string) *testCluster {
	labels := map[string]string{}
	if zone != "" {
		labels[zoneKey] = zone
	}
	c.snap.Nodes = append(c.snap.Nodes, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}})
	var devices []resourceapi.Device
	for i, domain := range domains {
		devices = append(devices, card(name, i, domain, shareable))
	}
	c.snap.Slices = append(c.snap.Slices, &resourceapi.ResourceSlice{
		ObjectMeta: metav1.ObjectMeta{Name: name + "-slice"},
		Spec: resourceapi.ResourceSliceSpec{
			Driver:   device.DriverName,
			Pool:     resourceapi.ResourcePool{Name: name, Generation: 1, ResourceSliceCount: 1},
			NodeName: ptr.To(name),
			Devices:  devices,
		},
	})
	return c
}

// enforcement publishes a share enforcement level and reason on every card
// of the node, as the plugin does.
func (c *testCluster) enforcement(node, level, reason string) *testCluster {
	for _, s := range c.snap.Slices {
		if s.Spec.NodeName == nil || *s.Spec.NodeName != node {
			continue
		}
		for i := range s.Spec.Devices {
			s.Spec.Devices[i].Attributes[device.AttrShareEnforcement] = resourceapi.DeviceAttribute{StringValue: ptr.To(level)}
			s.Spec.Devices[i].Attributes[device.AttrShareEnforcementReason] = resourceapi.DeviceAttribute{StringValue: ptr.To(reason)}
		}
	}
	return c
}

// backend publishes a sharing backend on every card of the node, as the
// plugin does with --share-backend.
func (c *testCluster) backend(node, backend string) *testCluster {
	for _, s := range c.snap.Slices {
		if s.Spec.NodeName == nil || *s.Spec.NodeName != node {
			continue
		}
		for i := range s.Spec.Devices {
			s.Spec.Devices[i].Attributes[device.AttrShareBackend] = resourceapi.DeviceAttribute{StringValue: ptr.To(backend)}
		}
	}
	return c
}

func card(node string, i int, domain string, shareable bool) resourceapi.Device {
	mem := resource.MustParse("80Gi")
	d := resourceapi.Device{
		Name: fmt.Sprintf("gpu-%d", i),
		Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
			device.AttrType:         {StringValue: ptr.To(device.TypeGPU)},
			device.AttrUUID:         {StringValue: ptr.To(fmt.Sprintf("GPU-%s-%d", node, i))},
			device.AttrProductName:  {StringValue: ptr.To("NVIDIA H100 80GB HBM3")},
			device.AttrNVLinkDomain: {StringValue: ptr.To(domain)},
			device.AttrShareable:    {BoolValue: ptr.To(shareable)},
		},
		Capacity: map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{
			device.CapacityMemory:  {Value: mem},
			device.CapacityCompute: {Value: resource.MustParse("100")},
		},
	}
	if shareable {
		d.AllowMultipleAllocations = ptr.To(true)
		d.Capacity[device.CapacityMemory] = resourceapi.DeviceCapacity{Value: mem, RequestPolicy: &resourceapi.CapacityRequestPolicy{
			Default:    ptr.To(mem.DeepCopy()),
			ValidRange: &resourceapi.CapacityRequestPolicyRange{Min: ptr.To(resource.MustParse("0")), Max: ptr.To(mem.DeepCopy()), Step: ptr.To(resource.MustParse("256Mi"))},
		}}
		d.Capacity[device.CapacityCompute] = resourceapi.DeviceCapacity{Value: resource.MustParse("100"), RequestPolicy: &resourceapi.CapacityRequestPolicy{
			Default:    ptr.To(resource.MustParse("0")),
			ValidRange: &resourceapi.CapacityRequestPolicyRange{Min: ptr.To(resource.MustParse("0")), Max: ptr.To(resource.MustParse("100")), Step: ptr.To(resource.MustParse("1"))},
		}}
	}
	return d
}

// taint puts a taint on every card of a node.
func (c *testCluster) taint(node, key, value string, effect resourceapi.DeviceTaintEffect) *testCluster {
	for _, s := range c.snap.Slices {
		if s.Spec.Pool.Name != node {
			continue
		}
		for i := range s.Spec.Devices {
			s.Spec.Devices[i].Taints = append(s.Spec.Devices[i].Taints, resourceapi.DeviceTaint{Key: key, Value: value, Effect: effect})
		}
	}
	return c
}

// whole records an allocated claim holding the given cards of a node
// exclusively (as on a whole-card-only node).
func (c *testCluster) whole(name, node string, devices ...string) *testCluster {
	var results []resourceapi.DeviceRequestAllocationResult
	for _, dev := range devices {
		results = append(results, resourceapi.DeviceRequestAllocationResult{Request: "gpu", Driver: device.DriverName, Pool: node, Device: dev})
	}
	return c.allocated(name, results)
}

// share records an allocated claim with a share of one shareable card.
func (c *testCluster) share(name, node, deviceName, memory string, compute int64) *testCluster {
	return c.allocated(name, []resourceapi.DeviceRequestAllocationResult{{
		Request: "gpu", Driver: device.DriverName, Pool: node, Device: deviceName,
		ShareID: ptr.To(types.UID("share-" + name)),
		ConsumedCapacity: map[resourceapi.QualifiedName]resource.Quantity{
			device.CapacityMemory:  resource.MustParse(memory),
			device.CapacityCompute: *resource.NewQuantity(compute, resource.DecimalSI),
		},
	}})
}

func (c *testCluster) allocated(name string, results []resourceapi.DeviceRequestAllocationResult) *testCluster {
	claim := &resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name, UID: types.UID("uid-" + name)},
		Status: resourceapi.ResourceClaimStatus{Allocation: &resourceapi.AllocationResult{
			Devices: resourceapi.DeviceAllocationResult{Results: results},
		}},
	}
	c.snap.Claims = append(c.snap.Claims, claim)
	return c
}
