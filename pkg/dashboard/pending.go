package dashboard

// NotYetExported are metrics the dashboard reads that a branch not merged
// yet adds (name → which branch). The unit test accepts them as exported
// and the Prometheus e2e check accepts no series for them. Empty on a
// merged tree: the unit test fails on a name here that a component
// exports, so the list cannot go stale.
var NotYetExported = map[string]string{}

// ChartPath is where the chart's dashboard is, relative to the repository root.
const ChartPath = "deployments/helm/tangram/dashboards/tangram.json"
