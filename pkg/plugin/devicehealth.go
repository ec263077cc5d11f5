package plugin

import (
	"context"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/record"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/dynamic-resource-allocation/resourceslice"
	"k8s.io/klog/v2"

	"github.com/tangram-gpu/tangram/pkg/plugin/health"
)

// DeviceHealth is what the driver needs of the health monitor: every
// card's health, and a channel closed at the next change.
type DeviceHealth interface {
	Devices() []health.DeviceHealth
	Changed() <-chan struct{}
}

// healthResendInterval re-sends the health report this often although
// nothing changed: the kubelet reports a device Unknown when its health
// was not refreshed within healthCheckTimeout.
const (
	healthResendInterval = 10 * time.Second
	healthCheckTimeout   = 30 * time.Second
)

// WatchHealthStatus streams every card's health to the kubelet, which
// shows it in pod.status.containerStatuses[].allocatedResourcesStatus of
// the pods holding the card or a share of it: at once, on every change,
// and every healthResendInterval. Without a monitor (the GPU source
// cannot watch events) it declines: reporting "Healthy" without looking
// would be a lie.
func (d *Driver) WatchHealthStatus(ctx context.Context, reports chan<- kubeletplugin.DeviceHealthReport) error {
	if d.cfg.Health == nil {
		return kubeletplugin.ErrHealthNotSupported
	}
	logger := klog.FromContext(ctx)
	logger.V(2).Info("The kubelet watches device health")
	ticker := time.NewTicker(healthResendInterval)
	defer ticker.Stop()
	for {
		changed := d.cfg.Health.Changed()
		report := healthReport(d.cfg.NodeName, d.cfg.Health.Devices(), time.Now())
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

// healthReport is the kubelet's view of the cards: Unhealthy when a taint
// keeps new claims off the card, Unknown while events cannot be watched.
func healthReport(pool string, devices []health.DeviceHealth, now time.Time) kubeletplugin.DeviceHealthReport {
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
			HealthCheckTimeout: healthCheckTimeout,
			Message:            dev.Message,
		})
	}
	return report
}

// healthPublisher keeps the node's ResourceSlices, metrics and Node events
// in line with the monitor.
type healthPublisher struct {
	node      string
	resources *resourceslice.DriverResources
	health    DeviceHealth
	// publish republishes the slices (the helper's PublishResources).
	publish  func(ctx context.Context, res resourceslice.DriverResources) error
	metrics  *Metrics
	recorder record.EventRecorder
}

// run republishes on every change until ctx ends. Changes that come while
// publishing are folded into the next round.
func (p *healthPublisher) run(ctx context.Context) {
	logger := klog.FromContext(ctx)
	for {
		changed := p.health.Changed()
		devices := p.health.Devices()
		p.metrics.setDeviceHealth(p.node, devices)
		if p.publish != nil {
			res := health.ApplyTaints(p.resources, health.TaintsByDevice(devices))
			if err := p.publish(ctx, *res); err != nil {
				logger.Error(err, "Republishing ResourceSlices with the GPUs' health taints failed")
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-changed:
		}
	}
}

// onChanges records each taint change as an Event on the Node, where
// `kubectl describe node` shows it.
func (p *healthPublisher) onChanges(changes []health.Change) {
	if p.recorder == nil {
		return
	}
	ref := &corev1.ObjectReference{Kind: "Node", Name: p.node, UID: types.UID(p.node)}
	for _, c := range changes {
		eventType, reason, action := nodeEventOf(c)
		p.recorder.Eventf(ref, eventType, reason, "%s %s (%s): %s=%s:%s: %s", c.Device, action, c.UUID, c.Taint.Key, c.Taint.Value, c.Taint.Effect, c.Reason)
	}
}

// Node event reasons.
const (
	ReasonGPUUnhealthy   = "GPUUnhealthy"
	ReasonGPUHealthEvent = "GPUHealthEvent"
	ReasonGPURecovered   = "GPURecovered"
)

func nodeEventOf(c health.Change) (eventType, reason, action string) {
	switch {
	case !c.Added:
		return corev1.EventTypeNormal, ReasonGPURecovered, "taint removed"
	case health.Blocks(c.Taint.Effect):
		return corev1.EventTypeWarning, ReasonGPUUnhealthy, "tainted"
	default:
		return corev1.EventTypeNormal, ReasonGPUHealthEvent, "tainted (informational)"
	}
}

// newNodeEventRecorder records Events through client; stop ends it.
func newNodeEventRecorder(ctx context.Context, client kubernetes.Interface) (record.EventRecorder, func()) {
	broadcaster := record.NewBroadcaster(record.WithContext(ctx))
	broadcaster.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: client.CoreV1().Events("")})
	return broadcaster.NewRecorder(scheme.Scheme, corev1.EventSource{Component: "tangram-kubelet-plugin"}), broadcaster.Shutdown
}

// startDeviceHealth runs the monitor over the GPU source's events and
// the publisher over the monitor.
func startDeviceHealth(ctx context.Context, opts PluginOptions, monitor *health.Monitor, pub *healthPublisher) {
	go monitor.Run(ctx, opts.HealthWatcher, pub.onChanges)
	go pub.run(ctx)
	klog.FromContext(ctx).Info("Watching GPU health", "recoverAfter", opts.HealthRecoverAfter,
		"informationalXIDs", fmt.Sprint(opts.HealthPolicy.InformationalXIDs), "ignoredXIDs", fmt.Sprint(opts.HealthPolicy.IgnoredXIDs))
}

// healthSummary is the /healthz detail about the cards: "" when every card
// is healthy and watched, else one "device: why" per card with something
// to say. It never fails the probe: restarting the plugin cures no GPU.
func healthSummary(devices []health.DeviceHealth) string {
	var parts []string
	for _, d := range devices {
		if d.Message != "" {
			parts = append(parts, d.Device+": "+d.Message)
		}
	}
	return strings.Join(parts, "; ")
}
