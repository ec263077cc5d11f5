package dashboard

import (
	"fmt"
	"os"
	"strings"

	"sigs.k8s.io/yaml"
)

// AlertsPath is the chart's alerts file (the PrometheusRule's groups),
// relative to the repository root.
const AlertsPath = "deployments/helm/tangram/alerts/gpu-usage.yaml"

// LoadAlerts reads a rule file's groups and returns each alert's
// expression, named by its group and alert.
func LoadAlerts(path string) ([]Query, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading the alerts: %w", err)
	}
	var f struct {
		Groups []struct {
			Name  string `json:"name"`
			Rules []struct {
				Alert string `json:"alert"`
				Expr  string `json:"expr"`
			} `json:"rules"`
		} `json:"groups"`
	}
	if err := yaml.Unmarshal(data, &f); err != nil {
		return nil, fmt.Errorf("decoding the alerts in %s: %w", path, err)
	}
	var out []Query
	for _, g := range f.Groups {
		for _, r := range g.Rules {
			if r.Alert == "" || strings.TrimSpace(r.Expr) == "" {
				return nil, fmt.Errorf("group %s of %s: a rule without an alert name or expression", g.Name, path)
			}
			out = append(out, Query{Where: fmt.Sprintf("alert %s (group %s)", r.Alert, g.Name), Expr: r.Expr})
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no alert in %s", path)
	}
	return out, nil
}
