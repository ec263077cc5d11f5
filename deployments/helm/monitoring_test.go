//go:build helm

package helm

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// The Prometheus Operator's CRDs, as a cluster with kube-prometheus serves them.
var operatorAPIs = []string{
	"--api-versions=monitoring.coreos.com/v1/ServiceMonitor",
	"--api-versions=monitoring.coreos.com/v1/PodMonitor",
}

func TestMonitoring(t *testing.T) {
	all := []string{"monitoring.enabled=true", "controller.enabled=true", "scheduler.enabled=true"}
	for _, tc := range []struct {
		name            string
		sets            []string
		wantServices    []string
		wantPodMonitors []string
		wantSvcMonitors []string
		wantDashboard   bool
	}{{
		name: "off by default",
		sets: append([]string{"controller.enabled=true", "scheduler.enabled=true"}, operatorAPIs...),
	}, {
		name:          "no operator CRDs: Services, annotations and dashboard only",
		sets:          all,
		wantServices:  []string{"tangram-controller-metrics", "tangram-scheduler-metrics"},
		wantDashboard: true,
	}, {
		name:            "operator CRDs: a PodMonitor for the plugin, ServiceMonitors for the controller and scheduler",
		sets:            append(slices.Clone(all), operatorAPIs...),
		wantServices:    []string{"tangram-controller-metrics", "tangram-scheduler-metrics"},
		wantPodMonitors: []string{"tangram-kubelet-plugin"},
		wantSvcMonitors: []string{"tangram-controller", "tangram-scheduler"},
		wantDashboard:   true,
	}, {
		name:            "only the plugin installed",
		sets:            append([]string{"monitoring.enabled=true", "monitoring.dashboard.enabled=false"}, operatorAPIs...),
		wantPodMonitors: []string{"tangram-kubelet-plugin"},
	}, {
		name:         "plugin and controller metrics off: only the scheduler's secure port is monitored",
		sets:         append(slices.Clone(all), append([]string{"metrics.enabled=false", "monitoring.dashboard.enabled=false"}, operatorAPIs...)...),
		wantServices: []string{"tangram-scheduler-metrics"}, wantSvcMonitors: []string{"tangram-scheduler"},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			objs := render(t, tc.sets...)
			for kind, want := range map[string][]string{
				"PodMonitor": tc.wantPodMonitors, "ServiceMonitor": tc.wantSvcMonitors,
			} {
				var got []string
				for name := range objs[kind] {
					got = append(got, name)
				}
				slices.Sort(got)
				if !slices.Equal(got, want) {
					t.Errorf("%ss %q, want %q", kind, got, want)
				}
			}
			for _, svc := range []string{"tangram-controller-metrics", "tangram-scheduler-metrics"} {
				if got, want := objs.has("Service", svc), slices.Contains(tc.wantServices, svc); got != want {
					t.Errorf("Service %s rendered: %v, want %v", svc, got, want)
				}
			}
			if got := objs.has("ConfigMap", "tangram-dashboard"); got != tc.wantDashboard {
				t.Errorf("dashboard ConfigMap rendered: %v, want %v", got, tc.wantDashboard)
			}
		})
	}
}

