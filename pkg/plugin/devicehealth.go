package plugin

import (
	"context"
	"slices"
	"time"

	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/klog/v2"

	"github.com/tangram-gpu/tangram/pkg/plugin/xidtaint"
)

// DeviceHealth is what the driver needs of the XID taint monitor for the
// kubelet's device-health stream: every
// card's health, and a channel closed at the next change.
type DeviceHealth interface {
	Devices() []xidtaint.DeviceHealth
	Changed() <-chan struct{}
}

// deviceHealthResendInterval re-sends the health report this often although
// nothing changed: the kubelet reports a device Unknown when its health
// was not refreshed within xidtaint.KubeletHealthCheckTimeout.
const deviceHealthResendInterval = 10 * time.Second

// WatchHealthStatus streams every card's health to the kubelet, which
// shows it in pod.status.containerStatuses[].allocatedResourcesStatus of
// the pods holding the card or a share of it: at once, on every change,
// and every deviceHealthResendInterval. A card in MIG mode is reported as
// the partitions claims hold on it (and those with taints of their own),
// each with the card's taints (xidtaint.ForKubelet): the kubelet knows
// only the devices it allocated, and such a card is not published whole. Without a monitor (the GPU source
// cannot watch events) it declines: reporting "Healthy" without looking
// would be a lie.
func (d *Driver) WatchHealthStatus(ctx context.Context, reports chan<- kubeletplugin.DeviceHealthReport) error {
	if d.cfg.DeviceHealth == nil {
		return kubeletplugin.ErrHealthNotSupported
	}
	logger := klog.FromContext(ctx)
	logger.V(2).Info("The kubelet watches device health")
	ticker := time.NewTicker(deviceHealthResendInterval)
	defer ticker.Stop()
	for {
		changed := d.cfg.DeviceHealth.Changed()
		report := xidtaint.KubeletReport(d.cfg.NodeName, xidtaint.ForKubelet(d.cfg.DeviceHealth.Devices(), d.migPartitions()), time.Now())
		select {
		case <-ctx.Done():
			return nil
		case reports <- report:
		}
		select {
		case <-ctx.Done():
			return nil
		case <-changed:
		case <-ticker.C:
		}
	}
}

// migPartitions maps each card in MIG mode to the partitions prepared
// claims hold on it (records in any state), sorted.
func (d *Driver) migPartitions() map[int][]string {
	out := map[int][]string{}
	for _, card := range d.cards {
		if card.MIG != nil && card.MIG.Enabled {
			out[card.Index] = nil
		}
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, rec := range d.records {
		for _, dev := range rec.Devices {
			if dev.MIG == nil {
				continue
			}
			if _, mig := out[dev.MIG.ParentIndex]; mig && !slices.Contains(out[dev.MIG.ParentIndex], dev.Device) {
				out[dev.MIG.ParentIndex] = append(out[dev.MIG.ParentIndex], dev.Device)
			}
		}
	}
	for index := range out {
		slices.Sort(out[index])
	}
	return out
}
