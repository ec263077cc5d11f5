package plugin

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

// taintPublisher keeps the node's ResourceSlices in line with two sources
// of device taints: the XID taint monitor (with metrics and Node events)
// and the MIG instances Tangram did not create, whose overlapping
// partitions are tainted (migpartition.Partitions.MIGTaints). Either may be nil.
type taintPublisher struct {
	node      string
	resources *resourceslice.DriverResources
	monitor   DeviceHealth
	mig       MIGTaintSource
	// publish republishes the slices (the helper's PublishResources).
	publish  func(ctx context.Context, res resourceslice.DriverResources) error
	metrics  *Metrics
	recorder record.EventRecorder
}

// MIGTaintSource is what the publisher needs of the driver's view of MIG
// instances it did not create (pkg/plugin/kinds/migpartition).
type MIGTaintSource interface {
	MIGTaints() map[string][]resourceapi.DeviceTaint
	MIGChanged() <-chan struct{}
}

// tainted is the resources with the taints of both sources now, and the
// channels closed at their next change (nil for a source not there: never
// ready in a select).
func (p *taintPublisher) tainted() (res *resourceslice.DriverResources, healthChanged, migChanged <-chan struct{}) {
	byDevice := map[string][]resourceapi.DeviceTaint{}
	if p.monitor != nil {
		healthChanged = p.monitor.Changed()
		devices := p.monitor.Devices()
		p.metrics.setDeviceHealth(p.node, devices)
		byDevice = xidtaint.TaintsByDevice(devices)
	}
	if p.mig != nil {
		migChanged = p.mig.MIGChanged()
		for name, taints := range p.mig.MIGTaints() {
			byDevice[name] = slices.Concat(byDevice[name], taints)
		}
	}
	return xidtaint.ApplyTaints(p.resources, byDevice), healthChanged, migChanged
}

// run republishes on every change until ctx ends. Changes that come while
// publishing are folded into the next round.
func (p *taintPublisher) run(ctx context.Context) {
	logger := klog.FromContext(ctx)
	for {
		res, healthChanged, migChanged := p.tainted()
		if p.publish != nil {
			if err := p.publish(ctx, *res); err != nil {
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

// onChanges records each taint change as an Event on the Node, where
// `kubectl describe node` shows it.
func (p *taintPublisher) onChanges(changes []xidtaint.Change) {
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

func nodeEventOf(c xidtaint.Change) (eventType, reason, action string) {
	switch {
	case !c.Added:
		return corev1.EventTypeNormal, ReasonGPURecovered, "taint removed"
	case xidtaint.Blocks(c.Taint.Effect):
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

// xidTaintSummary is the /healthz detail about the cards: "" when every card
// is healthy and watched, else one "device: why" per card with something
// to say. It never fails the probe: restarting the plugin cures no GPU.
func xidTaintSummary(devices []xidtaint.DeviceHealth) string {
	var parts []string
	for _, d := range devices {
		if d.Message != "" {
			parts = append(parts, d.Device+": "+d.Message)
		}
	}
	return strings.Join(parts, "; ")
}
