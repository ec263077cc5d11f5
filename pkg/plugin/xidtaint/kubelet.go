package xidtaint

import (
	"cmp"
	"slices"
	"strings"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"

	"github.com/tangram-gpu/tangram/pkg/device"
)

// ForKubelet is the health of the devices the kubelet's device-health
// stream must cover, from the monitor's Devices: a card not in MIG mode as
// it is; a card in MIG mode (an index in migPartitions) is not published
// whole, so it is replaced by its partitions: those migPartitions names
// (the ones held by claims) and those with taints of their own, each with
// the card's taints merged in (as ApplyTaints does for the ResourceSlices:
// one taint per key, the partition's own first). Pure.
func ForKubelet(devices []DeviceHealth, migPartitions map[int][]string) []DeviceHealth {
	byName := map[string]DeviceHealth{}
	for _, dh := range devices {
		byName[dh.Device] = dh
	}
	out := make([]DeviceHealth, 0, len(devices))
	for _, dh := range devices {
		ref, err := device.ParseDeviceName(dh.Device)
		if err != nil {
			out = append(out, dh)
			continue
		}
		parts, mig := migPartitions[ref.Index]
		switch {
		case !mig:
			out = append(out, dh)
		case ref.MIG == nil:
			names := slices.Clone(parts)
			for _, other := range devices {
				if partitionOf(other.Device, ref.Index) {
					names = append(names, other.Device)
				}
			}
			slices.Sort(names)
			for _, name := range slices.Compact(names) {
				own, ok := byName[name]
				out = append(out, partitionHealth(name, dh, own, ok))
			}
		}
		// A partition of a card in MIG mode comes with its card.
	}
	return out
}

// partitionHealth is partition name's health: its own (when hasOwn) and
// its card's.
func partitionHealth(name string, card, own DeviceHealth, hasOwn bool) DeviceHealth {
	taints := withCardTaints(name, map[string][]resourceapi.DeviceTaint{card.Device: card.Taints, name: own.Taints})
	taints = slices.Clone(taints)
	slices.SortFunc(taints, func(a, b resourceapi.DeviceTaint) int { return cmp.Compare(a.Key, b.Key) })
	out := DeviceHealth{Device: name, UUID: card.UUID, Known: card.Known, Healthy: true}
	if len(taints) > 0 {
		out.Taints = taints
	}
	for _, t := range taints {
		if Blocks(t.Effect) {
			out.Healthy = false
		}
	}
	var why []string
	if hasOwn && own.Message != "" {
		why = append(why, own.Message)
	}
	switch {
	case len(card.Taints) > 0:
		why = append(why, "card "+card.Device+": "+card.Message)
	case !hasOwn && card.Message != "":
		// Events cannot be watched: said on the card.
		why = append(why, card.Message)
	}
	out.Message = strings.Join(why, "; ")
	return out
}

// KubeletHealthCheckTimeout is how long the kubelet keeps a reported
// health before it says Unknown; the plugin re-sends well within it.
const KubeletHealthCheckTimeout = 30 * time.Second

// KubeletReport is the kubelet's view of the devices: Unhealthy when a
// taint keeps new claims off the card, Unknown while events cannot be
// watched. Pure.
func KubeletReport(pool string, devices []DeviceHealth, now time.Time) kubeletplugin.DeviceHealthReport {
	report := kubeletplugin.DeviceHealthReport{Devices: make([]kubeletplugin.DeviceHealth, 0, len(devices))}
	for _, dev := range devices {
		status := kubeletplugin.HealthStatusHealthy
		switch {
		case !dev.Known:
			status = kubeletplugin.HealthStatusUnknown
		case !dev.Healthy:
			status = kubeletplugin.HealthStatusUnhealthy
		}
		report.Devices = append(report.Devices, kubeletplugin.DeviceHealth{
			PoolName:           pool,
			DeviceName:         dev.Device,
			Health:             status,
			LastUpdated:        now,
			HealthCheckTimeout: KubeletHealthCheckTimeout,
			Message:            dev.Message,
		})
	}
	return report
}
