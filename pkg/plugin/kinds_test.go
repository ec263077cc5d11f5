package plugin

import (
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/tangram-gpu/tangram/internal/reporoot"
)

// TestKindsAreWiredInOnePlace: a kind's package (pkg/plugin/kinds/<kind>)
// is imported by no product code but pkg/plugin/kinds.go, the one place a
// kind is registered, and by its own package tree; the Driver and the
// rest of the node path know kinds only through pkg/plugin/kinds'
// interfaces (docs/architecture.md, "Adding a kind"). Tests may import
// them.
func TestKindsAreWiredInOnePlace(t *testing.T) {
	root, err := reporoot.Find()
	if err != nil {
		t.Fatal(err)
	}
	kindsPrefix := reporoot.Module + "/pkg/plugin/kinds/"
	registration := filepath.Join("pkg", "plugin", "kinds.go")
	var kindPackages int
	err = filepath.WalkDir(root, func(path string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		if e.IsDir() {
			if strings.HasPrefix(e.Name(), ".") || e.Name() == "vendor" || e.Name() == "testdata" || e.Name() == "bin" {
				return filepath.SkipDir
			}
			if strings.HasPrefix(filepath.ToSlash(rel), "pkg/plugin/kinds/") {
				kindPackages++
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") || rel == registration {
			return nil
		}
		file, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.ImportsOnly)
		if err != nil {
			return err
		}
		for _, imp := range file.Imports {
			p, _ := strconv.Unquote(imp.Path.Value)
			if !strings.HasPrefix(p, kindsPrefix) {
				continue
			}
			// Inside a kind's own tree (its subpackages) is its business.
			kindDir := "pkg/plugin/kinds/" + strings.SplitN(strings.TrimPrefix(p, kindsPrefix), "/", 2)[0] + "/"
			if strings.HasPrefix(filepath.ToSlash(rel), kindDir) {
				continue
			}
			t.Errorf("%s imports the kind package %s: a kind is wired in only by %s (register it there; the rest of the node path talks to pkg/plugin/kinds' interfaces)", rel, p, registration)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if kindPackages == 0 {
		t.Fatal("found no package under pkg/plugin/kinds/: the walk looked in the wrong place")
	}
}
