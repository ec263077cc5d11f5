package xidtaint

import (
	"slices"
	"strings"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/dynamic-resource-allocation/resourceslice"

	"github.com/tangram-gpu/tangram/pkg/device"
)

// MergeTaints returns the device's taints with the monitor's keys replaced
// by ours: taints someone else put there (other keys) stay, in their
// order, followed by ours sorted by key.
func MergeTaints(existing, ours []resourceapi.DeviceTaint) []resourceapi.DeviceTaint {
	var out []resourceapi.DeviceTaint
	for _, t := range existing {
		if !IsOwnTaintKey(t.Key) {
			out = append(out, *t.DeepCopy())
		}
	}
	sorted := slices.Clone(ours)
	slices.SortStableFunc(sorted, func(a, b resourceapi.DeviceTaint) int { return strings.Compare(a.Key, b.Key) })
	for _, t := range sorted {
		out = append(out, *t.DeepCopy())
	}
	return out
}

// ApplyTaints returns a copy of res whose devices carry the given taints
// (by device name, merged with MergeTaints); res is not changed. Devices
// without an entry lose the monitor's taints and keep the others.
func ApplyTaints(res *resourceslice.DriverResources, byDevice map[string][]resourceapi.DeviceTaint) *resourceslice.DriverResources {
	out := &resourceslice.DriverResources{Pools: make(map[string]resourceslice.Pool, len(res.Pools))}
	for name, pool := range res.Pools {
		cp := pool
		cp.Slices = make([]resourceslice.Slice, len(pool.Slices))
		for i, s := range pool.Slices {
			cs := s
			cs.Devices = make([]resourceapi.Device, len(s.Devices))
			for j := range s.Devices {
				dev := s.Devices[j].DeepCopy()
				dev.Taints = MergeTaints(dev.Taints, withCardTaints(dev.Name, byDevice))
				if len(dev.Taints) == 0 {
					dev.Taints = nil
				}
				cs.Devices[j] = *dev
			}
			cp.Slices[i] = cs
		}
		out.Pools[name] = cp
	}
	return out
}

// withCardTaints is a device's taints: its own, and for a MIG partition also
// its card's (an XID of the whole card taints every partition of it).
func withCardTaints(name string, byDevice map[string][]resourceapi.DeviceTaint) []resourceapi.DeviceTaint {
	own := byDevice[name]
	ref, err := device.ParseDeviceName(name)
	if err != nil || ref.MIG == nil {
		return own
	}
	card := byDevice[device.CardDeviceName(ref.Index)]
	if len(card) == 0 {
		return own
	}
	// One taint per key: the partition's own, else the card's.
	out := slices.Clone(own)
	for _, t := range card {
		if !slices.ContainsFunc(own, func(o resourceapi.DeviceTaint) bool { return o.Key == t.Key }) {
			out = append(out, t)
		}
	}
	return out
}

// TaintsByDevice collects the taints of each card that has any.
func TaintsByDevice(devices []DeviceHealth) map[string][]resourceapi.DeviceTaint {
	out := map[string][]resourceapi.DeviceTaint{}
	for _, d := range devices {
		if len(d.Taints) > 0 {
			out[d.Device] = d.Taints
		}
	}
	return out
}
