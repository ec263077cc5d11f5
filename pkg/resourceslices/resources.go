package resourceslices

import (
	"fmt"
	"maps"
	"slices"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/dynamic-resource-allocation/resourceslice"
	"k8s.io/utils/ptr"

	"github.com/tangram-gpu/tangram/pkg/device"
	"github.com/tangram-gpu/tangram/pkg/gpu"
)

// DriverResources returns what the kubelet plugin publishes: one pool named
// after the node, its devices split into as many slices as the API's
// per-slice device limit needs, then, when cards are in MIG mode, their
// counter sets in slices of their own (the API allows a slice devices or
// counter sets, not both, and at most 8 sets a slice). A node without GPUs still gets one empty
// slice, which tells the scheduler the driver runs and has nothing to offer.
func DriverResources(gpus []gpu.GPU, opts Options) (*resourceslice.DriverResources, error) {
	devices, err := Devices(gpus, opts)
	if err != nil {
		return nil, err
	}
	if errs := validation.IsDNS1123Subdomain(opts.NodeName); len(errs) > 0 {
		return nil, fmt.Errorf("node name %q cannot name a resource pool: %v", opts.NodeName, errs)
	}
	for i := range devices {
		if err := ValidateDevice(&devices[i]); err != nil {
			// Devices only builds valid devices; this guards against a
			// future change publishing something the API server rejects.
			return nil, fmt.Errorf("internal error: %w", err)
		}
	}
	pool := resourceslice.Pool{Slices: append(splitDevices(devices), counterSlices(CounterSets(gpus))...)}
	if err := ValidatePool(pool.Slices); err != nil {
		return nil, fmt.Errorf("internal error: %w", err)
	}
	return &resourceslice.DriverResources{Pools: map[string]resourceslice.Pool{opts.NodeName: pool}}, nil
}

// MaxDevicesPerSlice is the API's limit for a slice holding these devices:
// 128, or 64 as soon as one device uses taints or consumes counters (the
// "advanced features" of ResourceSliceMaxDevicesWithAdvancedFeatures).
// Consumable capacity does not lower the limit.
func MaxDevicesPerSlice(devices []resourceapi.Device) int {
	for _, d := range devices {
		if len(d.Taints) > 0 || len(d.ConsumesCounters) > 0 || hasListAttribute(d) {
			return resourceapi.ResourceSliceMaxDevicesWithAdvancedFeatures
		}
	}
	return resourceapi.ResourceSliceMaxDevices
}

func hasListAttribute(d resourceapi.Device) bool {
	for _, a := range d.Attributes {
		if a.IntValues != nil || a.StringValues != nil || a.BoolValues != nil || a.VersionValues != nil {
			return true
		}
	}
	return false
}

// splitDevices fills slices in device order (lowest index first, which the
// allocator tries first) up to the per-slice limit.
func splitDevices(devices []resourceapi.Device) []resourceslice.Slice {
	limit := MaxDevicesPerSlice(devices)
	out := []resourceslice.Slice{}
	for chunk := range slices.Chunk(devices, limit) {
		out = append(out, resourceslice.Slice{Devices: chunk})
	}
	if len(out) == 0 {
		out = append(out, resourceslice.Slice{Devices: []resourceapi.Device{}})
	}
	return out
}

// counterSlices puts counter sets into slices of at most the API's limit.
func counterSlices(sets []resourceapi.CounterSet) []resourceslice.Slice {
	var out []resourceslice.Slice
	for chunk := range slices.Chunk(sets, resourceapi.ResourceSliceMaxCounterSets) {
		out = append(out, resourceslice.Slice{SharedCounters: chunk})
	}
	return out
}

// ResourceSlices renders DriverResources as the ResourceSlice objects the
// resourceslice controller of the kubelet plugin would create for nodeName
// at generation 1. Names follow the controller's scheme
// "<slice index, 5 hex digits>-<driver>-<node>" minus the random suffix the
// API server appends, so they sort in slice order as the real ones do (the
// allocator tries slices in name order). Pools are emitted sorted by name.
func ResourceSlices(nodeName string, res *resourceslice.DriverResources) []*resourceapi.ResourceSlice {
	var out []*resourceapi.ResourceSlice
	for _, poolName := range slices.Sorted(maps.Keys(res.Pools)) {
		pool := res.Pools[poolName]
		generation := max(pool.Generation, 1)
		indexWidth := max(5, len(fmt.Sprintf("%x", max(len(pool.Slices)-1, 0))))
		for i, s := range pool.Slices {
			name := fmt.Sprintf("%0*x-%s-%s", indexWidth, i, device.DriverName, nodeName)
			if len(name) > validation.DNS1123SubdomainMaxLength {
				name = name[:validation.DNS1123SubdomainMaxLength]
			}
			slice := &resourceapi.ResourceSlice{
				TypeMeta:   metav1.TypeMeta{APIVersion: resourceapi.SchemeGroupVersion.String(), Kind: "ResourceSlice"},
				ObjectMeta: metav1.ObjectMeta{Name: name},
				Spec: resourceapi.ResourceSliceSpec{
					Driver: device.DriverName,
					Pool: resourceapi.ResourcePool{
						Name:               poolName,
						Generation:         generation,
						ResourceSliceCount: int64(len(pool.Slices)),
					},
					Devices:        s.Devices,
					SharedCounters: s.SharedCounters,
				},
			}
			switch {
			case pool.NodeSelector != nil:
				slice.Spec.NodeSelector = pool.NodeSelector
			case pool.AllNodes:
				slice.Spec.AllNodes = ptr.To(true)
			default:
				slice.Spec.NodeName = ptr.To(nodeName)
			}
			out = append(out, slice)
		}
	}
	return out
}