// Each monitor selects its component's pods through a port they declare.
func TestMonitorsSelectTheirComponents(t *testing.T) {
	objs := render(t, append([]string{"monitoring.enabled=true", "controller.enabled=true", "scheduler.enabled=true",
		`monitoring.labels@json={"release":"kube-prometheus-stack"}`, "monitoring.interval=15s"}, operatorAPIs...)...)
	ds := objs.get(t, "DaemonSet", "tangram-kubelet-plugin").(*appsv1.DaemonSet)
	controller := objs.get(t, "Deployment", "tangram-controller").(*appsv1.Deployment)
	scheduler := objs.get(t, "Deployment", "tangram-scheduler").(*appsv1.Deployment)

	for _, tc := range []struct {
		kind, name, endpoints string
		pod                   corev1.PodTemplateSpec
		wantScheme            string
		wantNodeRelabel       bool
	}{
		{"PodMonitor", "tangram-kubelet-plugin", "podMetricsEndpoints", ds.Spec.Template, "", true},
		{"ServiceMonitor", "tangram-controller", "endpoints", controller.Spec.Template, "", false},
		{"ServiceMonitor", "tangram-scheduler", "endpoints", scheduler.Spec.Template, "https", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := objs.get(t, tc.kind, tc.name).(*unstructured.Unstructured)
			if got := m.GetLabels()["release"]; got != "kube-prometheus-stack" {
				t.Errorf("label release = %q, want monitoring.labels' kube-prometheus-stack", got)
			}
			sel, _, _ := unstructured.NestedStringMap(m.Object, "spec", "selector", "matchLabels")
			for k, v := range sel {
				if tc.pod.Labels[k] != v {
					t.Errorf("selector %s=%s does not match the pod labels %v", k, v, tc.pod.Labels)
				}
			}
			if len(sel) == 0 {
				t.Error("empty selector")
			}
			eps, _, _ := unstructured.NestedSlice(m.Object, "spec", tc.endpoints)
			if len(eps) != 1 {
				t.Fatalf("%d endpoints, want 1", len(eps))
			}
			ep := eps[0].(map[string]any)
			port, _ := ep["port"].(string)
			if !slices.ContainsFunc(tc.pod.Spec.Containers[0].Ports, func(p corev1.ContainerPort) bool { return p.Name == port }) {
				t.Errorf("endpoint port %q is not a port of the pod", port)
			}
			if ep["interval"] != "15s" {
				t.Errorf("interval %v, want 15s", ep["interval"])
			}
			if scheme, _ := ep["scheme"].(string); scheme != tc.wantScheme {
				t.Errorf("scheme %q, want %q", scheme, tc.wantScheme)
			}
			_, relabels := ep["relabelings"]
			if relabels != tc.wantNodeRelabel {
				t.Errorf("node relabeling present: %v, want %v", relabels, tc.wantNodeRelabel)
			}
		})
	}
	// The scheduler carries prometheus.io annotations only with monitoring on
	// (its HTTPS endpoint needs a token a scraper must be set up for).
	if got := scheduler.Spec.Template.Annotations["prometheus.io/scheme"]; got != "https" {
		t.Errorf("scheduler prometheus.io/scheme = %q, want https", got)
	}
	off := render(t, "scheduler.enabled=true")
	if _, ok := off.get(t, "Deployment", "tangram-scheduler").(*appsv1.Deployment).Spec.Template.Annotations["prometheus.io/scrape"]; ok {
		t.Error("scheduler has prometheus.io/scrape with monitoring off")
	}
}

// The scheduler's ServiceMonitor authenticates with Prometheus' token file,
// or with a Secret where the operator refuses files.
func TestSchedulerMonitorToken(t *testing.T) {
	for _, tc := range []struct {
		name      string
		sets      []string
		wantFile  bool
		wantCreds map[string]any
	}{
		{name: "token file by default", wantFile: true},
		{name: "token from a Secret", sets: []string{"monitoring.schedulerToken.secretName=prom-token", "monitoring.schedulerToken.key=t"},
			wantCreds: map[string]any{"name": "prom-token", "key": "t"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			objs := render(t, append(append([]string{"monitoring.enabled=true", "scheduler.enabled=true"}, tc.sets...), operatorAPIs...)...)
			m := objs.get(t, "ServiceMonitor", "tangram-scheduler").(*unstructured.Unstructured)
			eps, _, _ := unstructured.NestedSlice(m.Object, "spec", "endpoints")
			ep := eps[0].(map[string]any)
			if _, got := ep["bearerTokenFile"]; got != tc.wantFile {
				t.Errorf("bearerTokenFile present: %v, want %v", got, tc.wantFile)
			}
			creds, _, _ := unstructured.NestedMap(ep, "authorization", "credentials")
			if tc.wantCreds == nil && creds != nil || tc.wantCreds != nil && (creds["name"] != tc.wantCreds["name"] || creds["key"] != tc.wantCreds["key"]) {
				t.Errorf("authorization.credentials %v, want %v", creds, tc.wantCreds)
			}
		})
	}
}

