package placement

import (
	"fmt"
	"sort"

	resourceapi "k8s.io/api/resource/v1"

	"github.com/tangram-gpu/tangram/pkg/names"
)

// NodeFromCluster builds the model of a live node: its ResourceSlices of our
// driver (devices in the allocator's order: slices sorted by name), the
// allocation results of every allocated claim on its devices, and the CPU
// and memory its pods already request. It is what the scheduler plugin
// scores.
func NodeFromCluster(name string, cpuMilli, memoryMiB, usedCPUMilli, usedMemoryMiB int64,
	nodeSlices []*resourceapi.ResourceSlice, claims []*resourceapi.ResourceClaim) (*Node, error) {
	var ours []*resourceapi.ResourceSlice
	pools := map[string]bool{}
	for _, s := range nodeSlices {
		if s.Spec.Driver == names.DriverName && s.Spec.NodeName != nil && *s.Spec.NodeName == name {
			ours = append(ours, s)
			pools[s.Spec.Pool.Name] = true
		}
	}
	sort.Slice(ours, func(a, b int) bool { return ours[a].Name < ours[b].Name })
	var devices []resourceapi.Device
	for _, s := range ours {
		devices = append(devices, s.Spec.Devices...)
	}
	n, err := NodeFromDevices(name, cpuMilli, memoryMiB, devices)
	if err != nil {
		return nil, err
	}
	n.usedCPU, n.usedMemory = usedCPUMilli, usedMemoryMiB
	byDevice := make(map[string]int, len(n.Cards))
	for i := range n.Cards {
		byDevice[n.Cards[i].Device] = i
	}
	for _, claim := range claims {
		if claim.Status.Allocation == nil {
			continue
		}
		for _, d := range claim.Status.Allocation.Devices.Results {
			if d.Driver != names.DriverName || !pools[d.Pool] {
				continue
			}
			i, ok := byDevice[d.Device]
			if !ok {
				return nil, fmt.Errorf("claim %s/%s holds device %s, which node %s does not publish", claim.Namespace, claim.Name, d.Device, name)
			}
			c := &n.Cards[i]
			k := Consumed{Card: i, Whole: d.ShareID == nil}
			if q, ok := d.ConsumedCapacity[names.CapacityCompute]; ok {
				k.Compute = q.Value()
			}
			if q, ok := d.ConsumedCapacity[names.CapacityMemory]; ok {
				k.Memory = q.Value()
			}
			// A claim naming no capacity takes all memory: the whole card.
			if c.Memory.HasPolicy && k.Memory >= c.Memory.Default {
				k.Whole = true
			}
			n.apply(k, c.shareMilli(k))
		}
	}
	return n, nil
}

// shareMilli is the GPU a consumption stands for, in milli-GPU.
func (c *Card) shareMilli(k Consumed) int64 {
	if k.Whole {
		return 1000
	}
	milli := int64(0)
	if c.Compute.Value > 0 {
		milli = k.Compute * 1000 / c.Compute.Value
	}
	if c.Memory.Value > 0 {
		milli = max(milli, k.Memory*1000/c.Memory.Value)
	}
	return milli
}

// RequestFromClaims turns a pod's CPU/memory and its not yet allocated
// claims into a Request. Whole-card requests add up; a request with
// capacity requests is a share whose size is its compute (percent × 10) or,
// without compute, its memory as a fraction of cardMemory (bytes). ok is
// false when no claim asks for our GPUs.
func RequestFromClaims(name string, cpuMilli, memoryMiB int64, claims []*resourceapi.ResourceClaim, cardMemory int64) (Request, bool) {
	r := Request{Name: name, CPUMilli: cpuMilli, MemoryMiB: memoryMiB}
	found := false
	for _, claim := range claims {
		if claim.Status.Allocation != nil {
			continue
		}
		for _, req := range claim.Spec.Devices.Requests {
			e := req.Exactly
			if e == nil || (e.DeviceClassName != names.DeviceClassName && e.DeviceClassName != names.SharedDeviceClassName) {
				continue
			}
			found = true
			if e.Capacity == nil || len(e.Capacity.Requests) == 0 {
				r.WholeCards += int(max(e.Count, 1))
				continue
			}
			if q, ok := e.Capacity.Requests[names.CapacityCompute]; ok {
				r.ShareMilli = max(r.ShareMilli, q.MilliValue()/100)
			} else if q, ok := e.Capacity.Requests[names.CapacityMemory]; ok && cardMemory > 0 {
				r.ShareMilli = max(r.ShareMilli, q.Value()*1000/cardMemory)
			}
			r.ShareMilli = min(max(r.ShareMilli, 1), 999)
		}
	}
	return r, found
}

// WorkloadSample lists the GPU shapes of the allocated claims of our driver
// on the given nodes (keyed by name, which is also the pool name): what a
// live cluster's workload looks like, for the fragmentation-aware policies.
func WorkloadSample(claims []*resourceapi.ResourceClaim, nodes map[string]*Node) []Request {
	var sample []Request
	for _, claim := range claims {
		if claim.Status.Allocation == nil {
			continue
		}
		r := Request{Name: claim.Name}
		for _, d := range claim.Status.Allocation.Devices.Results {
			n, ok := nodes[d.Pool]
			if d.Driver != names.DriverName || !ok {
				continue
			}
			var card *Card
			for i := range n.Cards {
				if n.Cards[i].Device == d.Device {
					card = &n.Cards[i]
				}
			}
			if card == nil {
				continue
			}
			k := Consumed{Whole: d.ShareID == nil}
			if q, ok := d.ConsumedCapacity[names.CapacityCompute]; ok {
				k.Compute = q.Value()
			}
			if q, ok := d.ConsumedCapacity[names.CapacityMemory]; ok {
				k.Memory = q.Value()
			}
			if milli := card.shareMilli(k); k.Whole || milli >= 1000 {
				r.WholeCards++
			} else {
				r.ShareMilli = max(r.ShareMilli, milli)
			}
		}
		if r.ShareMilli > 0 && r.WholeCards > 0 {
			r.ShareMilli = 0
		}
		if r.GPUMilli() > 0 {
			sample = append(sample, r)
		}
	}
	return sample
}
