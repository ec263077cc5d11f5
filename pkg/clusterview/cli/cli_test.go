package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"os"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	tangramv1alpha1 "github.com/tangram-gpu/tangram/api/tangram/v1alpha1"
	"github.com/tangram-gpu/tangram/pkg/cluster/fixture"
	"github.com/tangram-gpu/tangram/pkg/clusterview"
	"github.com/tangram-gpu/tangram/pkg/clusterview/describe"
)

// demoClient serves the demo cluster from a fake clientset.
func demoClient(t *testing.T) (*fake.Clientset, *dynamicfake.FakeDynamicClient, *fixture.Cluster) {
	t.Helper()
	c, err := fixture.Demo(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var objs []runtime.Object
	for _, o := range c.Snap.Slices {
		objs = append(objs, o)
	}
	for _, o := range c.Snap.Claims {
		objs = append(objs, o)
	}
	for _, o := range c.Snap.Classes {
		objs = append(objs, o)
	}
	for _, o := range c.Snap.Nodes {
		objs = append(objs, o)
	}
	for _, o := range c.Snap.Pods {
		objs = append(objs, o)
	}
	var gangs []runtime.Object
	for _, g := range c.Snap.Gangs {
		u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(g)
		if err != nil {
			t.Fatal(err)
		}
		obj := &unstructured.Unstructured{Object: u}
		obj.SetAPIVersion(tangramv1alpha1.SchemeGroupVersion.String())
		obj.SetKind("GpuGang")
		gangs = append(gangs, obj)
	}
	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
		map[schema.GroupVersionResource]string{tangramv1alpha1.GroupVersionResource: "GpuGangList"}, gangs...)
	return fake.NewClientset(objs...), dyn, c
}

func run(t *testing.T, client kubernetes.Interface, dyn dynamic.Interface, args ...string) (string, error) {
	t.Helper()
	var out bytes.Buffer
	cmd := newCommand(&out, func() (*clients, error) {
		ns := "default"
		for i, a := range args {
			if (a == "-n" || a == "--namespace") && i+1 < len(args) {
				ns = args[i+1]
			}
		}
		return &clients{kube: client, dynamic: dyn, namespace: ns}, nil
	})
	cmd.SetArgs(args)
	cmd.SetOut(&out)
	cmd.SetErr(&out)
	err := cmd.ExecuteContext(context.Background())
	return out.String(), err
}

func TestStatusJSONMatchesView(t *testing.T) {
	client, dyn, c := demoClient(t)
	out, err := run(t, client, dyn, "status", "-o", "json")
	if err != nil {
		t.Fatal(err)
	}
	var got clusterview.View
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("status -o json is not a View: %v\n%s", err, out)
	}
	want := clusterview.Build(&c.Snap, clusterview.Options{})
	if err := describe.ExplainPending(context.Background(), &c.Snap, want, 10); err != nil {
		t.Fatal(err)
	}
	wantJSON, _ := json.Marshal(want)
	gotJSON, _ := json.Marshal(got)
	if !bytes.Equal(wantJSON, gotJSON) {
		i := 0
		for i < len(gotJSON) && i < len(wantJSON) && gotJSON[i] == wantJSON[i] {
			i++
		}
		from := max(0, i-100)
		t.Errorf("status over the API differs from the view of the same objects at byte %d\n got: ...%s\nwant: ...%s",
			i, gotJSON[from:min(len(gotJSON), i+100)], wantJSON[from:min(len(wantJSON), i+100)])
	}
	for _, p := range got.Pending {
		if p.Why == "" {
			t.Errorf("pending claim %s has no reason", p.String())
		}
	}
}

