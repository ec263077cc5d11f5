package resourceslices

import (
	"cmp"
	"fmt"
	"maps"
	"slices"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"

	"github.com/tangram-gpu/tangram/pkg/device"
	"github.com/tangram-gpu/tangram/pkg/gpu"
)

// A card in MIG mode is published as KEP-4815 partitionable devices: one
// device per GPU instance profile and placement NVML reports
// (gpu.MIG.Profiles, never a table of ours), all consuming one counter set
// of the card (device.MIGCounterSetName). The counters make exactly the
// combinations the hardware allows allocatable together:
//   - a counter of 1 per memory slice, consumed by the placements that
//     cover it: two overlapping placements cannot both be allocated;
//   - the card's compute slices, consumed by each profile's share;
//   - for a profile NVML allows fewer instances of than it has
//     placements (the one media-extension "+me" profile), a counter of its
//     instance count.
//
// The devices of a card are listed profile by profile in NVML's order,
// each profile's placements highest start first: kube-scheduler's
// allocator takes the first device that fits, and the large profiles all
// start at memory slice 0, so small partitions taken from the top keep the
// large ones possible for longest.

// migLayout is what a card in MIG mode publishes: its counter set and, per
// profile and placement, what that partition consumes.
type migLayout struct {
	counters   resourceapi.CounterSet
	partitions []migPartition
}

type migPartition struct {
	profile  gpu.MIGProfile
	start    int
	consumes map[string]resourceapi.Counter
}

// newMIGLayout derives a card's counters and partitions from its MIG
// profiles; an error says why the card cannot be published as partitions.
func newMIGLayout(g gpu.GPU) (migLayout, error) {
	if g.MIG == nil || len(g.MIG.Profiles) == 0 {
		return migLayout{}, fmt.Errorf("NVML reported no MIG profiles for the card")
	}
	memorySlices, computeSlices := 0, 0
	for _, p := range g.MIG.Profiles {
		if p.ComputeSlices <= 0 {
			return migLayout{}, fmt.Errorf("MIG profile %s (ID %d) reports %d compute slices", p.Name, p.ID, p.ComputeSlices)
		}
		computeSlices = max(computeSlices, p.ComputeSlices)
		for _, pl := range p.Placements {
			if pl.Start < 0 || pl.Size <= 0 {
				return migLayout{}, fmt.Errorf("MIG profile %s (ID %d) reports placement %d:%d", p.Name, p.ID, pl.Start, pl.Size)
			}
			memorySlices = max(memorySlices, pl.Start+pl.Size)
		}
	}
	one := resourceapi.Counter{Value: *resource.NewQuantity(1, resource.DecimalSI)}
	set := resourceapi.CounterSet{Name: device.MIGCounterSetName(g.Index), Counters: map[string]resourceapi.Counter{
		device.MIGCounterComputeSlices: {Value: *resource.NewQuantity(int64(computeSlices), resource.DecimalSI)},
	}}
	for n := range memorySlices {
		set.Counters[device.MIGCounterMemorySlice(n)] = one
	}
	var parts []migPartition
	seenIDs := map[int]bool{}
	for _, p := range g.MIG.Profiles {
		if seenIDs[p.ID] {
			return migLayout{}, fmt.Errorf("two MIG profiles have ID %d", p.ID)
		}
		seenIDs[p.ID] = true
		instances := ""
		if p.Instances > 0 && p.Instances < len(p.Placements) {
			instances = device.MIGCounterProfileInstances(p.ID)
			set.Counters[instances] = resourceapi.Counter{Value: *resource.NewQuantity(int64(p.Instances), resource.DecimalSI)}
		}
		placements := slices.Clone(p.Placements)
		slices.SortFunc(placements, func(a, b gpu.MIGPlacement) int { return cmp.Compare(b.Start, a.Start) })
		for _, pl := range placements {
			consumes := map[string]resourceapi.Counter{
				device.MIGCounterComputeSlices: {Value: *resource.NewQuantity(int64(p.ComputeSlices), resource.DecimalSI)},
			}
			for n := pl.Start; n < pl.Start+pl.Size; n++ {
				consumes[device.MIGCounterMemorySlice(n)] = one
			}
			if instances != "" {
				consumes[instances] = one
			}
			parts = append(parts, migPartition{profile: p, start: pl.Start, consumes: consumes})
		}
	}
	if n := len(set.Counters); n > resourceapi.ResourceSliceMaxCountersPerCounterSet {
		return migLayout{}, fmt.Errorf("the card's MIG layout needs %d counters, more than the %d a counter set may hold", n, resourceapi.ResourceSliceMaxCountersPerCounterSet)
	}
	return migLayout{counters: set, partitions: parts}, nil
}

