package resourceslices

import (
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/dynamic-resource-allocation/resourceslice"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/utils/ptr"

	"github.com/tangram-gpu/tangram/pkg/gpu"
)

// manyGPUs makes n complete cards, each NVLink-bridged to its neighbour.
func manyGPUs(n int) []gpu.GPU {
	gpus := make([]gpu.GPU, n)
	for i := range gpus {
		numa := i % 2
		gpus[i] = gpu.GPU{
			Index: i, Minor: i, UUID: fmt.Sprintf("GPU-%08d-0000-0000-0000-000000000000", i),
			ProductName: "NVIDIA H100 80GB HBM3", Brand: "Nvidia", Architecture: "hopper",
			CUDAComputeCapability: "9.0", DriverVersion: "580.95.05", CUDADriverVersion: "13.0",
			MemoryBytes: 80 << 30, PCIBusID: fmt.Sprintf("0000:%02x:00.0", i%256), NUMANode: &numa,
			NVLinkPeers: []int{i ^ 1},
		}
	}
	return gpus
}

func TestDriverResourcesSplitting(t *testing.T) {
	tests := []struct {
		cards      int
		sharing    bool
		wantCounts []int
	}{
		{cards: 0, wantCounts: []int{0}},
		{cards: 8, wantCounts: []int{8}},
		{cards: 128, wantCounts: []int{128}},
		{cards: 129, wantCounts: []int{128, 1}},
		{cards: 300, wantCounts: []int{128, 128, 44}},
		// Consumable capacity does not lower the API's per-slice limit.
		{cards: 300, sharing: true, wantCounts: []int{128, 128, 44}},
	}
	for _, tc := range tests {
		t.Run(fmt.Sprintf("%d cards, sharing=%v", tc.cards, tc.sharing), func(t *testing.T) {
			logger, _ := ktesting.NewTestContext(t)
			labels := map[string]string{"topology.kubernetes.io/zone": "z1"}
			opts := Options{NodeName: "node-1", Sharing: tc.sharing, Logger: logger,
				NodeLabels: labels, NodeLabelAttributes: []string{"topology.kubernetes.io/zone"}}
			res, err := DriverResources(manyGPUs(tc.cards), opts)
			if err != nil {
				t.Fatal(err)
			}
			if len(res.Pools) != 1 {
				t.Fatalf("want one pool, got %d", len(res.Pools))
			}
			pool, ok := res.Pools["node-1"]
			if !ok {
				t.Fatalf("want pool named after the node, got %v", res.Pools)
			}
			var counts []int
			next := 0
			for _, s := range pool.Slices {
				counts = append(counts, len(s.Devices))
				for _, d := range s.Devices {
					if want := fmt.Sprintf("gpu-%d", next); d.Name != want {
						t.Fatalf("devices out of order: want %s, got %s", want, d.Name)
					}
					next++
				}
			}
			if !cmp.Equal(tc.wantCounts, counts) {
				t.Errorf("devices per slice: want %v, got %v", tc.wantCounts, counts)
			}

			objs := ResourceSlices("node-1", res)
			if len(objs) != len(tc.wantCounts) {
				t.Fatalf("want %d ResourceSlices, got %d", len(tc.wantCounts), len(objs))
			}
			for i, s := range objs {
				if want := fmt.Sprintf("%05x-gpu.tangram.dev-node-1", i); s.Name != want {
					t.Errorf("slice %d: want name %s, got %s", i, want, s.Name)
				}
				if s.Spec.Pool.ResourceSliceCount != int64(len(objs)) || s.Spec.Pool.Name != "node-1" || s.Spec.Pool.Generation != 1 {
					t.Errorf("slice %d: wrong pool %+v", i, s.Spec.Pool)
				}
				if ptr.Deref(s.Spec.NodeName, "") != "node-1" || s.Spec.Driver != "gpu.tangram.dev" {
					t.Errorf("slice %d: want nodeName node-1 and driver gpu.tangram.dev, got %v, %s", i, s.Spec.NodeName, s.Spec.Driver)
				}
				if err := ValidateResourceSlice(s); err != nil {
					t.Errorf("slice %d is invalid: %v", i, err)
				}
			}
		})
	}
}

