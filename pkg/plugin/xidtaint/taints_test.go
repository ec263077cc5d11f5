package xidtaint

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/dynamic-resource-allocation/resourceslice"
	"k8s.io/klog/v2/ktesting"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/tangram-gpu/tangram/pkg/gpu"
)

func TestMergeTaints(t *testing.T) {
	at := metav1.NewTime(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	maintenance := resourceapi.DeviceTaint{Key: "example.com/maintenance", Value: "true", Effect: resourceapi.DeviceTaintEffectNoSchedule}
	oldXID := resourceapi.DeviceTaint{Key: TaintKeyXID, Value: "13", Effect: resourceapi.DeviceTaintEffectNone}
	newXID := resourceapi.DeviceTaint{Key: TaintKeyXID, Value: "79", Effect: resourceapi.DeviceTaintEffectNoSchedule, TimeAdded: &at}
	lost := resourceapi.DeviceTaint{Key: TaintKeyGPULost, Value: "true", Effect: resourceapi.DeviceTaintEffectNoSchedule, TimeAdded: &at}
	tests := []struct {
		name           string
		existing, ours []resourceapi.DeviceTaint
		want           []resourceapi.DeviceTaint
	}{
		{"nothing", nil, nil, nil},
		{"ours added", nil, []resourceapi.DeviceTaint{newXID}, []resourceapi.DeviceTaint{newXID}},
		{"others kept, ours appended", []resourceapi.DeviceTaint{maintenance}, []resourceapi.DeviceTaint{newXID},
			[]resourceapi.DeviceTaint{maintenance, newXID}},
		{"our old value replaced", []resourceapi.DeviceTaint{oldXID, maintenance}, []resourceapi.DeviceTaint{newXID},
			[]resourceapi.DeviceTaint{maintenance, newXID}},
		{"ours removed on recovery, others kept", []resourceapi.DeviceTaint{maintenance, oldXID}, nil,
			[]resourceapi.DeviceTaint{maintenance}},
		{"ours sorted by key", nil, []resourceapi.DeviceTaint{newXID, lost}, []resourceapi.DeviceTaint{lost, newXID}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if diff := cmp.Diff(tt.want, MergeTaints(tt.existing, tt.ours)); diff != "" {
				t.Errorf("MergeTaints (-want +got):\n%s", diff)
			}
		})
	}
}

func TestApplyTaintsCopies(t *testing.T) {
	maintenance := resourceapi.DeviceTaint{Key: "example.com/maintenance", Effect: resourceapi.DeviceTaintEffectNoSchedule}
	res := &resourceslice.DriverResources{Pools: map[string]resourceslice.Pool{"node": {Slices: []resourceslice.Slice{{
		Devices: []resourceapi.Device{{Name: "gpu-0"}, {Name: "gpu-1", Taints: []resourceapi.DeviceTaint{maintenance}}},
	}}}}}
	xid := resourceapi.DeviceTaint{Key: TaintKeyXID, Value: "79", Effect: resourceapi.DeviceTaintEffectNoSchedule}
	got := ApplyTaints(res, map[string][]resourceapi.DeviceTaint{"gpu-1": {xid}})
	devices := got.Pools["node"].Slices[0].Devices
	if devices[0].Taints != nil {
		t.Errorf("gpu-0 taints = %v, want none", devices[0].Taints)
	}
	if diff := cmp.Diff([]resourceapi.DeviceTaint{maintenance, xid}, devices[1].Taints); diff != "" {
		t.Errorf("gpu-1 taints (-want +got):\n%s", diff)
	}
	if orig := res.Pools["node"].Slices[0].Devices[1].Taints; len(orig) != 1 {
		t.Errorf("ApplyTaints changed its input: gpu-1 taints = %v", orig)
	}
	// Recovery: applying nothing removes ours again.
	again := ApplyTaints(got, nil)
	if diff := cmp.Diff([]resourceapi.DeviceTaint{maintenance}, again.Pools["node"].Slices[0].Devices[1].Taints); diff != "" {
		t.Errorf("after recovery (-want +got):\n%s", diff)
	}
}

// TestMIGTaints: an XID of one MIG instance taints only its partition's
// device; a card-wide XID taints the card's every partition (they publish
// the card's taints), and only that card's; the card's recovery clears
// its partitions too.
func TestMIGTaints(t *testing.T) {
	clk := testingclock.NewFakeClock(time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC))
	cards := []gpu.GPU{{Index: 0, UUID: "GPU-0"}, {Index: 1, UUID: "GPU-1"}}
	// GPU instance 1 of card 0 is its 3g at 4, instance 2 its 1g at 0.
	instances := map[[2]int]string{{0, 1}: "gpu-0-mig-9-4", {0, 2}: "gpu-0-mig-19-0"}
	m, err := NewMonitor(Config{Cards: cards, Policy: DefaultPolicy(), Clock: clk,
		MIGDevice: func(index, gi int) (string, bool) { name, ok := instances[[2]int{index, gi}]; return name, ok }})
	if err != nil {
		t.Fatal(err)
	}
	res := &resourceslice.DriverResources{Pools: map[string]resourceslice.Pool{"node": {Slices: []resourceslice.Slice{{
		Devices: []resourceapi.Device{{Name: "gpu-0-mig-19-0"}, {Name: "gpu-0-mig-9-4"}, {Name: "gpu-0-mig-0-0"}, {Name: "gpu-1-mig-19-0"}, {Name: "gpu-1"}},
	}}}}}
	published := func() map[string]string {
		out := map[string]string{}
		for _, d := range ApplyTaints(res, TaintsByDevice(m.Devices())).Pools["node"].Slices[0].Devices {
			var ts []string
			for _, t := range d.Taints {
				ts = append(ts, t.Value)
			}
			if len(ts) > 0 {
				out[d.Name] = strings.Join(ts, ",")
			}
		}
		return out
	}
	_, ctx := ktesting.NewTestContext(t)
	gi := func(i int) *int { return &i }
	steps := []struct {
		event gpu.HealthEvent
		want  map[string]string
	}{
		{gpu.HealthEvent{Index: 0, Kind: gpu.HealthEventXID, XID: 43, GPUInstance: gi(1), ComputeInstance: gi(0)}, map[string]string{"gpu-0-mig-9-4": "43"}},
		{gpu.HealthEvent{Index: 0, Kind: gpu.HealthEventXID, XID: 79, GPUInstance: gi(7)}, // an instance no partition is: the card
			map[string]string{"gpu-0-mig-9-4": "43", "gpu-0-mig-19-0": "79", "gpu-0-mig-0-0": "79"}},
		{gpu.HealthEvent{Index: 0, Kind: gpu.HealthEventRecovered}, map[string]string{}},
		{gpu.HealthEvent{Index: 0, Kind: gpu.HealthEventXID, XID: 48}, map[string]string{"gpu-0-mig-9-4": "48", "gpu-0-mig-19-0": "48", "gpu-0-mig-0-0": "48"}},
	}
	for i, s := range steps {
		m.Handle(ctx, s.event)
		if diff := cmp.Diff(s.want, published()); diff != "" {
			t.Errorf("step %d (%+v): published taints (-want +got):\n%s", i, s.event, diff)
		}
	}
}
