package dashboard_test

import (
	"path/filepath"
	"sort"
	"testing"

	dto "github.com/prometheus/client_model/go"
	"k8s.io/klog/v2"

	tangramv1alpha1 "github.com/tangram-gpu/tangram/api/tangram/v1alpha1"
	"github.com/tangram-gpu/tangram/internal/reporoot"
	"github.com/tangram-gpu/tangram/pkg/cluster"
	"github.com/tangram-gpu/tangram/pkg/controller/metrics"
	"github.com/tangram-gpu/tangram/pkg/dashboard"
	"github.com/tangram-gpu/tangram/pkg/metricsregistry"
	"github.com/tangram-gpu/tangram/pkg/plugin"
	"github.com/tangram-gpu/tangram/pkg/plugin/mps"
	"github.com/tangram-gpu/tangram/pkg/plugin/usage"
)

// repoFile is rel (a slash path from the repository root) in this checkout.
func repoFile(t *testing.T, rel string) string {
	t.Helper()
	root, err := reporoot.Find()
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Join(root, filepath.FromSlash(rel))
}

type emptyCluster struct{}

func (emptyCluster) Snapshot() (*cluster.Snapshot, error) { return &cluster.Snapshot{}, nil }

// exported collects every metric name the components register, as
// Prometheus stores them (a histogram's _bucket, _sum and _count).
func exported(t *testing.T) map[string]string {
	t.Helper()
	names := map[string]string{}
	add := func(component string, reg *metricsregistry.Registry) {
		for _, n := range metricsregistry.Names(reg) {
			names[n] = component
		}
		families, err := reg.Gather()
		if err != nil {
			t.Fatalf("gathering the %s metrics: %v", component, err)
		}
		for _, f := range families {
			var suffixes []string
			switch f.GetType() {
			case dto.MetricType_HISTOGRAM, dto.MetricType_GAUGE_HISTOGRAM:
				suffixes = []string{"_bucket", "_sum", "_count"}
			case dto.MetricType_SUMMARY:
				suffixes = []string{"_sum", "_count"}
			}
			for _, s := range suffixes {
				names[f.GetName()+s] = component
			}
		}
	}

	// The plugin as cmd/dra-kubelet-plugin runs it with sharing enabled.
	pluginMetrics := plugin.NewMetrics()
	pluginMetrics.RegisterMPSStatus(func() mps.Status { return mps.Status{} })
	if _, err := usage.NewMetrics(pluginMetrics.Registry, "node", nil); err != nil {
		t.Fatalf("registering the GPU usage metrics: %v", err)
	}
	add("kubelet plugin", pluginMetrics.Registry)

	// The controller with the GpuGang controller on.
	controller, _ := metrics.NewRegistry(emptyCluster{}, func() ([]*tangramv1alpha1.GpuGang, error) { return nil, nil }, klog.Background())
	add("controller", controller)
	return names
}

// Every metric a dashboard query reads is one a Tangram component exports:
// a renamed metric or a typo in a panel fails here, not at 3 a.m.
func TestDashboardReadsOnlyExportedMetrics(t *testing.T) {
	queries, err := dashboard.Load(repoFile(t, dashboard.ChartPath))
	if err != nil {
		t.Fatal(err)
	}
	if len(queries) < 10 {
		t.Fatalf("only %d queries in the dashboard", len(queries))
	}
	have := exported(t)
	read := map[string]bool{}
	for _, q := range queries {
		names, err := dashboard.MetricNames(q.Expr)
		if err != nil {
			t.Errorf("%s: %v", q.Where, err)
			continue
		}
		for _, n := range names {
			read[n] = true
			if _, ok := have[n]; ok {
				continue
			}
			if _, pending := dashboard.NotYetExported[n]; pending {
				continue
			}
			t.Errorf("%s reads %s, which no Tangram component exports (query %s)", q.Where, n, q.Expr)
		}
	}
	for n, why := range dashboard.NotYetExported {
		if c, ok := have[n]; ok {
			t.Errorf("%s is exported by the %s now: remove it from dashboard.NotYetExported (%s)", n, c, why)
		}
		if !read[n] {
			t.Errorf("%s is in dashboard.NotYetExported but no query reads it: remove it", n)
		}
	}
	var list []string
	for n := range read {
		list = append(list, n)
	}
	sort.Strings(list)
	t.Logf("the dashboard reads %d metrics: %v", len(list), list)
}

// Every metric an alert reads is one the kubelet plugin exports: an alert
// on a renamed metric would never fire.
func TestAlertsReadOnlyExportedMetrics(t *testing.T) {
	alerts, err := dashboard.LoadAlerts(repoFile(t, dashboard.AlertsPath))
	if err != nil {
		t.Fatal(err)
	}
	have := exported(t)
	for _, a := range alerts {
		names, err := dashboard.MetricNames(a.Expr)
		if err != nil {
			t.Errorf("%s: %v", a.Where, err)
			continue
		}
		if len(names) == 0 {
			t.Errorf("%s reads no metric: %s", a.Where, a.Expr)
		}
		for _, n := range names {
			if _, ok := have[n]; !ok {
				t.Errorf("%s reads %s, which no Tangram component exports (query %s)", a.Where, n, a.Expr)
			}
		}
	}
}
