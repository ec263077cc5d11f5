// Package docs holds the check that docs/architecture.md's package map is
// true: every package of the repository's modules is in it, it names no
// package that is gone, and no package imports one of a lower row.
package docs

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path"
	"slices"
	"strings"
	"testing"
)

const (
	mapFile = "architecture.md"
	// mapSection is the heading of the table checked here.
	mapSection = "## Package map"
	modulePath = "github.com/tangram-gpu/tangram"
)

// modules are the repository's Go modules, as directories from its root:
// the driver's and the nested ones that keep heavy dependencies out of it.
var modules = []string{".", "cmd/tangram-scheduler", "hack/bench-placement"}

// buildTags: every package and import any build sees (e2e, chart and
// real-cluster tests are behind tags).
const buildTags = "e2e,helm,realcluster"

// row is one row of the package map: its packages, as paths from the
// repository's root, and its text, for messages.
type row struct {
	pkgs []string
	text string
}

// parseMap reads the rows of the table under mapSection: the packages are
// the backquoted words of each row's first cell.
func parseMap(md string) ([]row, error) {
	_, rest, ok := strings.Cut(md, "\n"+mapSection+"\n")
	if !ok {
		return nil, fmt.Errorf("no %q section", mapSection)
	}
	if next := strings.Index(rest, "\n## "); next >= 0 {
		rest = rest[:next]
	}
	var rows []row
	header := true
	for _, line := range strings.Split(rest, "\n") {
		if !strings.HasPrefix(line, "|") {
			continue
		}
		cells := strings.Split(strings.Trim(line, "|"), "|")
		if header || strings.HasPrefix(strings.TrimSpace(cells[0]), "---") {
			header = false
			continue
		}
		fields := strings.Split(cells[0], "`")
		var pkgs []string
		for i := 1; i < len(fields); i += 2 {
			pkgs = append(pkgs, fields[i])
		}
		if len(pkgs) == 0 {
			return nil, fmt.Errorf("row %q names no package (write them as `path/from/root`)", line)
		}
		rows = append(rows, row{pkgs: pkgs, text: strings.TrimSpace(cells[0])})
	}
	if len(rows) == 0 {
		return nil, fmt.Errorf("the %q section has no table", mapSection)
	}
	return rows, nil
}

// checkMap compares the map with the packages and their imports (both as
// paths from the repository's root; imports of other modules left out) and
// returns what is wrong, each with what to change. The rule: a package
// imports only packages of its own row or of the rows above it.
func checkMap(rows []row, imports map[string][]string) []string {
	rowOf := map[string]int{}
	var problems []string
	for i, r := range rows {
		for _, p := range r.pkgs {
			if _, ok := imports[p]; !ok {
				problems = append(problems, fmt.Sprintf("row %d (%s) names `%s`, which is no package of the repository: remove it from the row, or write the package's path from the repository's root", i+1, r.text, p))
				continue
			}
			if j, dup := rowOf[p]; dup {
				problems = append(problems, fmt.Sprintf("`%s` is in row %d (%s) and in row %d (%s): keep one", p, j+1, rows[j].text, i+1, r.text))
				continue
			}
			rowOf[p] = i
		}
	}
	pkgs := make([]string, 0, len(imports))
	for p := range imports {
		pkgs = append(pkgs, p)
	}
	slices.Sort(pkgs)
	for _, p := range pkgs {
		if _, ok := rowOf[p]; ok {
			continue
		}
		problems = append(problems, missingMessage(p, rows, rowOf, imports))
	}
	for _, p := range pkgs {
		r, ok := rowOf[p]
		if !ok {
			continue
		}
		for _, q := range imports[p] {
			if rq, ok := rowOf[q]; ok && rq > r {
				problems = append(problems, fmt.Sprintf("`%s` (row %d: %s) imports `%s` (row %d: %s), a lower row; the map says a package imports only its own row and the rows above it: move row %d above row %d (or `%s` into a row below %d), or drop the import", p, r+1, rows[r].text, q, rq+1, rows[rq].text, rq+1, r+1, p, rq+1))
			}
		}
	}
	return problems
}

// missingMessage says where a package missing from the map goes: after the
// lowest row it imports and before the highest row importing it; into its
// parent directory's row when that one lies in between, else a row of its
// own right after the lowest row it imports.
func missingMessage(p string, rows []row, rowOf map[string]int, imports map[string][]string) string {
	lo, loPkg := -1, ""
	for _, q := range imports[p] {
		if r, ok := rowOf[q]; ok && r > lo {
			lo, loPkg = r, q
		}
	}
	hi, hiPkg := len(rows), ""
	for importer, qs := range imports {
		if r, ok := rowOf[importer]; ok && r < hi && slices.Contains(qs, p) {
			hi, hiPkg = r, importer
		}
	}
	where := "it imports no package of the map"
	if loPkg != "" {
		where = fmt.Sprintf("it imports `%s` (row %d)", loPkg, lo+1)
	}
	if hiPkg != "" {
		where += fmt.Sprintf(" and `%s` (row %d) imports it", hiPkg, hi+1)
	}
	for dir := path.Dir(p); dir != "."; dir = path.Dir(dir) {
		if r, ok := rowOf[dir]; ok && r >= lo && r < hi {
			return fmt.Sprintf("`%s` is not in docs/architecture.md's package map: add `%s` to row %d (%s), the row of `%s`, and say what it owns there (%s)", p, p, r+1, rows[r].text, dir, where)
		}
	}
	if lo >= hi {
		return fmt.Sprintf("`%s` is not in docs/architecture.md's package map, and no place in it keeps the layering (%s): reorder those rows first, then add it between them", p, where)
	}
	var after string
	switch {
	case lo >= 0:
		after = fmt.Sprintf("right after row %d (%s)", lo+1, rows[lo].text)
	case hi < len(rows):
		after = fmt.Sprintf("right before row %d (%s)", hi+1, rows[hi].text)
	default:
		after = "as the last row of the table"
	}
	return fmt.Sprintf("`%s` is not in docs/architecture.md's package map: add the row | `%s` | what it owns | who uses it | %s (%s)", p, p, after, where)
}

