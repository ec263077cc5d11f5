package placement

import (
	"fmt"
	"slices"
	"sort"

	resourceapi "k8s.io/api/resource/v1"

	"github.com/tangram-gpu/tangram/pkg/device"
	"github.com/tangram-gpu/tangram/pkg/placement/mig"
)

// NodeFromCluster builds the model of a live node: its ResourceSlices of our
// driver (devices in the allocator's order: slices sorted by name), the
// allocation results of every allocated claim on its devices, and the CPU
// and memory its pods already request. It is what the scheduler plugin
// scores.
func NodeFromCluster(name string, cpuMilli, memoryMiB, usedCPUMilli, usedMemoryMiB int64,
	nodeSlices []*resourceapi.ResourceSlice, claims []*resourceapi.ResourceClaim) (*Node, error) {
	cards, err := CardsFromSlices(name, nodeSlices)
	if err != nil {
		return nil, err
	}
	return cards.Node(cpuMilli, memoryMiB, usedCPUMilli, usedMemoryMiB, AllocationsOf(claims))
}

// Allocation is what an allocated claim holds of our driver's devices, read
// once from its status: the models of every node and the workload sample
// are built from it for every pod the scheduler plugin scores, and an
// allocation does not change while the claim exists.
type Allocation struct {
	// Namespace and Name identify the claim, for error messages.
	Namespace, Name string
	Devices         []AllocatedDevice
}

// AllocatedDevice is one device result of our driver.
type AllocatedDevice struct {
	Pool, Device string
	// Share is set for a result with a share ID (consumable capacity).
	Share bool
	// Memory (bytes) and Compute (percent) are the consumed capacity.
	Memory, Compute int64
	// NoMemory is set when the result recorded no memory consumed.
	NoMemory bool
}

// AllocationOf reads a claim's results of our driver; ok is false for a
// claim that is not allocated or holds none of our devices.
func AllocationOf(claim *resourceapi.ResourceClaim) (Allocation, bool) {
	if claim.Status.Allocation == nil {
		return Allocation{}, false
	}
	a := Allocation{Namespace: claim.Namespace, Name: claim.Name}
	for _, d := range claim.Status.Allocation.Devices.Results {
		if d.Driver != device.DriverName {
			continue
		}
		ad := AllocatedDevice{Pool: d.Pool, Device: d.Device, Share: d.ShareID != nil}
		if q, ok := d.ConsumedCapacity[device.CapacityCompute]; ok {
			ad.Compute = q.Value()
		}
		if ad.Memory = device.ConsumedMemory(d.ConsumedCapacity); ad.Memory == device.NoMemoryConsumed {
			ad.Memory, ad.NoMemory = 0, true
		}
		a.Devices = append(a.Devices, ad)
	}
	return a, len(a.Devices) > 0
}

// AllocationsOf reads every allocated claim that holds our devices.
func AllocationsOf(claims []*resourceapi.ResourceClaim) []Allocation {
	var out []Allocation
	for _, c := range claims {
		if a, ok := AllocationOf(c); ok {
			out = append(out, a)
		}
	}
	return out
}

// consumed is what a device result takes of card c.
func (c *Card) consumed(i int, d AllocatedDevice) Consumed {
	memory := d.Memory
	if d.NoMemory {
		memory = device.NoMemoryConsumed
	}
	return Consumed{Card: i, Whole: device.HoldsWholeCard(d.Share, memory, c.Memory.Allocatable()), Memory: d.Memory, Compute: d.Compute}
}

// NodeCards is the part of a live node's model that comes from its
// ResourceSlices alone: its cards before any claim. Reading the devices'
// attributes and capacities is most of NodeFromCluster's cost while slices
// rarely change, so a caller that models the same nodes for every pod (the
// scheduler plugin) keeps a NodeCards per node and only applies the claims
// again. It is never modified after CardsFromSlices.
type NodeCards struct {
	name     string
	cards    []Card
	pools    map[string]bool
	byDevice map[string]int
}

