package plugin

import (
	"context"
	"strings"
	"testing"
	"time"

	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/klog/v2/ktesting"

	"github.com/tangram-gpu/tangram/pkg/gpu"
	"github.com/tangram-gpu/tangram/pkg/plugin/xidtaint"
)

func newTestMonitor(t *testing.T) *xidtaint.Monitor {
	t.Helper()
	m, err := xidtaint.NewMonitor(xidtaint.Config{Cards: testGPUs(), Policy: xidtaint.DefaultPolicy(), RecoverAfter: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func statusOf(report kubeletplugin.DeviceHealthReport, device string) kubeletplugin.DeviceHealth {
	for _, d := range report.Devices {
		if d.DeviceName == device {
			return d
		}
	}
	return kubeletplugin.DeviceHealth{}
}

func TestDeviceHealthReport(t *testing.T) {
	now := time.Date(2026, 11, 23, 0, 0, 0, 0, time.UTC)
	devices := []xidtaint.DeviceHealth{
		{Device: "gpu-0", Known: true, Healthy: true},
		{Device: "gpu-1", Known: true, Healthy: false, Message: "XID 79 (NoSchedule)"},
		{Device: "gpu-2", Known: true, Healthy: true, Message: "XID 13 (None)"},
		{Device: "gpu-3", Known: false, Healthy: true, Message: "health events cannot be watched"},
	}
	report := deviceHealthReport("node-a", devices, now)
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
		got := statusOf(report, device)
		if got.Health != status || got.PoolName != "node-a" || !got.LastUpdated.Equal(now) || got.HealthCheckTimeout != deviceHealthCheckTimeout {
			t.Errorf("%s: %+v, want %s in pool node-a at %v", device, got, status, now)
		}
	}
	if got := statusOf(report, "gpu-1").Message; got != "XID 79 (NoSchedule)" {
		t.Errorf("gpu-1 message = %q", got)
	}
}

func TestWatchHealthStatusNotSupportedWithoutMonitor(t *testing.T) {
	h := newHarness(t)
	if err := h.driver.WatchHealthStatus(context.Background(), make(chan kubeletplugin.DeviceHealthReport)); err != kubeletplugin.ErrHealthNotSupported {
		t.Errorf("WatchHealthStatus without a monitor = %v, want ErrHealthNotSupported", err)
	}
}

func TestWatchHealthStatusStream(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	monitor := newTestMonitor(t)
	d := &Driver{cfg: Config{NodeName: testNode, DeviceHealth: monitor}}
	reports := make(chan kubeletplugin.DeviceHealthReport)
	done := make(chan error, 1)
	go func() { done <- d.WatchHealthStatus(ctx, reports) }()

	first := <-reports
	if len(first.Devices) != len(testGPUs()) {
		t.Fatalf("first report covers %d devices, want all %d", len(first.Devices), len(testGPUs()))
	}
	for _, dev := range first.Devices {
		if dev.Health != kubeletplugin.HealthStatusHealthy {
			t.Errorf("first report: %s is %s, want Healthy", dev.DeviceName, dev.Health)
		}
	}
	monitor.Handle(ctx, gpu.HealthEvent{Index: 1, Kind: gpu.HealthEventXID, XID: 79})
	second := <-reports
	if got := statusOf(second, "gpu-1"); got.Health != kubeletplugin.HealthStatusUnhealthy || !strings.Contains(got.Message, "XID 79") {
		t.Errorf("after XID 79: gpu-1 = %+v, want Unhealthy naming XID 79", got)
	}
	if got := statusOf(second, "gpu-0"); got.Health != kubeletplugin.HealthStatusHealthy {
		t.Errorf("after XID 79 on gpu-1: gpu-0 = %+v, want Healthy", got)
	}
	monitor.Handle(ctx, gpu.HealthEvent{Index: 1, Kind: gpu.HealthEventRecovered})
	if got := statusOf(<-reports, "gpu-1"); got.Health != kubeletplugin.HealthStatusHealthy {
		t.Errorf("after recovery: gpu-1 = %+v, want Healthy", got)
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("WatchHealthStatus after cancel = %v, want nil", err)
	}
}
