package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/utils/ptr"

	"github.com/tangram-gpu/tangram/pkg/resourceslices"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata")

// runCommand runs the plugin's root command with args and returns stdout.
func runCommand(t *testing.T, args ...string) (string, error) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	root := newRootCommand()
	root.SetArgs(args)
	root.SetOut(&stdout)
	root.SetErr(&stderr)
	err := root.ExecuteContext(context.Background())
	return stdout.String(), err
}

func TestSlicesGolden(t *testing.T) {
	tests := []struct {
		golden string
		args   []string
	}{
		{"slices-pcie-l4.yaml", []string{"slices", "--node-name", "node-1", "--fake-profile", "pcie-l4", "-o", "yaml"}},
		{"slices-pcie-a100-pairs-disabled.yaml", []string{"slices", "--node-name", "node-1", "--fake-profile", "pcie-a100-pairs", "--sharing=disabled"}},
	}
	for _, tc := range tests {
		t.Run(tc.golden, func(t *testing.T) {
			got, err := runCommand(t, tc.args...)
			if err != nil {
				t.Fatal(err)
			}
			path := filepath.Join("testdata", tc.golden)
			if *update {
				if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (run go test -update to create it)", err)
			}
			if diff := cmp.Diff(string(want), got); diff != "" {
				t.Errorf("output differs from %s (-want +got):\n%s", path, diff)
			}
		})
	}
}

// decode parses -o json output.
func decode(t *testing.T, out string) sliceList {
	t.Helper()
	var list sliceList
	if err := json.Unmarshal([]byte(out), &list); err != nil {
		t.Fatalf("output is not a JSON list: %v\n%s", err, out)
	}
	for _, s := range list.Items {
		if err := resourceslices.ValidateResourceSlice(s); err != nil {
			t.Errorf("printed slice is invalid: %v", err)
		}
	}
	return list
}

func TestSlicesJSON(t *testing.T) {
	t.Setenv("NODE_NAME", "from-env")
	out, err := runCommand(t, "slices", "--fake-profile", "dgx-h100", "--sharing=disabled", "-o", "json",
		"--node-label-attributes", "topology.kubernetes.io/zone,example.com/ib-zone",
		"--node-labels", "topology.kubernetes.io/zone=eu-1a,example.com/ib-zone=ib7,other=x")
	if err != nil {
		t.Fatal(err)
	}
	list := decode(t, out)
	if list.Kind != "List" || len(list.Items) != 1 {
		t.Fatalf("want a List of one slice, got %s with %d", list.Kind, len(list.Items))
	}
	s := list.Items[0]
	if s.Name != "00000-gpu.tangram.dev-from-env" || ptr.Deref(s.Spec.NodeName, "") != "from-env" || s.Spec.Pool.Name != "from-env" {
		t.Errorf("want node name from NODE_NAME, got name %s, nodeName %v, pool %s", s.Name, s.Spec.NodeName, s.Spec.Pool.Name)
	}
	if len(s.Spec.Devices) != 8 {
		t.Fatalf("want 8 devices, got %d", len(s.Spec.Devices))
	}
	for _, d := range s.Spec.Devices {
		if d.AllowMultipleAllocations != nil || d.Capacity["memory"].RequestPolicy != nil {
			t.Errorf("%s: --sharing=disabled must publish whole cards only", d.Name)
		}
		zone, ib := d.Attributes["topology.kubernetes.io/zone"].StringValue, d.Attributes["example.com/ib_zone"].StringValue
		if ptr.Deref(zone, "") != "eu-1a" || ptr.Deref(ib, "") != "ib7" {
			t.Errorf("%s: want label attributes eu-1a and ib7, got %v %v", d.Name, zone, ib)
		}
		if _, ok := d.Attributes["other"]; ok {
			t.Errorf("%s: a label not named in --node-label-attributes was copied", d.Name)
		}
	}
}

func TestSlicesFromProfileFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "gpus.yaml")
	profile := `gpus:
- index: 0
  productName: NVIDIA H100 80GB HBM3
  memory: 80Gi
  pciBusID: "0000:18:00.0"
  numaNode: 0
  nvlinks: [1]
- index: 1
  productName: NVIDIA H100 80GB HBM3
  memory: 80Gi
  pciBusID: "0000:2a:00.0"
  numaNode: 0
`
	if err := os.WriteFile(path, []byte(profile), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := runCommand(t, "slices", "--node-name", "n2", "--fake-profile-file", path, "-o", "json", "--memory-step", "1Gi")
	if err != nil {
		t.Fatal(err)
	}
	list := decode(t, out)
	devs := list.Items[0].Spec.Devices
	if len(devs) != 2 {
		t.Fatalf("want 2 devices, got %d", len(devs))
	}
	for _, d := range devs {
		if got := ptr.Deref(d.Attributes["nvlinkDomain"].StringValue, ""); got != "n2-nvl0" {
			t.Errorf("%s: want nvlinkDomain n2-nvl0, got %q", d.Name, got)
		}
		if step := d.Capacity["memory"].RequestPolicy.ValidRange.Step; step.String() != "1Gi" {
			t.Errorf("%s: want memory step 1Gi, got %s", d.Name, step)
		}
	}
}

func TestSlicesBadFlags(t *testing.T) {
	t.Setenv("NODE_NAME", "")
	missing := filepath.Join(t.TempDir(), "missing.yaml")
	tests := []struct {
		name    string
		args    []string
		wantErr string
	}{
		{"no node name", []string{"--fake-profile", "pcie-l4"}, "pass --node-name or set NODE_NAME"},
		{"both fake sources", []string{"--node-name", "n", "--fake-profile", "pcie-l4", "--fake-profile-file", "x.yaml"}, "mutually exclusive"},
		{"unknown profile", []string{"--node-name", "n", "--fake-profile", "dgx-b300"}, `--fake-profile: unknown built-in GPU profile "dgx-b300"`},
		{"missing profile file", []string{"--node-name", "n", "--fake-profile-file", missing}, "--fake-profile-file:"},
		{"bad sharing", []string{"--node-name", "n", "--fake-profile", "pcie-l4", "--sharing=maybe"}, `--sharing="maybe": want enabled or disabled`},
		{"bad share backend", []string{"--node-name", "n", "--fake-profile", "pcie-l4", "--share-backend=vcuda"}, `--share-backend="vcuda": want mps or none`},
		{"bad output", []string{"--node-name", "n", "--fake-profile", "pcie-l4", "-o", "xml"}, `-o "xml": want yaml or json`},
		{"labels without attributes", []string{"--node-name", "n", "--fake-profile", "pcie-l4", "--node-labels", "a=b"}, "--node-labels has no effect without --node-label-attributes"},
		{"bad label key", []string{"--node-name", "n", "--fake-profile", "pcie-l4", "--node-label-attributes", "a/b/c"}, `--node-label-attributes: node label key "a/b/c"`},
		{"label collision", []string{"--node-name", "n", "--fake-profile", "pcie-l4", "--node-label-attributes", "rack-a,rack_a"}, "both become attribute"},
		{"bad memory step", []string{"--node-name", "n", "--fake-profile", "pcie-l4", "--memory-step", "lots"}, `--memory-step="lots"`},
		{"zero memory step", []string{"--node-name", "n", "--fake-profile", "pcie-l4", "--memory-step", "0"}, "want a positive whole number of bytes"},
		{"bad node name", []string{"--node-name", "Node_1", "--fake-profile", "pcie-l4"}, "cannot name a resource pool"},
		{"positional argument", []string{"--node-name", "n", "--fake-profile", "pcie-l4", "extra"}, `unknown command "extra"`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			out, err := runCommand(t, append([]string{"slices"}, tc.args...)...)
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("want error containing %q, got %v", tc.wantErr, err)
			}
			if out != "" {
				t.Errorf("want no output on error, got:\n%s", out)
			}
		})
	}
}