// The ConfigMap carries the chart's dashboard file unchanged, with the
// sidecar's label and where the values put it.
func TestDashboardConfigMap(t *testing.T) {
	file, err := os.ReadFile(filepath.Join(chartDir, "dashboards", "tangram.json"))
	if err != nil {
		t.Fatal(err)
	}
	objs := render(t, "monitoring.enabled=true", "monitoring.dashboard.namespace=monitoring",
		`monitoring.dashboard.labels@json={"grafana_dashboard":"1","team":"gpu"}`,
		`monitoring.dashboard.annotations@json={"grafana_folder":"GPUs"}`)
	cm := objs.get(t, "ConfigMap", "tangram-dashboard").(*corev1.ConfigMap)
	if cm.Namespace != "monitoring" {
		t.Errorf("namespace %q, want monitoring", cm.Namespace)
	}
	if cm.Labels["grafana_dashboard"] != "1" || cm.Labels["team"] != "gpu" {
		t.Errorf("labels %v, want grafana_dashboard=1 and team=gpu", cm.Labels)
	}
	if cm.Annotations["grafana_folder"] != "GPUs" {
		t.Errorf("annotations %v, want grafana_folder=GPUs", cm.Annotations)
	}
	var got, want any
	if err := json.Unmarshal([]byte(cm.Data["tangram.json"]), &got); err != nil {
		t.Fatalf("dashboard in the ConfigMap is not JSON: %v", err)
	}
	if err := json.Unmarshal(file, &want); err != nil {
		t.Fatalf("dashboards/tangram.json is not JSON: %v", err)
	}
	gj, _ := json.Marshal(got)
	wj, _ := json.Marshal(want)
	if string(gj) != string(wj) {
		t.Error("the ConfigMap's dashboard differs from dashboards/tangram.json")
	}
}

// TestAlerts: the PrometheusRule of the alerts on what runs on the GPUs,
// its groups exactly the chart's alerts file, only where the cluster
// serves PrometheusRule and only with monitoring.alerts.enabled.
func TestAlerts(t *testing.T) {
	const ruleAPI = "--api-versions=monitoring.coreos.com/v1/PrometheusRule"
	for _, tc := range []struct {
		name string
		sets []string
		want bool
	}{
		{name: "monitoring on, the CRD served", sets: []string{"monitoring.enabled=true", ruleAPI}, want: true},
		{name: "no PrometheusRule CRD", sets: []string{"monitoring.enabled=true"}},
		{name: "alerts off", sets: []string{"monitoring.enabled=true", "monitoring.alerts.enabled=false", ruleAPI}},
		{name: "monitoring off", sets: []string{ruleAPI}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			objs := render(t, tc.sets...)
			rules := objs["PrometheusRule"]
			if got := len(rules) == 1; got != tc.want {
				t.Fatalf("%d PrometheusRules, want one: %t", len(rules), tc.want)
			}
			if !tc.want {
				return
			}
			rule := objs.get(t, "PrometheusRule", "tangram-gpu-usage").(*unstructured.Unstructured)
			groups, _, _ := unstructured.NestedSlice(rule.Object, "spec", "groups")
			var alerts []string
			for _, g := range groups {
				rs, _, _ := unstructured.NestedSlice(g.(map[string]any), "rules")
				for _, r := range rs {
					name, _, _ := unstructured.NestedString(r.(map[string]any), "alert")
					desc, _, _ := unstructured.NestedString(r.(map[string]any), "annotations", "description")
					if !strings.Contains(desc, "{{ $labels.node }}") {
						t.Errorf("alert %s: description %q lost its template", name, desc)
					}
					alerts = append(alerts, name)
				}
			}
			if want := []string{"TangramGPUShareOverMemory", "TangramGPUProcessWithoutClaim", "TangramGPUUsageNotRead"}; !slices.Equal(alerts, want) {
				t.Errorf("alerts %v, want %v", alerts, want)
			}
		})
	}
}
