package clusterview_test

import (
	"bytes"
	"strings"
	"testing"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/tangram-gpu/tangram/pkg/clusterview"
	"github.com/tangram-gpu/tangram/pkg/names"
)

// Health taints in the ResourceSlice show in the view and mark the card
// in `kubectl tangram status`, with the reason under the node's table.
func TestTaintedCards(t *testing.T) {
	at := metav1.NewTime(time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC))
	dev := func(name string, taints ...resourceapi.DeviceTaint) resourceapi.Device {
		return resourceapi.Device{Name: name, Taints: taints, Capacity: map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{
			names.CapacityMemory: {Value: resource.MustParse("16Gi")},
		}}
	}
	snap := &clusterview.Snapshot{Slices: []*resourceapi.ResourceSlice{{
		ObjectMeta: metav1.ObjectMeta{Name: "s"},
		Spec: resourceapi.ResourceSliceSpec{Driver: names.DriverName, NodeName: ptr.To("n1"),
			Pool: resourceapi.ResourcePool{Name: "n1", Generation: 1, ResourceSliceCount: 1},
			Devices: []resourceapi.Device{
				dev("gpu-0"),
				dev("gpu-1", resourceapi.DeviceTaint{Key: "gpu.tangram.dev/xid", Value: "79", Effect: resourceapi.DeviceTaintEffectNoSchedule, TimeAdded: &at}),
				dev("gpu-2", resourceapi.DeviceTaint{Key: "gpu.tangram.dev/xid", Value: "13", Effect: resourceapi.DeviceTaintEffectNone}),
			}},
	}}}
	v := clusterview.Build(snap, clusterview.Options{})
	if c := findCard(t, v, "n1", "gpu-0"); len(c.Taints) != 0 {
		t.Errorf("gpu-0 taints = %+v, want none", c.Taints)
	}
	c := findCard(t, v, "n1", "gpu-1")
	want := clusterview.TaintView{Key: "gpu.tangram.dev/xid", Value: "79", Effect: "NoSchedule", Since: "2026-11-23T12:00:00Z"}
	if len(c.Taints) != 1 || c.Taints[0] != want {
		t.Errorf("gpu-1 taints = %+v, want %+v", c.Taints, want)
	}
	var out bytes.Buffer
	if err := clusterview.WriteStatus(&out, v, clusterview.Style{}); err != nil {
		t.Fatal(err)
	}
	text := out.String()
	for _, wantLine := range []string{
		"TAINTED gpu-1: gpu.tangram.dev/xid=79:NoSchedule since 2026-11-23T12:00:00Z (no new claims; running pods keep the card)",
		"TAINTED gpu-2: gpu.tangram.dev/xid=13:None (informational; the card is still allocated)",
	} {
		if !strings.Contains(text, wantLine) {
			t.Errorf("status lacks %q:\n%s", wantLine, text)
		}
	}
	if !strings.Contains(text, "gpu-1!") || strings.Contains(text, "gpu-0!") {
		t.Errorf("status must mark tainted cards (and only them) with '!':\n%s", text)
	}
}
