package schedperf

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"text/template"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/yaml"

	"github.com/tangram-gpu/tangram/pkg/dra"
)

// render executes a harness template as the harness does (text/template,
// .Index and the operation's parameters) and decodes it strictly.
func render(t *testing.T, path string, env map[string]any, into any) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	tmpl, err := template.New("object").Parse(string(data))
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	var buf bytes.Buffer
	if err := tmpl.Execute(&buf, env); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	if err := yaml.UnmarshalStrict(buf.Bytes(), into); err != nil {
		t.Fatalf("%s: %v\n%s", path, err, buf.String())
	}
}

func TestTangramWorkloads(t *testing.T) {
	dir := t.TempDir()
	openb := filepath.Join(dir, "nodes.csv")
	if err := os.WriteFile(openb, []byte("sn,cpu_milli,memory_mib,gpu,model\n"+
		"openb-node-0000,64000,262144,2,P100\nopenb-node-0001,64000,262144,2,P100\nopenb-node-0002,96000,786432,8,V100M32\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	wls, err := TangramWorkloads(dir, openb, []string{"share_4nodes", "nvlink4_6nodes"}, "10s")
	if err != nil {
		t.Fatal(err)
	}
	if len(wls) != 2 || wls[0].Nodes != 4 || wls[1].Nodes != 6 || wls[1].ID() != TangramCase+"/nvlink4_6nodes" {
		t.Fatalf("workloads: %+v", wls)
	}
	// 6 nodes: dgx, P100 pair, dgx, P100 pair, dgx, V100 x8.
	params := wls[1].testCase["workloads"].([]any)[0].(map[string]any)["params"].(map[string]any)
	for name, want := range map[string]int{"n_dgx": 3, "n_s0": 2, "n_s1": 1} {
		if params[name] != want {
			t.Errorf("param %s = %v, want %d (params %v)", name, params[name], want, params)
		}
	}

	var dgx resourceapi.ResourceSlice
	render(t, filepath.Join(dir, "slice-dgx.yaml"), map[string]any{"Index": 7}, &dgx)
	var node v1.Node
	render(t, filepath.Join(dir, "node-dgx.yaml"), map[string]any{"Index": 7}, &node)
	if node.Name != "tangram-dgx-7" || *dgx.Spec.NodeName != node.Name || dgx.Spec.Pool.Name != node.Name || len(dgx.Spec.Devices) != 8 {
		t.Fatalf("node %s, slice for %s in pool %s with %d devices; want tangram-dgx-7 with 8 cards", node.Name, *dgx.Spec.NodeName, dgx.Spec.Pool.Name, len(dgx.Spec.Devices))
	}
	if strings.Contains(dgx.Name, placeholder) {
		t.Fatalf("slice name %s still holds the placeholder", dgx.Name)
	}
	var classes []*resourceapi.DeviceClass
	files, _ := filepath.Glob(filepath.Join(dir, "deviceclass-*.yaml"))
	for _, f := range files {
		var dc resourceapi.DeviceClass
		render(t, f, nil, &dc)
		classes = append(classes, &dc)
	}
	if len(classes) == 0 {
		t.Fatal("no DeviceClass written")
	}
	var pod v1.Pod
	render(t, filepath.Join(dir, "pod.yaml"), map[string]any{"Index": 0}, &pod)

	// Every claim kind renders and is allocatable on an empty DGX H100 by
	// the scheduler's allocator: a kind that is not would leave the
	// steady state with no pod scheduled.
	for kind := range ClaimKinds {
		t.Run(kind, func(t *testing.T) {
			var rct resourceapi.ResourceClaimTemplate
			render(t, filepath.Join(dir, "claimtemplate.yaml"), map[string]any{"Index": 0, "kind": kind}, &rct)
			if rct.Name != *pod.Spec.ResourceClaims[0].ResourceClaimTemplateName {
				t.Fatalf("claim template %s, pod names %s", rct.Name, *pod.Spec.ResourceClaims[0].ResourceClaimTemplateName)
			}
			claim := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: kind, Namespace: "test", UID: types.UID("uid-" + kind)}, Spec: rct.Spec.Spec}
			n := &dra.Node{Name: node.Name, Slices: []*resourceapi.ResourceSlice{&dgx}, Classes: classes}
			if _, err := n.Allocate(context.Background(), claim); err != nil {
				t.Fatalf("allocating claim kind %s on a DGX H100: %v", kind, err)
			}
		})
	}
}

func TestParseTangramWorkload(t *testing.T) {
	for _, tc := range []struct {
		in      string
		want    TangramWorkload
		wantErr string
	}{
		{in: "share_500nodes", want: TangramWorkload{Kind: "share", Nodes: 500}},
		{in: "nvlink4_1213nodes", want: TangramWorkload{Kind: "nvlink4", Nodes: 1213}},
		{in: "mig_500nodes", wantErr: "unknown claim kind"},
		{in: "share_1nodes", wantErr: "at least 2"},
		{in: "share", wantErr: "<kind>_<n>nodes"},
	} {
		got, err := ParseTangramWorkload(tc.in)
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("%s: error %v, want one with %q", tc.in, err, tc.wantErr)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("%s: %+v, %v; want %+v", tc.in, got, err, tc.want)
		}
	}
}
