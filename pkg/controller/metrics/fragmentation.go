package metrics

import (
	resourceapi "k8s.io/api/resource/v1"

	"github.com/tangram-gpu/tangram/pkg/cluster"
	"github.com/tangram-gpu/tangram/pkg/device"
)

// Shape is what one pending request needs from one card.
type Shape struct {
	// Whole needs a card nobody uses.
	Whole bool
	// MemoryBytes and ComputePercent are a share's size.
	MemoryBytes    int64
	ComputePercent int64
}

// PendingShapes lists the per-card needs of unallocated claims that ask for
// one of our classes. A request naming no memory takes whole cards (the
// memory default is the whole card); for firstAvailable the first
// alternative counts. Selectors and constraints are not considered: the
// figure is about sizes.
func PendingShapes(snap *cluster.Snapshot) []Shape {
	ours := cluster.OurClasses(snap.Classes)
	var out []Shape
	for _, c := range cluster.PendingClaims(snap) {
		for _, r := range c.Spec.Devices.Requests {
			req := r.Exactly
			if req == nil && len(r.FirstAvailable) > 0 {
				sub := r.FirstAvailable[0]
				req = &resourceapi.ExactDeviceRequest{DeviceClassName: sub.DeviceClassName, Capacity: sub.Capacity}
			}
			if req == nil || !ours[req.DeviceClassName] {
				continue
			}
			out = append(out, shapeOf(req))
		}
	}
	return out
}

func shapeOf(req *resourceapi.ExactDeviceRequest) Shape {
	if req.Capacity == nil {
		return Shape{Whole: true}
	}
	mem, ok := req.Capacity.Requests[device.CapacityMemory]
	if !ok {
		return Shape{Whole: true}
	}
	s := Shape{MemoryBytes: mem.Value()}
	if q, ok := req.Capacity.Requests[device.CapacityCompute]; ok {
		s.ComputePercent = q.Value()
	}
	return s
}

// card is what the fragmentation figures read of one device.
type card struct {
	use                  cluster.Use
	shareable            bool
	memory, memoryUsed   int64
	compute, computeUsed int64
}

func cardOf(ds *cluster.DeviceState) card {
	mem, memUsed := ds.Capacity(device.CapacityMemory), ds.Used(device.CapacityMemory)
	comp, compUsed := ds.Capacity(device.CapacityCompute), ds.Used(device.CapacityCompute)
	return card{use: ds.Use(), shareable: ds.Shareable, memory: mem.Value(), memoryUsed: memUsed.Value(),
		compute: comp.Value(), computeUsed: compUsed.Value()}
}

// fits reports whether a pending request of that shape could go on the
// card as it is now.
func fits(c card, s Shape) bool {
	if s.Whole {
		return c.use == cluster.Free
	}
	if !c.shareable || c.use == cluster.Full {
		return false
	}
	return c.memory-c.memoryUsed >= s.MemoryBytes && c.compute-c.computeUsed >= s.ComputePercent
}

// freeMemory is the card's unallocated memory.
func freeMemory(c card) int64 {
	if c.use == cluster.Full {
		return 0
	}
	return max(c.memory-c.memoryUsed, 0)
}

// strandedMemory is the card's free memory that no pending request can use:
// all of it when no pending shape fits the card, else none. With nothing
// pending nothing is stranded.
func strandedMemory(c card, pending []Shape) int64 {
	free := freeMemory(c)
	if free == 0 || len(pending) == 0 {
		return 0
	}
	for _, s := range pending {
		if fits(c, s) {
			return 0
		}
	}
	return free
}
