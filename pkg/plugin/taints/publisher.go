// Package taints keeps the node's published ResourceSlices in line with
// the devices' taints: the XID taint monitor's (pkg/plugin/xidtaint), with
// their metrics and Node events, and those of the MIG partitions
// overlapping instances Tangram did not create
// (pkg/plugin/kinds/migpartition).
package taints

import (
	"context"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/record"
	"k8s.io/dynamic-resource-allocation/resourceslice"
	"k8s.io/klog/v2"

	"github.com/tangram-gpu/tangram/pkg/plugin/xidtaint"
)

// Publisher keeps the node's ResourceSlices in line with two sources of
// device taints: the XID taint monitor (with metrics and Node events) and
// the MIG instances Tangram did not create, whose overlapping partitions
// are tainted (migpartition.Partitions.MIGTaints). Either may be nil.
type Publisher struct {
	Node string
	// Resources are the slices without taints; the publisher never
	// changes them.
	Resources *resourceslice.DriverResources
	Health    HealthSource
	MIG       MIGTaintSource
	// Publish republishes the slices (the kubelet helper's
	// PublishResources); nil publishes nothing.
	Publish func(ctx context.Context, res resourceslice.DriverResources) error
	// Metrics get every card's health each time the taints are computed.
	Metrics HealthMetrics
	// Recorder, when set, records each XID taint change as a Node event.
	Recorder record.EventRecorder
}

// HealthSource is what the publisher needs of the XID taint monitor:
// every card's health, and a channel closed at the next change.
type HealthSource interface {
	Devices() []xidtaint.DeviceHealth
	Changed() <-chan struct{}
}

// HealthMetrics take the cards' current health (the plugin's
// tangram_gpu_health and tangram_gpu_taints).
type HealthMetrics interface {
	SetDeviceHealth(node string, devices []xidtaint.DeviceHealth)
}

// MIGTaintSource is what the publisher needs of the driver's view of MIG
// instances it did not create (pkg/plugin/kinds/migpartition).
type MIGTaintSource interface {
	MIGTaints() map[string][]resourceapi.DeviceTaint
	MIGChanged() <-chan struct{}
}

// Tainted is the resources with the taints of both sources now, and the
// channels closed at their next change (nil for a source not there: never
// ready in a select).
func (p *Publisher) Tainted() (res *resourceslice.DriverResources, healthChanged, migChanged <-chan struct{}) {
	byDevice := map[string][]resourceapi.DeviceTaint{}
	if p.Health != nil {
		healthChanged = p.Health.Changed()
		devices := p.Health.Devices()
		if p.Metrics != nil {
			p.Metrics.SetDeviceHealth(p.Node, devices)
		}
		byDevice = xidtaint.TaintsByDevice(devices)
	}
	if p.MIG != nil {
		migChanged = p.MIG.MIGChanged()
		for name, taints := range p.MIG.MIGTaints() {
			byDevice[name] = slices.Concat(byDevice[name], taints)
		}
	}
	return xidtaint.ApplyTaints(p.Resources, byDevice), healthChanged, migChanged
}

// Run republishes on every change until ctx ends. Changes that come while
// publishing are folded into the next round.
func (p *Publisher) Run(ctx context.Context) {
	logger := klog.FromContext(ctx)
	for {
		res, healthChanged, migChanged := p.Tainted()
		if p.Publish != nil {
			if err := p.Publish(ctx, *res); err != nil {
				logger.Error(err, "Republishing ResourceSlices with the devices' taints failed")
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-healthChanged:
		case <-migChanged:
		}
	}
}

// OnChanges records each taint change as an Event on the Node, where
// `kubectl describe node` shows it.
func (p *Publisher) OnChanges(changes []xidtaint.Change) {
	if p.Recorder == nil {
		return
	}
	ref := &corev1.ObjectReference{Kind: "Node", Name: p.Node, UID: types.UID(p.Node)}
	for _, c := range changes {
		eventType, reason, action := NodeEventOf(c)
		p.Recorder.Eventf(ref, eventType, reason, "%s %s (%s): %s=%s:%s: %s", c.Device, action, c.UUID, c.Taint.Key, c.Taint.Value, c.Taint.Effect, c.Reason)
	}
}

// Node event reasons.
const (
	ReasonGPUUnhealthy   = "GPUUnhealthy"
	ReasonGPUHealthEvent = "GPUHealthEvent"
	ReasonGPURecovered   = "GPURecovered"
)

// NodeEventOf is the Node event of one taint change: its type, reason
// and what happened.
func NodeEventOf(c xidtaint.Change) (eventType, reason, action string) {
	switch {
	case !c.Added:
		return corev1.EventTypeNormal, ReasonGPURecovered, "taint removed"
	case xidtaint.Blocks(c.Taint.Effect):
		return corev1.EventTypeWarning, ReasonGPUUnhealthy, "tainted"
	default:
		return corev1.EventTypeNormal, ReasonGPUHealthEvent, "tainted (informational)"
	}
}

// NewNodeEventRecorder records Events through client; stop ends it.
func NewNodeEventRecorder(ctx context.Context, client kubernetes.Interface) (record.EventRecorder, func()) {
	broadcaster := record.NewBroadcaster(record.WithContext(ctx))
	broadcaster.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: client.CoreV1().Events("")})
	return broadcaster.NewRecorder(scheme.Scheme, corev1.EventSource{Component: "tangram-kubelet-plugin"}), broadcaster.Shutdown
}

// Summary is the /healthz detail about the cards: "" when every card
// is healthy and watched, else one "device: why" per card with something
// to say. It never fails the probe: restarting the plugin cures no GPU.
func Summary(devices []xidtaint.DeviceHealth) string {
	var parts []string
	for _, d := range devices {
		if d.Message != "" {
			parts = append(parts, d.Device+": "+d.Message)
		}
	}
	return strings.Join(parts, "; ")
}
