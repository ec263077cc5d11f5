package xidtaint

import (
	"slices"
	"strings"
	"testing"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
)

func TestForKubelet(t *testing.T) {
	xid79 := resourceapi.DeviceTaint{Key: TaintKeyXID, Value: "79", Effect: resourceapi.DeviceTaintEffectNoSchedule}
	lost := resourceapi.DeviceTaint{Key: TaintKeyGPULost, Value: "true", Effect: resourceapi.DeviceTaintEffectNoExecute}
	xid13 := resourceapi.DeviceTaint{Key: TaintKeyXID, Value: "13", Effect: resourceapi.DeviceTaintEffectNone}
	healthy := func(name string) DeviceHealth {
		return DeviceHealth{Device: name, UUID: "GPU-" + name[:5], Known: true, Healthy: true}
	}
	tainted := func(name, msg string, taints ...resourceapi.DeviceTaint) DeviceHealth {
		dh := healthy(name)
		dh.Taints, dh.Message = taints, msg
		for _, t := range taints {
			dh.Healthy = dh.Healthy && !Blocks(t.Effect)
		}
		return dh
	}
	type want struct {
		healthy bool
		keys    string // taint keys, sorted, comma-separated
		msg     string // the message contains it
	}
	for _, tt := range []struct {
		name    string
		devices []DeviceHealth
		mig     map[int][]string
		want    map[string]want
	}{{
		name:    "no card in MIG mode: as the monitor says",
		devices: []DeviceHealth{healthy("gpu-0"), tainted("gpu-1", "XID 79", xid79)},
		want:    map[string]want{"gpu-0": {healthy: true}, "gpu-1": {keys: TaintKeyXID, msg: "XID 79"}},
	}, {
		name:    "a card-wide XID reaches each held partition, not the card",
		devices: []DeviceHealth{healthy("gpu-0"), tainted("gpu-1", "XID 79", xid79)},
		mig:     map[int][]string{1: {"gpu-1-mig-19-0", "gpu-1-mig-9-4"}},
		want: map[string]want{"gpu-0": {healthy: true},
			"gpu-1-mig-19-0": {keys: TaintKeyXID, msg: "card gpu-1: XID 79"},
			"gpu-1-mig-9-4":  {keys: TaintKeyXID, msg: "card gpu-1: XID 79"}},
	}, {
		name:    "a partition's own XID, with the card's other taint; one not held but tainted is reported too",
		devices: []DeviceHealth{tainted("gpu-1", "lost", lost), tainted("gpu-1-mig-19-0", "XID 13", xid13), tainted("gpu-1-mig-19-1", "XID 13 too", xid13)},
		mig:     map[int][]string{1: {"gpu-1-mig-19-0", "gpu-1-mig-9-4"}},
		want: map[string]want{
			"gpu-1-mig-19-0": {keys: TaintKeyGPULost + "," + TaintKeyXID, msg: "XID 13; card gpu-1: lost"},
			"gpu-1-mig-19-1": {keys: TaintKeyGPULost + "," + TaintKeyXID, msg: "XID 13 too"},
			"gpu-1-mig-9-4":  {keys: TaintKeyGPULost, msg: "card gpu-1: lost"}},
	}, {
		name:    "a partition's own harmless XID on a healthy card",
		devices: []DeviceHealth{healthy("gpu-1"), tainted("gpu-1-mig-19-0", "XID 13", xid13)},
		mig:     map[int][]string{1: {"gpu-1-mig-9-4"}},
		want: map[string]want{
			"gpu-1-mig-19-0": {healthy: true, keys: TaintKeyXID, msg: "XID 13"},
			"gpu-1-mig-9-4":  {healthy: true}},
	}, {
		name:    "a card in MIG mode without partitions: nothing",
		devices: []DeviceHealth{tainted("gpu-1", "XID 79", xid79)},
		mig:     map[int][]string{1: nil},
		want:    map[string]want{},
	}} {
		t.Run(tt.name, func(t *testing.T) {
			got := ForKubelet(tt.devices, tt.mig)
			if len(got) != len(tt.want) {
				t.Errorf("%d devices %+v, want %d", len(got), got, len(tt.want))
			}
			for _, dh := range got {
				w, ok := tt.want[dh.Device]
				if !ok {
					t.Errorf("unexpected device %+v", dh)
					continue
				}
				var keys []string
				for _, taint := range dh.Taints {
					keys = append(keys, taint.Key)
				}
				if dh.Healthy != w.healthy || strings.Join(keys, ",") != w.keys || !strings.Contains(dh.Message, w.msg) || !dh.Known || !slices.IsSortedFunc(keys, strings.Compare) {
					t.Errorf("%s = %+v, want healthy=%v taints %q message containing %q", dh.Device, dh, w.healthy, w.keys, w.msg)
				}
			}
		})
	}
}

// kubeletStatusOf is the device's entry in the report, or none.
func kubeletStatusOf(report kubeletplugin.DeviceHealthReport, device string) kubeletplugin.DeviceHealth {
	for _, d := range report.Devices {
		if d.DeviceName == device {
			return d
		}
	}
	return kubeletplugin.DeviceHealth{}
}

func TestDeviceHealthReport(t *testing.T) {
	now := time.Date(2026, 11, 23, 0, 0, 0, 0, time.UTC)
	devices := []DeviceHealth{
		{Device: "gpu-0", Known: true, Healthy: true},
		{Device: "gpu-1", Known: true, Healthy: false, Message: "XID 79 (NoSchedule)"},
		{Device: "gpu-2", Known: true, Healthy: true, Message: "XID 13 (None)"},
		{Device: "gpu-3", Known: false, Healthy: true, Message: "health events cannot be watched"},
	}
	report := KubeletReport("node-a", devices, now)
	want := map[string]kubeletplugin.HealthStatus{
		"gpu-0": kubeletplugin.HealthStatusHealthy,
		"gpu-1": kubeletplugin.HealthStatusUnhealthy,
		"gpu-2": kubeletplugin.HealthStatusHealthy,
		"gpu-3": kubeletplugin.HealthStatusUnknown,
	}
	if len(report.Devices) != len(want) {
		t.Fatalf("report has %d devices, want %d", len(report.Devices), len(want))
	}
	for device, status := range want {
		got := kubeletStatusOf(report, device)
		if got.Health != status || got.PoolName != "node-a" || !got.LastUpdated.Equal(now) || got.HealthCheckTimeout != KubeletHealthCheckTimeout {
			t.Errorf("%s: %+v, want %s in pool node-a at %v", device, got, status, now)
		}
	}
	if got := kubeletStatusOf(report, "gpu-1").Message; got != "XID 79 (NoSchedule)" {
		t.Errorf("gpu-1 message = %q", got)
	}
}