// listImports runs go list in every module and returns each package's
// imports of the repository's own packages, as paths from its root.
func listImports(t *testing.T, root string) map[string][]string {
	t.Helper()
	imports := map[string][]string{}
	for _, m := range modules {
		cmd := exec.Command("go", "list", "-tags", buildTags, "-f", "{{.ImportPath}}{{range .Imports}} {{.}}{{end}}", "./...")
		cmd.Dir = path.Join(root, m)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("go list in %s: %v\n%s", cmd.Dir, err, stderr.String())
		}
		for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
			fields := strings.Fields(line)
			p, ok := repoPath(fields[0])
			if !ok {
				t.Fatalf("go list in %s: package %s is outside %s", cmd.Dir, fields[0], modulePath)
			}
			imports[p] = nil
			for _, imp := range fields[1:] {
				if q, ok := repoPath(imp); ok {
					imports[p] = append(imports[p], q)
				}
			}
		}
	}
	return imports
}

func repoPath(importPath string) (string, bool) {
	if importPath == modulePath {
		return ".", true
	}
	return strings.CutPrefix(importPath, modulePath+"/")
}

// TestArchitectureMap: docs/architecture.md's package map names every
// package of the repository (the nested modules too), no package that is
// gone, and its rows are in layer order.
func TestArchitectureMap(t *testing.T) {
	md, err := os.ReadFile(mapFile)
	if err != nil {
		t.Fatal(err)
	}
	rows, err := parseMap(string(md))
	if err != nil {
		t.Fatalf("%s: %v", mapFile, err)
	}
	for _, p := range checkMap(rows, listImports(t, "..")) {
		t.Error(p)
	}
}

// TestCheckMap: what checkMap finds, and that its messages say which row
// to change.
func TestCheckMap(t *testing.T) {
	md := "# A\n\n" + mapSection + "\n\n| Package | Owns |\n|---|---|\n" +
		"| `pkg/device` | the contract |\n" +
		"| `pkg/gpu`, `pkg/gpu/fakegpu` | cards |\n" +
		"| `pkg/plugin` | the node |\n" +
		"| `cmd/plugin` | the binary |\n\n## Next\n\n| `not/this` | x |\n"
	rows, err := parseMap(md)
	if err != nil {
		t.Fatal(err)
	}
	base := map[string][]string{
		"pkg/device":      nil,
		"pkg/gpu":         nil,
		"pkg/gpu/fakegpu": {"pkg/device", "pkg/gpu"},
		"pkg/plugin":      {"pkg/device", "pkg/gpu"},
		"cmd/plugin":      {"pkg/plugin"},
	}
	with := func(changes map[string][]string, gone ...string) map[string][]string {
		m := map[string][]string{}
		for k, v := range base {
			m[k] = v
		}
		for k, v := range changes {
			m[k] = v
		}
		for _, k := range gone {
			delete(m, k)
		}
		return m
	}
	tests := []struct {
		name    string
		imports map[string][]string
		// want: the texts of the one problem expected (none: no problem).
		want []string
	}{
		{name: "true map", imports: base},
		{
			name:    "new package under a mapped one goes into its row",
			imports: with(map[string][]string{"pkg/gpu/mig": {"pkg/gpu"}, "pkg/plugin": {"pkg/gpu/mig"}}),
			want:    []string{"`pkg/gpu/mig` is not in docs/architecture.md's package map: add `pkg/gpu/mig` to row 2 (`pkg/gpu`, `pkg/gpu/fakegpu`), the row of `pkg/gpu`"},
		},
		{
			name:    "new package whose parent row is too high gets a row after its lowest import",
			imports: with(map[string][]string{"pkg/device/check": {"pkg/plugin"}}),
			want:    []string{"add the row | `pkg/device/check` | what it owns | who uses it | right after row 3 (`pkg/plugin`) (it imports `pkg/plugin` (row 3))"},
		},
		{
			name:    "new package no place fits",
			imports: with(map[string][]string{"pkg/x": {"pkg/plugin"}, "pkg/gpu": {"pkg/x"}}),
			want:    []string{"`pkg/x` is not in docs/architecture.md's package map, and no place in it keeps the layering"},
		},
		{
			name:    "import of a lower row",
			imports: with(map[string][]string{"pkg/device": {"pkg/gpu"}}),
			want:    []string{"`pkg/device` (row 1: `pkg/device`) imports `pkg/gpu` (row 2: `pkg/gpu`, `pkg/gpu/fakegpu`), a lower row", "move row 2 above row 1"},
		},
		{
			name:    "package gone",
			imports: with(nil, "cmd/plugin"),
			want:    []string{"row 4 (`cmd/plugin`) names `cmd/plugin`, which is no package of the repository"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := checkMap(rows, tc.imports)
			if tc.want == nil {
				if len(got) != 0 {
					t.Fatalf("problems = %q, want none", got)
				}
				return
			}
			if len(got) != 1 {
				t.Fatalf("problems = %q, want one saying %q", got, tc.want)
			}
			for _, w := range tc.want {
				if !strings.Contains(got[0], w) {
					t.Errorf("problem %q lacks %q", got[0], w)
				}
			}
		})
	}
}