func TestMaxDevicesPerSlice(t *testing.T) {
	plain := resourceapi.Device{Name: "a"}
	tainted := resourceapi.Device{Name: "b", Taints: []resourceapi.DeviceTaint{{Key: "k", Effect: resourceapi.DeviceTaintEffectNoSchedule}}}
	counters := resourceapi.Device{Name: "c", ConsumesCounters: []resourceapi.DeviceCounterConsumption{{CounterSet: "s"}}}
	list := resourceapi.Device{Name: "d", Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{"x": {IntValues: []int64{1}}}}
	shared := resourceapi.Device{Name: "e", AllowMultipleAllocations: ptr.To(true)}
	for _, tc := range []struct {
		devices []resourceapi.Device
		want    int
	}{
		{[]resourceapi.Device{plain}, 128},
		{[]resourceapi.Device{plain, shared}, 128},
		{[]resourceapi.Device{plain, tainted}, 64},
		{[]resourceapi.Device{counters}, 64},
		{[]resourceapi.Device{list}, 64},
	} {
		if got := MaxDevicesPerSlice(tc.devices); got != tc.want {
			t.Errorf("%v: want %d, got %d", tc.devices, tc.want, got)
		}
	}
}

func TestDriverResourcesRejectsBadPoolName(t *testing.T) {
	_, err := DriverResources(manyGPUs(1), Options{NodeName: "Node_1"})
	if err == nil || !strings.Contains(err.Error(), `node name "Node_1" cannot name a resource pool`) {
		t.Fatalf("want a pool name error, got %v", err)
	}
}

// TestValidateDeviceRejects makes sure the validator used by the other
// tests actually catches what the API server would reject.
func TestValidateDeviceRejects(t *testing.T) {
	q := resource.MustParse
	valid := func() resourceapi.Device {
		devs, err := Devices(manyGPUs(1), Options{NodeName: "n", Sharing: true})
		if err != nil {
			t.Fatal(err)
		}
		return devs[0]
	}
	if d := valid(); ValidateDevice(&d) != nil {
		t.Fatalf("baseline device is invalid: %v", ValidateDevice(&d))
	}
	tests := []struct {
		name    string
		mutate  func(d *resourceapi.Device)
		wantErr string
	}{
		{"bad name", func(d *resourceapi.Device) { d.Name = "GPU_0" }, "not a DNS label"},
		{"too many attributes", func(d *resourceapi.Device) {
			for i := range 20 {
				d.Attributes[resourceapi.QualifiedName(fmt.Sprintf("extra%d", i))] = resourceapi.DeviceAttribute{BoolValue: ptr.To(true)}
			}
		}, "more than the limit of 32"},
		{"bad attribute name", func(d *resourceapi.Device) {
			d.Attributes["bad-name"] = resourceapi.DeviceAttribute{BoolValue: ptr.To(true)}
		}, "is not a C identifier"},
		{"two values", func(d *resourceapi.Device) {
			d.Attributes["type"] = resourceapi.DeviceAttribute{BoolValue: ptr.To(true), StringValue: ptr.To("x")}
		}, "exactly one value"},
		{"leading zero version", func(d *resourceapi.Device) {
			d.Attributes["driverVersion"] = resourceapi.DeviceAttribute{VersionValue: ptr.To("580.95.05")}
		}, "is not semver"},
		{"long string", func(d *resourceapi.Device) {
			d.Attributes["productName"] = resourceapi.DeviceAttribute{StringValue: ptr.To(strings.Repeat("x", 65))}
		}, "longer than 64"},
		{"policy without multiple allocations", func(d *resourceapi.Device) { d.AllowMultipleAllocations = nil }, "requestPolicy needs allowMultipleAllocations"},
		{"default off step", func(d *resourceapi.Device) {
			c := d.Capacity["memory"]
			c.RequestPolicy.Default = ptr.To(q("1000Mi"))
			d.Capacity["memory"] = c
		}, "not a whole number of steps"},
		{"max above capacity", func(d *resourceapi.Device) {
			c := d.Capacity["compute"]
			c.RequestPolicy.ValidRange.Max = ptr.To(q("101"))
			d.Capacity["compute"] = c
		}, "exceeds capacity"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d := valid()
			tc.mutate(&d)
			err := ValidateDevice(&d)
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("want error containing %q, got %v", tc.wantErr, err)
			}
		})
	}
}

func TestValidateResourceSliceRejectsTooManyDevices(t *testing.T) {
	devs, err := Devices(manyGPUs(129), Options{NodeName: "n"})
	if err != nil {
		t.Fatal(err)
	}
	objs := ResourceSlices("n", &resourceslice.DriverResources{Pools: map[string]resourceslice.Pool{
		"n": {Slices: []resourceslice.Slice{{Devices: devs}}},
	}})
	if err := ValidateResourceSlice(objs[0]); err == nil || !strings.Contains(err.Error(), "129 entries, more than the limit of 128") {
		t.Fatalf("want a device limit error, got %v", err)
	}
}

func BenchmarkDriverResources300(b *testing.B) {
	gpus := manyGPUs(300)
	opts := Options{NodeName: "node-1", Sharing: true, Logger: klog.Background().V(10)}
	for b.Loop() {
		if _, err := DriverResources(gpus, opts); err != nil {
			b.Fatal(err)
		}
	}
}
