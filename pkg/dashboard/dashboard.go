// Package dashboard reads the chart's Grafana dashboard
// (deployments/helm/tangram/dashboards/tangram.json): every PromQL query of
// its panels and variables, the metric names each one reads, and the query
// with Grafana's variables filled in so Prometheus itself can run it.
package dashboard

import (
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"sort"
	"strings"
)

// Query is one PromQL expression of the dashboard.
type Query struct {
	// Where names it for people: the panel title and target refId, or the
	// template variable.
	Where string
	Expr  string
}

type panel struct {
	Title   string `json:"title"`
	Targets []struct {
		RefID string `json:"refId"`
		Expr  string `json:"expr"`
	} `json:"targets"`
	Panels []panel `json:"panels"`
}

type file struct {
	Panels     []panel `json:"panels"`
	Templating struct {
		List []struct {
			Name  string          `json:"name"`
			Type  string          `json:"type"`
			Query json.RawMessage `json:"query"`
		} `json:"list"`
	} `json:"templating"`
}

// Load reads a dashboard file and returns its queries: every panel target
// (also of panels nested in collapsed rows) and every query variable.
func Load(path string) ([]Query, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading the dashboard: %w", err)
	}
	return Parse(data)
}

// Parse returns the queries of a dashboard's JSON.
func Parse(data []byte) ([]Query, error) {
	var f file
	if err := json.Unmarshal(data, &f); err != nil {
		return nil, fmt.Errorf("decoding the dashboard JSON: %w", err)
	}
	var out []Query
	var walk func([]panel) error
	walk = func(panels []panel) error {
		for _, p := range panels {
			for _, t := range p.Targets {
				if strings.TrimSpace(t.Expr) == "" {
					return fmt.Errorf("panel %q target %s has no expr", p.Title, t.RefID)
				}
				out = append(out, Query{Where: fmt.Sprintf("panel %q target %s", p.Title, t.RefID), Expr: t.Expr})
			}
			if err := walk(p.Panels); err != nil {
				return err
			}
		}
		return nil
	}
	if err := walk(f.Panels); err != nil {
		return nil, err
	}
	for _, v := range f.Templating.List {
		if v.Type != "query" {
			continue
		}
		// Grafana stores a variable's query as a string or as {"query": "..."}.
		var q string
		if err := json.Unmarshal(v.Query, &q); err != nil {
			var obj struct {
				Query string `json:"query"`
			}
			if err := json.Unmarshal(v.Query, &obj); err != nil {
				return nil, fmt.Errorf("variable %q: query is neither a string nor an object: %w", v.Name, err)
			}
			q = obj.Query
		}
		out = append(out, Query{Where: fmt.Sprintf("variable %q", v.Name), Expr: q})
	}
	return out, nil
}

var (
	// Grafana's label_values(metric, label) is not PromQL: it reads the
	// label's values from the series of the metric.
	labelValues = regexp.MustCompile(`^\s*label_values\(\s*([a-zA-Z_:][a-zA-Z0-9_:]*)\s*(\{[^}]*\})?\s*,\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*\)\s*$`)
	// Strings, label matchers and ranges hold no metric names.
	quoted   = regexp.MustCompile(`"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|` + "`[^`]*`")
	braces   = regexp.MustCompile(`\{[^{}]*\}`)
	brackets = regexp.MustCompile(`\[[^\[\]]*\]`)
	// Label lists of aggregations and vector matching.
	labelLists = regexp.MustCompile(`\b(by|without|on|ignoring|group_left|group_right)\s*\([^()]*\)`)
	// Identifiers with what precedes them ($ for a Grafana variable) and
	// numbers (so that 1e3 or 0x1f are not read as names).
	token = regexp.MustCompile(`\$?[a-zA-Z_:][a-zA-Z0-9_:]*|[0-9][0-9a-zA-Z_.]*`)
)

var keywords = map[string]bool{
	"by": true, "without": true, "on": true, "ignoring": true, "group_left": true, "group_right": true,
	"bool": true, "and": true, "or": true, "unless": true, "offset": true, "inf": true, "nan": true, "atan2": true,
}

// MetricNames returns the sorted metric names a query reads. It knows the
// PromQL the dashboard uses (selectors, functions, aggregations with
// by/without, binary operators and vector matching, ranges, offsets) and
// Grafana's label_values(); it fails on a query it cannot read instead of
// guessing.
func MetricNames(expr string) ([]string, error) {
	if m := labelValues.FindStringSubmatch(expr); m != nil {
		return []string{m[1]}, nil
	}
	s := quoted.ReplaceAllString(expr, `""`)
	if strings.Count(s, "(") != strings.Count(s, ")") {
		return nil, fmt.Errorf("unbalanced parentheses in %q", expr)
	}
	s = braces.ReplaceAllString(s, "")
	s = brackets.ReplaceAllString(s, "")
	s = labelLists.ReplaceAllString(s, " ")
	if strings.ContainsAny(s, "{}[]") {
		return nil, fmt.Errorf("cannot read %q: nested braces or brackets", expr)
	}
	seen := map[string]bool{}
	for _, loc := range token.FindAllStringIndex(s, -1) {
		tok := s[loc[0]:loc[1]]
		if tok[0] == '$' || (tok[0] >= '0' && tok[0] <= '9') || keywords[strings.ToLower(tok)] {
			continue
		}
		if rest := strings.TrimLeft(s[loc[1]:], " \t\n"); strings.HasPrefix(rest, "(") {
			continue // a function or an aggregation
		}
		seen[tok] = true
	}
	if len(seen) == 0 {
		return nil, fmt.Errorf("no metric in %q", expr)
	}
	names := make([]string, 0, len(seen))
	for n := range seen {
		names = append(names, n)
	}
	sort.Strings(names)
	return names, nil
}

// Runnable fills in Grafana's variables so Prometheus can run the query:
// every dashboard variable (e.g. $node) matches all values, and the range
// variables get rateInterval (e.g. "1m"). Grafana's label_values(metric,
// label) becomes the PromQL that has a series per label value.
func Runnable(expr, rateInterval string) string {
	if m := labelValues.FindStringSubmatch(expr); m != nil {
		expr = fmt.Sprintf("count by (%s) (%s%s)", m[3], m[1], m[2])
	}
	r := strings.NewReplacer(
		"$__rate_interval", rateInterval, "${__rate_interval}", rateInterval,
		"$__interval", rateInterval, "${__interval}", rateInterval,
		"$__range", rateInterval, "${__range}", rateInterval,
	)
	expr = r.Replace(expr)
	return variable.ReplaceAllString(expr, ".*")
}

var variable = regexp.MustCompile(`\$\{?[a-zA-Z_][a-zA-Z0-9_]*(:[a-z]+)?\}?`)
