package clusterview_test

import (
	"bytes"
	"context"
	"flag"
	"testing"

	"github.com/tangram-gpu/tangram/internal/golden"
	"github.com/tangram-gpu/tangram/pkg/cluster/fixture"
	"github.com/tangram-gpu/tangram/pkg/clusterview"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden from the current output")

// checkGolden compares got with testdata/name (golden.Check).
func checkGolden(t *testing.T, name string, got []byte) {
	t.Helper()
	golden.Check(t, name, got, *update)
}

func demo(t *testing.T) *fixture.Cluster {
	t.Helper()
	c, err := fixture.Demo(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestStatusGolden(t *testing.T) {
	c := demo(t)
	tests := []struct {
		golden string
		opts   clusterview.Options
		format string
		style  clusterview.Style
	}{
		{"status.golden", clusterview.Options{}, clusterview.FormatTable, clusterview.Style{}},
		{"status-colour.golden", clusterview.Options{}, clusterview.FormatTable, clusterview.Style{Colour: true}},
		{"status-node.golden", clusterview.Options{Node: "a100-a"}, clusterview.FormatTable, clusterview.Style{}},
		{"status.json.golden", clusterview.Options{}, clusterview.FormatJSON, clusterview.Style{}},
		{"status-node.yaml.golden", clusterview.Options{Node: "dgx-b"}, clusterview.FormatYAML, clusterview.Style{}},
	}
	for _, tc := range tests {
		t.Run(tc.golden, func(t *testing.T) {
			v := clusterview.Build(&c.Snap, tc.opts)
			var out bytes.Buffer
			var err error
			if tc.format == clusterview.FormatTable {
				err = clusterview.WriteStatus(&out, v, tc.style)
			} else {
				err = clusterview.WriteData(&out, tc.format, v)
			}
			if err != nil {
				t.Fatal(err)
			}
			checkGolden(t, tc.golden, out.Bytes())
		})
	}
}
