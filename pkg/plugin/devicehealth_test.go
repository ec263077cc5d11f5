package plugin

import (
	"context"
	"strings"
	"testing"

	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/klog/v2/ktesting"

	"github.com/tangram-gpu/tangram/pkg/device"
	"github.com/tangram-gpu/tangram/pkg/gpu"
	"github.com/tangram-gpu/tangram/pkg/plugin/plugintest"
	"github.com/tangram-gpu/tangram/pkg/plugin/xidtaint"
)

func newTestMonitor(t *testing.T) *xidtaint.Monitor { return plugintest.Monitor(t) }

func statusOf(report kubeletplugin.DeviceHealthReport, device string) kubeletplugin.DeviceHealth {
	for _, d := range report.Devices {
		if d.DeviceName == device {
			return d
		}
	}
	return kubeletplugin.DeviceHealth{}
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
	d := &Driver{cfg: Config{Inventory: Inventory{NodeName: testNode}, DeviceHealth: monitor}, cards: CardsByDevice(testGPUs())}
	reports := make(chan kubeletplugin.DeviceHealthReport)
	done := make(chan error, 1)
	go func() { done <- d.WatchHealthStatus(ctx, reports) }()

	first := <-reports
	// The card in MIG mode is not published whole, and no claim holds a
	// partition of it.
	if len(first.Devices) != len(testGPUs())-1 || statusOf(first, "gpu-3").DeviceName != "" {
		t.Fatalf("first report covers %+v, want the %d cards not in MIG mode", first.Devices, len(testGPUs())-1)
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

// TestWatchHealthStatusMIGPartitions: a card in MIG mode is reported to
// the kubelet as the partitions claims hold on it, never as gpu-N (not
// published): an XID of the whole card makes each held partition
// Unhealthy, an untainted held partition is reported Healthy.
func TestWatchHealthStatusMIGPartitions(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	h := newHarness(t)
	claim := migClaim("m")
	if err := h.prepare(claim)[claim.UID].Err; err != nil {
		t.Fatal(err)
	}
	monitor := newTestMonitor(t)
	h.driver.cfg.DeviceHealth = monitor
	reports := make(chan kubeletplugin.DeviceHealthReport)
	go func() { _ = h.driver.WatchHealthStatus(ctx, reports) }()
	small, large := device.MIGDeviceName(migCard, 19, 0), device.MIGDeviceName(migCard, 9, 4)

	first := <-reports
	for _, name := range []string{small, large} {
		if got := statusOf(first, name); got.Health != kubeletplugin.HealthStatusHealthy {
			t.Errorf("first report: %s = %+v, want Healthy", name, got)
		}
	}
	monitor.Handle(ctx, gpu.HealthEvent{Index: migCard, Kind: gpu.HealthEventXID, XID: 79})
	second := <-reports
	if got := statusOf(second, device.CardDeviceName(migCard)); got.DeviceName != "" {
		t.Errorf("the card in MIG mode reported whole: %+v", got)
	}
	for _, name := range []string{small, large} {
		if got := statusOf(second, name); got.Health != kubeletplugin.HealthStatusUnhealthy || !strings.Contains(got.Message, "XID 79") {
			t.Errorf("after a card-wide XID 79: %s = %+v, want Unhealthy naming XID 79", name, got)
		}
	}
}
