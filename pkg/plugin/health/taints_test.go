package health

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/dynamic-resource-allocation/resourceslice"
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
