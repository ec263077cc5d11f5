package health

import (
	"slices"
	"strings"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/dynamic-resource-allocation/resourceslice"
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
				dev.Taints = MergeTaints(dev.Taints, byDevice[dev.Name])
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
