package clusterview

import (
	"slices"
	"time"

	resourceapi "k8s.io/api/resource/v1"

	"github.com/tangram-gpu/tangram/pkg/cluster"
	"github.com/tangram-gpu/tangram/pkg/device"
)

// MIGCardView says, on a card in MIG mode, what its partitions are: the
// card is published as one device per profile and placement
// (docs/resourceslices.md), shown here as one card whose allocations are
// the partitions claims hold.
type MIGCardView struct {
	// Offered is how many partition devices the card publishes.
	Offered int `json:"offered"`
	// ComputeSlices is the card's compute slices (7), ComputeSlicesUsed
	// those of the allocated partitions.
	ComputeSlices     int64 `json:"computeSlices"`
	ComputeSlicesUsed int64 `json:"computeSlicesUsed"`
}

// MIGAllocationView is the partition a MIG allocation holds.
type MIGAllocationView struct {
	// Device is the partition's device, "gpu-0-mig-9-4".
	Device string `json:"device"`
	// Profile is its profile ("3g.40gb"), PlacementStart its first memory
	// slice.
	Profile        string `json:"profile"`
	PlacementStart int64  `json:"placementStart"`
}

// isMIGPartition reports whether a published device is a MIG partition.
func isMIGPartition(ds *cluster.DeviceState) bool {
	return ds.StringAttribute(device.AttrType) == device.TypeMIG
}

func intAttribute(ds *cluster.DeviceState, name resourceapi.QualifiedName) int64 {
	if a, ok := ds.Attribute(name); ok && a.IntValue != nil {
		return *a.IntValue
	}
	return -1
}

// consumedComputeSlices is what a partition takes of its card's compute
// slices, its max the card's (a 7g partition takes them all).
func consumedComputeSlices(ds *cluster.DeviceState) int64 {
	for _, c := range ds.Device.ConsumesCounters {
		if q, ok := c.Counters[device.MIGCounterComputeSlices]; ok {
			return q.Value.Value()
		}
	}
	return 0
}

// migCardView is one card in MIG mode from its partition devices (sorted
// as published): its allocations are the allocated partitions, its memory
// the largest partition's, its compute the share of compute slices held.
func migCardView(parts []*cluster.DeviceState, claimGang map[string]string) CardView {
	first := parts[0]
	c := CardView{
		Device:         device.CardDeviceName(int(intAttribute(first, device.AttrParentIndex))),
		Pool:           first.Pool,
		UUID:           first.StringAttribute(device.AttrParentUUID),
		ProductName:    first.StringAttribute(device.AttrProductName),
		NVLinkDomain:   first.StringAttribute(device.AttrNVLinkDomain),
		ComputePercent: 100,
		Allocations:    []AllocationView{},
		MIG:            &MIGCardView{Offered: len(parts)},
	}
	seenTaint := map[TaintView]bool{}
	for _, ds := range parts {
		mem := ds.Capacity(device.CapacityMemory)
		c.MemoryBytes = max(c.MemoryBytes, mem.Value())
		slicesOf := consumedComputeSlices(ds)
		c.MIG.ComputeSlices = max(c.MIG.ComputeSlices, slicesOf)
		for _, t := range ds.Device.Taints {
			tv := TaintView{Key: t.Key, Value: t.Value, Effect: string(t.Effect)}
			if t.TimeAdded != nil {
				tv.Since = t.TimeAdded.UTC().Format(time.RFC3339)
			}
			if !seenTaint[tv] {
				seenTaint[tv] = true
				c.Taints = append(c.Taints, tv)
			}
		}
		for _, a := range ds.Allocations {
			av := allocationView(a, claimGang)
			av.Whole, av.MemoryBytes = true, mem.Value()
			av.MIG = &MIGAllocationView{Device: ds.Device.Name, Profile: ds.StringAttribute(device.AttrMIGProfile),
				PlacementStart: intAttribute(ds, device.AttrMIGPlacementStart)}
			c.Allocations = append(c.Allocations, av)
			c.MemoryUsedBytes += mem.Value()
			c.MIG.ComputeSlicesUsed += slicesOf
		}
	}
	if c.MIG.ComputeSlices > 0 {
		c.ComputeUsedPercent = c.MIG.ComputeSlicesUsed * 100 / c.MIG.ComputeSlices
	}
	slices.SortFunc(c.Allocations, func(a, b AllocationView) int { return int(a.MIG.PlacementStart - b.MIG.PlacementStart) })
	switch {
	case len(c.Allocations) == 0:
		c.State = CardFree
	case c.MIG.ComputeSlicesUsed >= c.MIG.ComputeSlices:
		c.State = CardFull
	default:
		c.State = CardPartial
	}
	return c
}
