package plugin

import (
	"context"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/record"
	"k8s.io/dynamic-resource-allocation/resourceslice"
	"k8s.io/klog/v2"

	"github.com/tangram-gpu/tangram/pkg/plugin/xidtaint"
)

// taintPublisher keeps the node's ResourceSlices, metrics and Node events
// in line with the monitor.
type taintPublisher struct {
	node      string
	resources *resourceslice.DriverResources
	monitor   DeviceHealth
	// publish republishes the slices (the helper's PublishResources).
	publish  func(ctx context.Context, res resourceslice.DriverResources) error
	metrics  *Metrics
	recorder record.EventRecorder
}

// run republishes on every change until ctx ends. Changes that come while
// publishing are folded into the next round.
func (p *taintPublisher) run(ctx context.Context) {
	logger := klog.FromContext(ctx)
	for {
		changed := p.monitor.Changed()
		devices := p.monitor.Devices()
		p.metrics.setDeviceHealth(p.node, devices)
		if p.publish != nil {
			res := xidtaint.ApplyTaints(p.resources, xidtaint.TaintsByDevice(devices))
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
