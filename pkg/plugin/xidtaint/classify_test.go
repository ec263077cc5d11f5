package xidtaint

import (
	"testing"

	resourceapi "k8s.io/api/resource/v1"

	"github.com/tangram-gpu/tangram/pkg/gpu"
)

func TestClassify(t *testing.T) {
	custom := Policy{InformationalXIDs: []uint64{79}, IgnoredXIDs: []uint64{13}}
	tests := []struct {
		name   string
		policy Policy
		event  gpu.HealthEvent
		want   Taint
		wantOK bool
	}{
		{"fatal XID 79 (fallen off the bus)", DefaultPolicy(), gpu.HealthEvent{Kind: gpu.HealthEventXID, XID: 79},
			Taint{Key: "gpu.tangram.dev/xid", Value: "79", Effect: resourceapi.DeviceTaintEffectNoSchedule}, true},
		{"double-bit ECC XID 48", DefaultPolicy(), gpu.HealthEvent{Kind: gpu.HealthEventXID, XID: 48},
			Taint{Key: "gpu.tangram.dev/xid", Value: "48", Effect: resourceapi.DeviceTaintEffectNoSchedule}, true},
		{"unlisted XID is fatal", DefaultPolicy(), gpu.HealthEvent{Kind: gpu.HealthEventXID, XID: 4242},
			Taint{Key: "gpu.tangram.dev/xid", Value: "4242", Effect: resourceapi.DeviceTaintEffectNoSchedule}, true},
		{"application XID 13 is informational", DefaultPolicy(), gpu.HealthEvent{Kind: gpu.HealthEventXID, XID: 13},
			Taint{Key: "gpu.tangram.dev/xid", Value: "13", Effect: resourceapi.DeviceTaintEffectNone}, true},
		{"application XID 31 is informational", DefaultPolicy(), gpu.HealthEvent{Kind: gpu.HealthEventXID, XID: 31},
			Taint{Key: "gpu.tangram.dev/xid", Value: "31", Effect: resourceapi.DeviceTaintEffectNone}, true},
		{"GPU lost", DefaultPolicy(), gpu.HealthEvent{Kind: gpu.HealthEventGPULost},
			Taint{Key: "gpu.tangram.dev/gpu-lost", Value: "true", Effect: resourceapi.DeviceTaintEffectNoSchedule}, true},
		{"recovery adds no taint", DefaultPolicy(), gpu.HealthEvent{Kind: gpu.HealthEventRecovered}, Taint{}, false},
		{"configured informational XID", custom, gpu.HealthEvent{Kind: gpu.HealthEventXID, XID: 79},
			Taint{Key: "gpu.tangram.dev/xid", Value: "79", Effect: resourceapi.DeviceTaintEffectNone}, true},
		{"configured ignored XID", custom, gpu.HealthEvent{Kind: gpu.HealthEventXID, XID: 13}, Taint{}, false},
		{"a custom table without 31 makes it fatal", custom, gpu.HealthEvent{Kind: gpu.HealthEventXID, XID: 31},
			Taint{Key: "gpu.tangram.dev/xid", Value: "31", Effect: resourceapi.DeviceTaintEffectNoSchedule}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := tt.policy.Classify(tt.event)
			if got != tt.want || ok != tt.wantOK {
				t.Errorf("Classify(%+v) = %+v, %v; want %+v, %v", tt.event, got, ok, tt.want, tt.wantOK)
			}
		})
	}
}

func TestPolicyValidate(t *testing.T) {
	if err := (Policy{InformationalXIDs: []uint64{13}, IgnoredXIDs: []uint64{13}}).Validate(); err == nil {
		t.Error("an XID both informational and ignored was accepted")
	}
	if err := DefaultPolicy().Validate(); err != nil {
		t.Errorf("default policy: %v", err)
	}
}

func TestParseXIDList(t *testing.T) {
	tests := []struct {
		in      string
		want    []uint64
		wantErr bool
	}{
		{"", nil, false},
		{"13", []uint64{13}, false},
		{" 13, 31 ,43", []uint64{13, 31, 43}, false},
		{"13,,31", []uint64{13, 31}, false},
		{"13,x", nil, true},
		{"0", nil, true},
		{"-1", nil, true},
	}
	for _, tt := range tests {
		got, err := ParseXIDList(tt.in)
		if (err != nil) != tt.wantErr {
			t.Errorf("ParseXIDList(%q) error = %v, want error %v", tt.in, err, tt.wantErr)
			continue
		}
		if len(got) != len(tt.want) {
			t.Errorf("ParseXIDList(%q) = %v, want %v", tt.in, got, tt.want)
			continue
		}
		for i := range got {
			if got[i] != tt.want[i] {
				t.Errorf("ParseXIDList(%q) = %v, want %v", tt.in, got, tt.want)
			}
		}
	}
}
