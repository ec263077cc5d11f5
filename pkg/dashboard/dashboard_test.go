package dashboard

import (
	"slices"
	"strings"
	"testing"
)

func TestMetricNames(t *testing.T) {
	for _, tc := range []struct {
		expr    string
		want    []string
		wantErr string
	}{
		{expr: "tangram_pending_claims", want: []string{"tangram_pending_claims"}},
		{expr: `max by (node, device) (tangram_gpu_shares{node=~"$node"})`, want: []string{"tangram_gpu_shares"}},
		{expr: `max by (node, device) (a_bytes{node=~"$node"}) / max by (node, device) (b_bytes{node=~"$node"})`, want: []string{"a_bytes", "b_bytes"}},
		{expr: `histogram_quantile(0.99, sum by (node, le) (rate(x_seconds_bucket{node=~"$node"}[$__rate_interval])))`, want: []string{"x_seconds_bucket"}},
		{expr: `sum by (node) (increase(c_total{result="error",node=~"$node"}[5m] offset 1h))`, want: []string{"c_total"}},
		{expr: `count(count by (node, device) (t{effect=~"NoSchedule|NoExecute"} > 0)) or vector(0)`, want: []string{"t"}},
		{expr: `sum(1 - h) * 1e3`, want: []string{"h"}},
		{expr: `a / on (node) group_left (zone) b unless ignoring(x) c`, want: []string{"a", "b", "c"}},
		{expr: `sum without (instance) (a) > bool 0`, want: []string{"a"}},
		{expr: `a{l="with } brace and (paren"}`, want: []string{"a"}},
		{expr: `label_values(tangram_node_gpus, node)`, want: []string{"tangram_node_gpus"}},
		{expr: `label_values(tangram_node_gpus{zone="a"}, node)`, want: []string{"tangram_node_gpus"}},
		{expr: "vector(1)", wantErr: "no metric"},
		{expr: "sum(a", wantErr: "unbalanced"},
	} {
		t.Run(tc.expr, func(t *testing.T) {
			got, err := MetricNames(tc.expr)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("got %q, want %q", got, tc.want)
			}
		})
	}
}

func TestParse(t *testing.T) {
	data := []byte(`{
  "panels": [
    {"type": "row", "title": "collapsed", "panels": [
      {"title": "inner", "targets": [{"refId": "A", "expr": "a"}]}
    ]},
    {"title": "outer", "targets": [{"refId": "A", "expr": "b"}, {"refId": "B", "expr": "c"}]},
    {"title": "text panel"}
  ],
  "templating": {"list": [
    {"name": "datasource", "type": "datasource", "query": "prometheus"},
    {"name": "node", "type": "query", "query": {"query": "label_values(d, node)"}},
    {"name": "old", "type": "query", "query": "label_values(e, x)"}
  ]}
}`)
	got, err := Parse(data)
	if err != nil {
		t.Fatal(err)
	}
	var where, exprs []string
	for _, q := range got {
		where = append(where, q.Where)
		exprs = append(exprs, q.Expr)
	}
	if want := []string{"a", "b", "c", "label_values(d, node)", "label_values(e, x)"}; !slices.Equal(exprs, want) {
		t.Errorf("exprs %q, want %q", exprs, want)
	}
	if want := `panel "outer" target B`; where[2] != want {
		t.Errorf("where %q, want %q", where[2], want)
	}
	for _, bad := range []string{`{"panels": [{"title": "p", "targets": [{"refId": "A", "expr": " "}]}]}`, `{"panels": 1}`} {
		if _, err := Parse([]byte(bad)); err == nil {
			t.Errorf("Parse(%s) succeeded", bad)
		}
	}
}

func TestRunnable(t *testing.T) {
	got := Runnable(`rate(a{node=~"$node",gpu=~"${gpu:regex}"}[$__rate_interval])`, "1m")
	if want := `rate(a{node=~".*",gpu=~".*"}[1m])`; got != want {
		t.Errorf("got %s, want %s", got, want)
	}
	got = Runnable(`label_values(tangram_node_gpus{zone=~"$zone"}, node)`, "1m")
	if want := `count by (node) (tangram_node_gpus{zone=~".*"})`; got != want {
		t.Errorf("got %s, want %s", got, want)
	}
}
