package plugin

import (
	"context"
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
// was not refreshed within deviceHealthCheckTimeout.
const (
	deviceHealthResendInterval = 10 * time.Second
	deviceHealthCheckTimeout   = 30 * time.Second
)

// WatchHealthStatus streams every card's health to the kubelet, which
// shows it in pod.status.containerStatuses[].allocatedResourcesStatus of
// the pods holding the card or a share of it: at once, on every change,
// and every deviceHealthResendInterval. Without a monitor (the GPU source
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
		report := deviceHealthReport(d.cfg.NodeName, d.cfg.DeviceHealth.Devices(), time.Now())
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

// deviceHealthReport is the kubelet's view of the cards: Unhealthy when a taint
// keeps new claims off the card, Unknown while events cannot be watched.
func deviceHealthReport(pool string, devices []xidtaint.DeviceHealth, now time.Time) kubeletplugin.DeviceHealthReport {
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
			HealthCheckTimeout: deviceHealthCheckTimeout,
			Message:            dev.Message,
		})
	}
	return report
}
