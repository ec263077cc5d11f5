package taints

import (
	"context"
	"strings"
	"sync"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/client-go/tools/record"
	"k8s.io/dynamic-resource-allocation/resourceslice"
	"k8s.io/klog/v2/ktesting"

	"github.com/tangram-gpu/tangram/pkg/gpu"
	"github.com/tangram-gpu/tangram/pkg/plugin/plugintest"
	"github.com/tangram-gpu/tangram/pkg/plugin/xidtaint"
)

const testNode = plugintest.Node

// recordedHealth keeps what the publisher last gave its metrics.
type recordedHealth struct {
	mu      sync.Mutex
	node    string
	devices []xidtaint.DeviceHealth
}

func (r *recordedHealth) SetDeviceHealth(node string, devices []xidtaint.DeviceHealth) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.node, r.devices = node, devices
}

// of is the last health given of device, and whether it was given.
func (r *recordedHealth) of(device string) (xidtaint.DeviceHealth, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, d := range r.devices {
		if d.Device == device && r.node == testNode {
			return d, true
		}
	}
	return xidtaint.DeviceHealth{}, false
}

func TestTaintPublisher(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	monitor := plugintest.Monitor(t)
	resources := &resourceslice.DriverResources{Pools: map[string]resourceslice.Pool{testNode: {Slices: []resourceslice.Slice{{
		Devices: []resourceapi.Device{{Name: "gpu-0"}, {Name: "gpu-1"}},
	}}}}}
	var mu sync.Mutex
	var published []resourceslice.DriverResources
	publishedCh := make(chan struct{}, 10)
	metrics := &recordedHealth{}
	recorder := record.NewFakeRecorder(10)
	pub := &Publisher{Node: testNode, Resources: resources, Health: monitor, Metrics: metrics, Recorder: recorder,
		Publish: func(_ context.Context, res resourceslice.DriverResources) error {
			mu.Lock()
			published = append(published, res)
			mu.Unlock()
			publishedCh <- struct{}{}
			return nil
		}}
	go pub.Run(ctx)
	<-publishedCh
	pub.OnChanges(monitor.Handle(ctx, gpu.HealthEvent{Index: 1, Kind: gpu.HealthEventXID, XID: 79}))
	<-publishedCh
	mu.Lock()
	last := published[len(published)-1]
	mu.Unlock()
	devs := last.Pools[testNode].Slices[0].Devices
	if len(devs[0].Taints) != 0 || len(devs[1].Taints) != 1 || devs[1].Taints[0].Key != xidtaint.TaintKeyXID || devs[1].Taints[0].Value != "79" ||
		devs[1].Taints[0].Effect != resourceapi.DeviceTaintEffectNoSchedule {
		t.Errorf("published devices after XID 79 on gpu-1: %+v", devs)
	}
	if len(resources.Pools[testNode].Slices[0].Devices[1].Taints) != 0 {
		t.Error("the publisher changed the base resources")
	}
	if got := <-recorder.Events; !strings.HasPrefix(got, "Warning GPUUnhealthy gpu-1 tainted") || !strings.Contains(got, "gpu.tangram.dev/xid=79:NoSchedule") {
		t.Errorf("Node event = %q", got)
	}
	if got, ok := metrics.of("gpu-1"); !ok || got.Healthy || len(got.Taints) != 1 || got.Taints[0].Key != xidtaint.TaintKeyXID {
		t.Errorf("metrics got gpu-1 as %+v (given: %v), want unhealthy with the XID taint", got, ok)
	}
	pub.OnChanges(monitor.Handle(ctx, gpu.HealthEvent{Index: 1, Kind: gpu.HealthEventRecovered}))
	<-publishedCh
	mu.Lock()
	last = published[len(published)-1]
	mu.Unlock()
	if taints := last.Pools[testNode].Slices[0].Devices[1].Taints; len(taints) != 0 {
		t.Errorf("after recovery gpu-1 still has taints %v", taints)
	}
	if got := <-recorder.Events; !strings.HasPrefix(got, "Normal GPURecovered gpu-1 taint removed") {
		t.Errorf("Node event = %q", got)
	}
	if got, ok := metrics.of("gpu-1"); !ok || !got.Healthy || len(got.Taints) != 0 {
		t.Errorf("metrics got gpu-1 after recovery as %+v (given: %v), want healthy without taints", got, ok)
	}
}

func TestNodeEventOf(t *testing.T) {
	tests := []struct {
		change            xidtaint.Change
		wantType, wantWhy string
	}{
		{xidtaint.Change{Added: true, Taint: xidtaint.Taint{Effect: resourceapi.DeviceTaintEffectNoSchedule}}, "Warning", ReasonGPUUnhealthy},
		{xidtaint.Change{Added: true, Taint: xidtaint.Taint{Effect: resourceapi.DeviceTaintEffectNone}}, "Normal", ReasonGPUHealthEvent},
		{xidtaint.Change{Added: false, Taint: xidtaint.Taint{Effect: resourceapi.DeviceTaintEffectNoSchedule}}, "Normal", ReasonGPURecovered},
	}
	for _, tt := range tests {
		gotType, gotWhy, _ := NodeEventOf(tt.change)
		if gotType != tt.wantType || gotWhy != tt.wantWhy {
			t.Errorf("NodeEventOf(%+v) = %s %s, want %s %s", tt.change, gotType, gotWhy, tt.wantType, tt.wantWhy)
		}
	}
}

func TestXIDTaintSummary(t *testing.T) {
	if got := Summary([]xidtaint.DeviceHealth{{Device: "gpu-0", Known: true, Healthy: true}}); got != "" {
		t.Errorf("all healthy: %q, want empty", got)
	}
	got := Summary([]xidtaint.DeviceHealth{
		{Device: "gpu-0", Known: true, Healthy: true},
		{Device: "gpu-1", Known: true, Message: "XID 79 (NoSchedule)"},
		{Device: "gpu-2", Known: true, Healthy: true, Message: "XID 13 (None)"},
	})
	if want := "gpu-1: XID 79 (NoSchedule); gpu-2: XID 13 (None)"; got != want {
		t.Errorf("summary = %q, want %q", got, want)
	}
}
