package plugin

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	resourceapi "k8s.io/api/resource/v1"

	"github.com/tangram-gpu/tangram/pkg/plugin/xidtaint"
)

// TestSetDeviceHealth: tangram_gpu_health is 0 while a health taint keeps
// claims off a card and 1 again after, and tangram_gpu_taints loses the
// series of a taint that is gone.
func TestSetDeviceHealth(t *testing.T) {
	m := NewMetrics()
	xid := resourceapi.DeviceTaint{Key: xidtaint.TaintKeyXID, Value: "79", Effect: resourceapi.DeviceTaintEffectNoSchedule}
	m.SetDeviceHealth(testNode, []xidtaint.DeviceHealth{
		{Device: "gpu-0", UUID: "GPU-0", Known: true, Healthy: true},
		{Device: "gpu-1", UUID: "GPU-1", Known: true, Taints: []resourceapi.DeviceTaint{xid}},
	})
	if got := testutil.ToFloat64(m.gpuHealth.WithLabelValues(testNode, "gpu-0", "GPU-0")); got != 1 {
		t.Errorf("tangram_gpu_health of gpu-0 = %v, want 1", got)
	}
	if got := testutil.ToFloat64(m.gpuHealth.WithLabelValues(testNode, "gpu-1", "GPU-1")); got != 0 {
		t.Errorf("tangram_gpu_health of gpu-1 = %v, want 0", got)
	}
	if got := testutil.ToFloat64(m.gpuTaints.WithLabelValues(testNode, "gpu-1", xidtaint.TaintKeyXID, "NoSchedule")); got != 1 {
		t.Errorf("tangram_gpu_taints of gpu-1 = %v, want 1", got)
	}

	m.SetDeviceHealth(testNode, []xidtaint.DeviceHealth{
		{Device: "gpu-0", UUID: "GPU-0", Known: true, Healthy: true},
		{Device: "gpu-1", UUID: "GPU-1", Known: true, Healthy: true},
	})
	if got := testutil.ToFloat64(m.gpuHealth.WithLabelValues(testNode, "gpu-1", "GPU-1")); got != 1 {
		t.Errorf("tangram_gpu_health of gpu-1 after recovery = %v, want 1", got)
	}
	if got := testutil.CollectAndCount(m.gpuTaints); got != 0 {
		t.Errorf("tangram_gpu_taints has %d series after recovery, want 0", got)
	}
}
