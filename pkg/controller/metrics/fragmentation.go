package metrics

import (
	resourceapi "k8s.io/api/resource/v1"

	"github.com/tangram-gpu/tangram/pkg/cluster"
	"github.com/tangram-gpu/tangram/pkg/clusterview"
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
	ours := clusterview.OurClasses(snap.Classes)
	var out []Shape
	for _, c := range snap.Claims {
		if c.Status.Allocation != nil || c.DeletionTimestamp != nil {
			continue
		}
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

// fits reports whether a pending request of that shape could go on the
// card as it is now.
func fits(card clusterview.CardView, s Shape) bool {
	if s.Whole {
		return card.State == clusterview.CardFree
	}
	if !card.Shareable || card.State == clusterview.CardFull {
		return false
	}
	return card.MemoryBytes-card.MemoryUsedBytes >= s.MemoryBytes &&
		card.ComputePercent-card.ComputeUsedPercent >= s.ComputePercent
}

// FreeMemory is the card's unallocated memory.
func FreeMemory(card clusterview.CardView) int64 {
	if card.State == clusterview.CardFull {
		return 0
	}
	return max(card.MemoryBytes-card.MemoryUsedBytes, 0)
}

// StrandedMemory is the card's free memory that no pending request can use:
// all of it when no pending shape fits the card, else none. With nothing
// pending nothing is stranded.
func StrandedMemory(card clusterview.CardView, pending []Shape) int64 {
	free := FreeMemory(card)
	if free == 0 || len(pending) == 0 {
		return 0
	}
	for _, s := range pending {
		if fits(card, s) {
			return 0
		}
	}
	return free
}
