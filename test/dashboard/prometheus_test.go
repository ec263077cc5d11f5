//go:build e2e

// Package dashboard_test runs every query of the chart's Grafana dashboard
// against a real Prometheus that scrapes Tangram's components
// (hack/local-cluster/prometheus.sh starts one for the local cluster).
package dashboard_test

import (
	"context"
	"flag"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/api"
	promv1 "github.com/prometheus/client_golang/api/prometheus/v1"
	"github.com/prometheus/common/model"

	"github.com/tangram-gpu/tangram/internal/reporoot"
	"github.com/tangram-gpu/tangram/pkg/dashboard"
)

var (
	prometheusURL = flag.String("prometheus-url", "", "Prometheus that scrapes the Tangram components (jobs kubelet-plugin and controller)")
	jobs          = flag.String("jobs", "kubelet-plugin,controller", "scrape jobs that must be up before the queries run")
	rateInterval  = flag.String("rate-interval", "1m", "what $__rate_interval stands for")
	waitFor       = flag.Duration("wait", 90*time.Second, "how long to wait for the jobs to be up with enough samples for rate()")
)

func query(ctx context.Context, t *testing.T, prom promv1.API, q string) (model.Value, error) {
	t.Helper()
	v, warnings, _, err := prom.Query(ctx, q, time.Now())
	if len(warnings) > 0 {
		t.Logf("query %s: warnings %v", q, warnings)
	}
	return v, err
}

// series is how many series (or 1 for a scalar) a result holds.
func series(v model.Value) int {
	switch r := v.(type) {
	case model.Vector:
		return len(r)
	case model.Matrix:
		return len(r)
	case *model.Scalar, *model.String:
		return 1
	}
	return 0
}

// waitForJobs waits until every job's targets are up and have at least
// three samples in the rate interval, so rate() and increase() have data.
func waitForJobs(ctx context.Context, t *testing.T, prom promv1.API) {
	t.Helper()
	var last string
	deadline := time.Now().Add(*waitFor)
	for _, job := range strings.Split(*jobs, ",") {
		q := fmt.Sprintf(`min(count_over_time(up{job=%q}[%s])) >= 3 and min(up{job=%q}) == 1`, job, *rateInterval, job)
		for {
			v, err := query(ctx, t, prom, q)
			if err == nil && series(v) > 0 {
				break
			}
			last = fmt.Sprintf("%v (result %v)", err, v)
			if time.Now().After(deadline) {
				t.Fatalf("scrape job %s is not up with 3 samples after %v: %s; see %s/targets", job, *waitFor, last, *prometheusURL)
			}
			time.Sleep(time.Second)
		}
	}
}

// connect is the client of --prometheus-url, once every job is up with
// samples enough for rate(); the context ends with the test.
func connect(t *testing.T) (context.Context, promv1.API) {
	t.Helper()
	if *prometheusURL == "" {
		t.Fatal("--prometheus-url is required (hack/local-cluster/prometheus.sh check passes it)")
	}
	client, err := api.NewClient(api.Config{Address: *prometheusURL})
	if err != nil {
		t.Fatalf("creating the Prometheus client for %s: %v", *prometheusURL, err)
	}
	promAPI := promv1.NewAPI(client)
	ctx, cancel := context.WithTimeout(context.Background(), *waitFor+2*time.Minute)
	t.Cleanup(cancel)
	waitForJobs(ctx, t, promAPI)
	return ctx, promAPI
}

// repoFile is rel (a slash path from the repository root) in this checkout.
func repoFile(t *testing.T, rel string) string {
	t.Helper()
	root, err := reporoot.Find()
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Join(root, filepath.FromSlash(rel))
}

// Every panel and variable query of the dashboard returns at least one
// series from the live components (a zero value counts: error counters and
// taints are zero on a healthy cluster, but their series must exist).
func TestDashboardQueriesReturnSeries(t *testing.T) {
	queries, err := dashboard.Load(repoFile(t, dashboard.ChartPath))
	if err != nil {
		t.Fatal(err)
	}
	ctx, promAPI := connect(t)
	for _, q := range queries {
		expr := dashboard.Runnable(q.Expr, *rateInterval)
		v, err := query(ctx, t, promAPI, expr)
		if err != nil {
			t.Errorf("%s: Prometheus refused %s: %v", q.Where, expr, err)
			continue
		}
		if n := series(v); n > 0 {
			t.Logf("%s: %d series", q.Where, n)
			continue
		}
		if pending := pendingOnly(q.Expr); pending != "" {
			t.Logf("%s: no series, allowed until %s is merged", q.Where, pending)
			continue
		}
		t.Errorf("%s returned no series: %s", q.Where, expr)
	}
}

// pendingOnly names the not-yet-merged metrics the query reads, if it reads
// one; "" otherwise.
func pendingOnly(expr string) string {
	names, err := dashboard.MetricNames(expr)
	if err != nil {
		return ""
	}
	for _, n := range names {
		if why, ok := dashboard.NotYetExported[n]; ok {
			return n + " (" + why + ")"
		}
	}
	return ""
}

// Every alert of the chart's alerts file is a query the live Prometheus
// runs: an alert that does not parse, or reads a label the series lack in
// a way Prometheus refuses, fails here. Healthy components raise none, so
// an empty result is what is expected.
func TestAlertQueriesRun(t *testing.T) {
	alerts, err := dashboard.LoadAlerts(repoFile(t, dashboard.AlertsPath))
	if err != nil {
		t.Fatal(err)
	}
	ctx, promAPI := connect(t)
	for _, a := range alerts {
		v, err := query(ctx, t, promAPI, a.Expr)
		if err != nil {
			t.Errorf("%s: Prometheus refused %s: %v", a.Where, a.Expr, err)
			continue
		}
		t.Logf("%s: %d series firing-to-be", a.Where, series(v))
	}
}
