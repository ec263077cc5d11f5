package plugin

import (
	"time"

	"github.com/tangram-gpu/tangram/pkg/plugin/xidtaint"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/tangram-gpu/tangram/pkg/metricsregistry"
	"github.com/tangram-gpu/tangram/pkg/plugin/mps"
)

// Metrics are the plugin's Prometheus metrics. Each Driver gets its own
// registry so tests and benchmarks do not share global state; it lists
// every registered metric (metricsregistry.Names), which the dashboard test
// checks the chart's Grafana queries against.
type Metrics struct {
	Registry *metricsregistry.Registry

	prepares         *prometheus.CounterVec
	unprepares       *prometheus.CounterVec
	prepareSeconds   prometheus.Histogram
	unprepareSeconds prometheus.Histogram
	preparedDevices  *prometheus.GaugeVec
	preparedClaims   prometheus.Gauge
	gpuHealth        *prometheus.GaugeVec
	gpuTaints        *prometheus.GaugeVec
}

const (
	resultSuccess = "success"
	resultError   = "error"
	kindWhole     = "whole"
	kindShare     = "share"
)

// NewMetrics registers the plugin's metrics plus the Go and process
// collectors in a fresh registry.
func NewMetrics() *Metrics {
	m := &Metrics{
		Registry: metricsregistry.New(),
		prepares: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "tangram", Subsystem: "kubelet_plugin", Name: "prepare_claims_total",
			Help: "Claims the kubelet asked to prepare, by result (success or error).",
		}, []string{"result"}),
		unprepares: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "tangram", Subsystem: "kubelet_plugin", Name: "unprepare_claims_total",
			Help: "Claims the kubelet asked to unprepare, by result (success or error).",
		}, []string{"result"}),
		prepareSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: "tangram", Subsystem: "kubelet_plugin", Name: "prepare_duration_seconds",
			Help:    "Time to prepare one claim, checkpoint fsync included.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14),
		}),
		unprepareSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: "tangram", Subsystem: "kubelet_plugin", Name: "unprepare_duration_seconds",
			Help:    "Time to unprepare one claim, checkpoint fsync included.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14),
		}),
		preparedDevices: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: "tangram", Subsystem: "kubelet_plugin", Name: "prepared_devices",
			Help: "Device allocation results currently prepared on this node, by kind (whole card or share).",
		}, []string{"kind"}),
		preparedClaims: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: "tangram", Subsystem: "kubelet_plugin", Name: "prepared_claims",
			Help: "Claims currently prepared on this node.",
		}),
		gpuHealth: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "tangram_gpu_health",
			Help: "1 when the card is healthy, 0 when a health taint keeps new claims off it (docs/health.md). Only while the plugin watches the cards' health.",
		}, []string{"node", "device", "uuid"}),
		gpuTaints: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "tangram_gpu_taints",
			Help: "1 for each health taint the plugin has put on a card, by taint key and effect (None, NoSchedule).",
		}, []string{"node", "device", "key", "effect"}),
	}
	m.Registry.MustRegister(m.prepares, m.unprepares, m.prepareSeconds, m.unprepareSeconds,
		m.preparedDevices, m.preparedClaims, m.gpuHealth, m.gpuTaints,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	// Make every series visible from the start, with zero values.
	for _, r := range []string{resultSuccess, resultError} {
		m.prepares.WithLabelValues(r)
		m.unprepares.WithLabelValues(r)
	}
	for _, k := range []string{kindWhole, kindShare} {
		m.preparedDevices.WithLabelValues(k)
	}
	return m
}

func (m *Metrics) observePrepare(start time.Time, err error) {
	m.prepareSeconds.Observe(time.Since(start).Seconds())
	m.prepares.WithLabelValues(result(err)).Inc()
}

func (m *Metrics) observeUnprepare(start time.Time, err error) {
	m.unprepareSeconds.Observe(time.Since(start).Seconds())
	m.unprepares.WithLabelValues(result(err)).Inc()
}

// setPrepared publishes the current totals.
func (m *Metrics) setPrepared(claims, whole, shares int) {
	m.preparedClaims.Set(float64(claims))
	m.preparedDevices.WithLabelValues(kindWhole).Set(float64(whole))
	m.preparedDevices.WithLabelValues(kindShare).Set(float64(shares))
}

func result(err error) string {
	if err != nil {
		return resultError
	}
	return resultSuccess
}

// RegisterMPSStatus exports the MPS daemon's status, read at scrape time:
// whether shares want the daemon, whether it answers, and how many daemon
// operations (start, adopt, stop, compute-mode restores) failed.
func (m *Metrics) RegisterMPSStatus(status func() mps.Status) {
	boolValue := func(b bool) float64 {
		if b {
			return 1
		}
		return 0
	}
	m.Registry.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "tangram_kubelet_plugin_mps_daemon_wanted",
			Help: "1 while shares hold cards (or one waits) and the node's MPS daemon should run.",
		}, func() float64 { return boolValue(status().Wanted) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "tangram_kubelet_plugin_mps_daemon_ready",
			Help: "1 when the node's MPS daemon answered the plugin's last start or check.",
		}, func() float64 { return boolValue(status().Ready) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "tangram_kubelet_plugin_mps_failures_total",
			Help: "Failed MPS daemon starts, adoptions, stops and compute-mode restores (each is retried with back-off).",
		}, func() float64 { return float64(status().Failures) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "tangram_kubelet_plugin_mps_control_unresponsive",
			Help: "1 while the node's MPS control daemon is unresponsive: a control command got no answer within its deadline and none was answered since. Shares wait; whole cards are unaffected.",
		}, func() float64 { return boolValue(!status().ControlUnresponsiveSince.IsZero()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "tangram_kubelet_plugin_mps_control_timeouts_total",
			Help: "MPS control commands that got no answer within their deadline.",
		}, func() float64 { return float64(status().ControlTimeouts) }),
	)
}

// SetDeviceHealth replaces the health and taint gauges with the cards'
// current state: taints that are gone lose their series.
func (m *Metrics) SetDeviceHealth(node string, devices []xidtaint.DeviceHealth) {
	m.gpuHealth.Reset()
	m.gpuTaints.Reset()
	for _, d := range devices {
		value := 0.0
		if d.Healthy {
			value = 1
		}
		m.gpuHealth.WithLabelValues(node, d.Device, d.UUID).Set(value)
		for _, t := range d.Taints {
			m.gpuTaints.WithLabelValues(node, d.Device, t.Key, string(t.Effect)).Set(1)
		}
	}
}