// migDevices are the partition devices of a card in MIG mode; none (and
// an error logged) when its layout cannot be published: a card in MIG mode
// cannot run anything as a whole card.
func migDevices(logger klog.Logger, g gpu.GPU, nvlinkDomain string, opts Options) []resourceapi.Device {
	layout, err := newMIGLayout(g)
	if err != nil {
		logger.Error(err, "Card is in MIG mode but its MIG partitions cannot be published; publishing nothing for it", "uuid", g.UUID)
		return nil
	}
	// The card's own attributes are read once (the PCIe root through
	// sysfs, with its log lines) and copied into every partition.
	hardware := hardwareAttributes(logger, g, nvlinkDomain, opts)
	out := make([]resourceapi.Device, 0, len(layout.partitions))
	for _, part := range layout.partitions {
		p := part.profile
		attrs := maps.Clone(hardware)
		num := func(n int) resourceapi.DeviceAttribute {
			return resourceapi.DeviceAttribute{IntValue: ptr.To(int64(n))}
		}
		attrs[device.AttrType] = resourceapi.DeviceAttribute{StringValue: ptr.To(device.TypeMIG)}
		attrs[device.AttrMIGProfileID] = num(p.ID)
		attrs[device.AttrMIGPlacementStart] = num(part.start)
		attrs[device.AttrParentIndex] = num(g.Index)
		attrs[device.AttrMultiprocessors] = num(p.Multiprocessors)
		attrs[device.AttrCopyEngines] = num(p.CopyEngines)
		attrs[device.AttrDecoders] = num(p.Decoders)
		attrs[device.AttrJPEGs] = num(p.JPEGs)
		attrs[device.AttrOFAs] = num(p.OFAs)
		setString(logger, attrs, device.AttrMIGProfile, p.Name)
		setString(logger, attrs, device.AttrParentUUID, g.UUID)
		dev := resourceapi.Device{
			Name:       device.MIGDeviceName(g.Index, p.ID, part.start),
			Attributes: attrs,
			Capacity:   map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{},
			ConsumesCounters: []resourceapi.DeviceCounterConsumption{{
				CounterSet: layout.counters.Name,
				Counters:   part.consumes,
			}},
		}
		if p.MemoryBytes > 0 {
			dev.Capacity[device.CapacityMemory] = resourceapi.DeviceCapacity{Value: *resource.NewQuantity(p.MemoryBytes, resource.BinarySI)}
		} else {
			logger.Info("MIG profile reports no memory size; publishing its partitions without memory capacity", "profile", p.Name)
		}
		out = append(out, dev)
	}
	return out
}

// CounterSets are the counter sets of the node's cards in MIG mode, one
// per card whose partitions Devices publishes, sorted by card index.
func CounterSets(gpus []gpu.GPU) []resourceapi.CounterSet {
	sorted := slices.Clone(gpus)
	slices.SortFunc(sorted, func(a, b gpu.GPU) int { return a.Index - b.Index })
	var out []resourceapi.CounterSet
	for _, g := range sorted {
		if g.MIG == nil || !g.MIG.Enabled {
			continue
		}
		if layout, err := newMIGLayout(g); err == nil {
			out = append(out, layout.counters)
		}
	}
	return out
}

// MIGPartitionsOverlapping names the partition devices card g publishes
// (one per MIG profile and placement, migDevices) whose placement shares a
// memory slice with p, in publication order; none when the card is not in
// MIG mode or its layout cannot be published. The kubelet plugin taints
// them while an instance it did not create holds p. Pure.
func MIGPartitionsOverlapping(g gpu.GPU, p gpu.MIGPlacement) []string {
	if g.MIG == nil || !g.MIG.Enabled {
		return nil
	}
	layout, err := newMIGLayout(g)
	if err != nil {
		return nil
	}
	var out []string
	for _, part := range layout.partitions {
		pl, ok := part.profile.PlacementAt(part.start)
		if ok && pl.Overlaps(p) {
			out = append(out, device.MIGDeviceName(g.Index, part.profile.ID, part.start))
		}
	}
	return out
}