// CardsFromSlices reads the node's ResourceSlices of our driver, in the
// allocator's device order (slices sorted by name).
func CardsFromSlices(name string, nodeSlices []*resourceapi.ResourceSlice) (*NodeCards, error) {
	var ours []*resourceapi.ResourceSlice
	pools := map[string]bool{}
	for _, s := range nodeSlices {
		if s.Spec.Driver == device.DriverName && s.Spec.NodeName != nil && *s.Spec.NodeName == name {
			ours = append(ours, s)
			pools[s.Spec.Pool.Name] = true
		}
	}
	sort.Slice(ours, func(a, b int) bool { return ours[a].Name < ours[b].Name })
	var devices []resourceapi.Device
	var sets []resourceapi.CounterSet
	for _, s := range ours {
		devices = append(devices, s.Spec.Devices...)
		sets = append(sets, s.Spec.SharedCounters...)
	}
	n, err := NodeFromDevices(name, 0, 0, devices, sets...)
	if err != nil {
		return nil, err
	}
	byDevice := make(map[string]int, len(n.Cards))
	for i := range n.Cards {
		byDevice[n.Cards[i].Device] = i
	}
	return &NodeCards{name: name, cards: n.Cards, pools: pools, byDevice: byDevice}, nil
}

// Node returns a new model of the node with the given CPU and memory
// (allocatable and already requested) and every allocation on its devices
// applied.
func (nc *NodeCards) Node(cpuMilli, memoryMiB, usedCPUMilli, usedMemoryMiB int64, allocations []Allocation) (*Node, error) {
	n := &Node{Name: nc.name, CPUMilli: cpuMilli, MemoryMiB: memoryMiB, Cards: slices.Clone(nc.cards),
		usedCPU: usedCPUMilli, usedMemory: usedMemoryMiB}
	for _, a := range allocations {
		for _, d := range a.Devices {
			if !nc.pools[d.Pool] {
				continue
			}
			if card, p, ok := n.migCardIndex(d.Device); ok {
				n.apply(Consumed{Card: card, MIG: p + 1}, 0)
				continue
			}
			i, ok := nc.byDevice[d.Device]
			if !ok {
				return nil, fmt.Errorf("claim %s/%s holds device %s, which node %s does not publish", a.Namespace, a.Name, d.Device, nc.name)
			}
			c := &n.Cards[i]
			k := c.consumed(i, d)
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
			if e != nil && e.DeviceClassName == device.MIGDeviceClassName {
				// One MIG partition per pod is modelled, of the profile
				// its selector names; other MIG requests are left to the
				// allocator.
				if p := mig.ProfileOf(e.Selectors); p != "" && r.MIGProfile == "" && max(e.Count, 1) == 1 {
					r.MIGProfile, found = p, true
				}
				continue
			}
			if e == nil || !device.IsTangramClass(e.DeviceClassName) {
				continue
			}
			found = true
			if e.Capacity == nil || len(e.Capacity.Requests) == 0 {
				r.WholeCards += int(max(e.Count, 1))
				continue
			}
			if q, ok := e.Capacity.Requests[device.CapacityCompute]; ok {
				r.ShareMilli = max(r.ShareMilli, q.MilliValue()/100)
			} else if q, ok := e.Capacity.Requests[device.CapacityMemory]; ok && cardMemory > 0 {
				r.ShareMilli = max(r.ShareMilli, q.Value()*1000/cardMemory)
			}
			r.ShareMilli = min(max(r.ShareMilli, 1), 999)
		}
	}
	return r, found
}

// WorkloadSample lists the GPU shapes of the allocations (of our driver's
// devices) on the given nodes (keyed by name, which is also the pool name):
// what a live cluster's workload looks like, for the fragmentation-aware
// policies.
func WorkloadSample(allocations []Allocation, nodes map[string]*Node) []Request {
	var sample []Request
	for _, a := range allocations {
		r := Request{Name: a.Name}
		for _, d := range a.Devices {
			n, ok := nodes[d.Pool]
			if !ok {
				continue
			}
			i := n.cardIndex(d.Device)
			if i < 0 {
				continue
			}
			card := &n.Cards[i]
			k := Consumed{Whole: !d.Share, Memory: d.Memory, Compute: d.Compute}
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

// cardIndex is the index of the card named device, or -1.
func (n *Node) cardIndex(device string) int {
	for i := range n.Cards {
		if n.Cards[i].Device == device {
			return i
		}
	}
	return -1
}