func TestCommands(t *testing.T) {
	client, dyn, _ := demoClient(t)
	tests := []struct {
		args []string
		// want are substrings of the output, or of the error when wantErr.
		want    []string
		wantErr bool
	}{
		{args: []string{"status", "--node", "dgx-b"}, want: []string{"NODE dgx-b", "serve/infer-c (30 GiB, 50%)", "CLUSTER  1 node,"}},
		{args: []string{"status", "--node", "nope"}, want: []string{`node "nope" publishes no gpu.tangram.dev devices`}, wantErr: true},
		{args: []string{"status", "-o", "wide"}, want: []string{`unknown output format "wide"`}, wantErr: true},
		{args: []string{"status", "--color", "sometimes"}, want: []string{`unknown --color "sometimes"`}, wantErr: true},
		{args: []string{"status", "--color", "always"}, want: []string{"\x1b[1mNODE\x1b[0m"}},
		{args: []string{"describe", "claim/big-share", "-n", "serve"}, want: []string{"pending: not allocated", "more than any matching card can give"}},
		{args: []string{"describe", "claim", "infer-a", "-n", "serve"}, want: []string{"allocated on dgx-a", "20 GiB"}},
		{args: []string{"describe", "po/train-4x-pod", "-n", "ml"}, want: []string{"Running on dgx-a", "dgx-a/gpu-3"}},
		{args: []string{"describe", "claim/infer-a"}, want: []string{`resourceclaim "infer-a" not found in namespace "default"`}, wantErr: true},
		{args: []string{"describe", "pod/missing", "-n", "ml"}, want: []string{`reading pod ml/missing`}, wantErr: true},
		{args: []string{"describe", "node/dgx-a"}, want: []string{`only pod/NAME and claim/NAME`}, wantErr: true},
		{args: []string{"describe", "infer-a"}, want: []string{`write pod/NAME or claim/NAME`}, wantErr: true},
	}
	for _, tc := range tests {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			out, err := run(t, client, dyn, tc.args...)
			if (err != nil) != tc.wantErr {
				t.Fatalf("err = %v, wantErr %v\n%s", err, tc.wantErr, out)
			}
			text := out
			if err != nil {
				text = err.Error()
			}
			for _, w := range tc.want {
				if !strings.Contains(text, w) {
					t.Errorf("output lacks %q:\n%s", w, text)
				}
			}
		})
	}
}

func TestDescribeClaimJSON(t *testing.T) {
	client, dyn, _ := demoClient(t)
	out, err := run(t, client, dyn, "describe", "claim/train-8x", "-n", "ml", "-o", "json")
	if err != nil {
		t.Fatal(err)
	}
	var r describe.ClaimReport
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatal(err)
	}
	if r.State != describe.StatePending || r.Diagnosis == nil || len(r.Diagnosis.Reasons) != 1 ||
		!strings.Contains(r.Diagnosis.Reasons[0], "the largest free NVLink domain has 2 cards (a100-a, dgx-a, dgx-b)") {
		t.Errorf("got %+v", r)
	}
}

func TestForbiddenSaysWhichRole(t *testing.T) {
	client, dyn, _ := demoClient(t)
	client.PrependReactor("list", "resourceclaims", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewForbidden(corev1.Resource("resourceclaims"), "", nil)
	})
	_, err := run(t, client, dyn, "status")
	if err == nil || !strings.Contains(err.Error(), "bind the read-only ClusterRole from docs/kubectl-tangram.md") {
		t.Errorf("got %v", err)
	}
}

func TestNodesForbiddenIsNotFatal(t *testing.T) {
	client, dyn, _ := demoClient(t)
	client.PrependReactor("list", "nodes", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewForbidden(corev1.Resource("nodes"), "", nil)
	})
	out, err := run(t, client, dyn, "describe", "claim/train-8x", "-n", "ml")
	if err != nil || !strings.Contains(out, "largest free NVLink domain has 2 cards") {
		t.Errorf("err %v, output:\n%s", err, out)
	}
}

func TestColourChoice(t *testing.T) {
	file, err := os.CreateTemp(t.TempDir(), "out")
	if err != nil {
		t.Fatal(err)
	}
	defer file.Close()
	tests := []struct {
		name    string
		colour  string
		out     io.Writer
		noColor bool
		want    bool
	}{
		{"auto to a buffer", "auto", &bytes.Buffer{}, false, false},
		{"auto to a file that is no terminal", "auto", file, false, false},
		{"always", "always", &bytes.Buffer{}, false, true},
		{"always beats NO_COLOR", "always", &bytes.Buffer{}, true, true},
		{"never", "never", file, false, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if tc.noColor {
				t.Setenv("NO_COLOR", "1")
			}
			o := &options{colour: tc.colour, out: tc.out}
			st, err := o.style()
			if err != nil || st.Colour != tc.want {
				t.Errorf("colour %v, err %v; want %v", st.Colour, err, tc.want)
			}
		})
	}
}
