//go:build cgo

package nvmlgpu

import (
	"context"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/utils/ptr"

	mocknvml "github.com/tangram-gpu/tangram/hack/mock-nvml"
	"github.com/tangram-gpu/tangram/pkg/gpu"
	"github.com/tangram-gpu/tangram/pkg/gpu/fakegpu"
)

// TestWatchHealthOverMockLibrary drives the real event path: go-nvml loads
// the C mock, which reports the XIDs and lost cards appended to its events
// file.
func TestWatchHealthOverMockLibrary(t *testing.T) {
	p, err := fakegpu.BuiltinProfile("pcie-l4")
	if err != nil {
		t.Fatal(err)
	}
	state := mocknvml.UseProfile(t, p, "node")
	lib := mockLibraryPath(t)

	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	src, done, err := Open(ctx, lib)
	if err != nil {
		t.Fatal(err)
	}
	defer done()
	events := make(chan gpu.HealthEvent, 4)
	watchErr := make(chan error, 1)
	go func() { watchErr <- src.(gpu.HealthWatcher).WatchHealth(ctx, events) }()
	// The event set sees only lines appended after it exists.
	time.Sleep(200 * time.Millisecond)
	if err := state.TriggerXID(1, 79); err != nil {
		t.Fatal(err)
	}
	if err := state.LoseGPU(0); err != nil {
		t.Fatal(err)
	}
	want := []gpu.HealthEvent{{Index: 1, Kind: gpu.HealthEventXID, XID: 79}, {Index: 0, Kind: gpu.HealthEventGPULost}}
	for _, w := range want {
		select {
		case got := <-events:
			if got != w {
				t.Errorf("event = %+v, want %+v", got, w)
			}
		case err := <-watchErr:
			t.Fatalf("WatchHealth ended: %v", err)
		case <-time.After(10 * time.Second):
			t.Fatalf("no event, want %+v", w)
		}
	}
	cancel()
	if err := <-watchErr; err != nil {
		t.Errorf("WatchHealth after cancel: %v", err)
	}
}

func TestHealthEventOf(t *testing.T) {
	tests := []struct {
		data   nvml.EventData
		want   gpu.HealthEvent
		wantOK bool
	}{
		{nvml.EventData{EventType: nvml.EventTypeXidCriticalError, EventData: 48, GpuInstanceId: allInstances, ComputeInstanceId: allInstances},
			gpu.HealthEvent{Index: 2, Kind: gpu.HealthEventXID, XID: 48}, true},
		// An XID in one MIG instance (nvml.h: the event's instance IDs).
		{nvml.EventData{EventType: nvml.EventTypeXidCriticalError, EventData: 43, GpuInstanceId: 1, ComputeInstanceId: 0},
			gpu.HealthEvent{Index: 2, Kind: gpu.HealthEventXID, XID: 43, GPUInstance: ptr.To(1), ComputeInstance: ptr.To(0)}, true},
		{nvml.EventData{EventType: nvml.EventTypeXidCriticalError, EventData: 43, GpuInstanceId: 2, ComputeInstanceId: allInstances},
			gpu.HealthEvent{Index: 2, Kind: gpu.HealthEventXID, XID: 43, GPUInstance: ptr.To(2)}, true},
		{nvml.EventData{EventType: nvml.EventTypeGpuRecoveryAction, EventData: uint64(nvml.GPU_RECOVERY_ACTION_NONE)},
			gpu.HealthEvent{Index: 2, Kind: gpu.HealthEventRecovered, Message: "NVML: no recovery action pending"}, true},
		{nvml.EventData{EventType: nvml.EventTypeGpuRecoveryAction, EventData: uint64(nvml.GPU_RECOVERY_ACTION_GPU_RESET)}, gpu.HealthEvent{}, false},
		{nvml.EventData{EventType: nvml.EventTypeSingleBitEccError}, gpu.HealthEvent{}, false},
	}
	for _, tt := range tests {
		got, ok := healthEventOf(2, tt.data)
		if !reflect.DeepEqual(got, tt.want) || ok != tt.wantOK {
			t.Errorf("healthEventOf(%+v) = %+v, %v; want %+v, %v", tt.data, got, ok, tt.want, tt.wantOK)
		}
	}
}

// TestProbeHealthOverMockLibrary: the registration gpu-check reports is the
// one WatchHealth makes, card by card, on the C mock.
func TestProbeHealthOverMockLibrary(t *testing.T) {
	p, err := fakegpu.BuiltinProfile("pcie-l4")
	if err != nil {
		t.Fatal(err)
	}
	mocknvml.UseProfile(t, p, "node")
	_, ctx := ktesting.NewTestContext(t)
	src, done, err := Open(ctx, mockLibraryPath(t))
	if err != nil {
		t.Fatal(err)
	}
	defer done()
	regs, err := src.(gpu.HealthProber).ProbeHealth(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(regs) != len(p.GPUs) {
		t.Fatalf("%d registrations, want one per card (%d): %+v", len(regs), len(p.GPUs), regs)
	}
	for i, r := range regs {
		if r.Index != i || r.UUID == "" || r.Error != "" || !slices.Contains(r.Registered, EventNameXidCriticalError) {
			t.Errorf("card %d: %+v, want it registered for %s", i, r, EventNameXidCriticalError)
		}
	}
}
