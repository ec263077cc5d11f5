//go:build helm

// Package helm tests the tangram chart by running the real `helm` binary:
// `helm lint`, `helm template` with several value sets, and values the schema
// must reject. The rendered objects are decoded strictly into their
// Kubernetes types and checked field by field.
//
// The tests carry the build tag "helm" because they need the helm binary;
// `make test-chart` builds helm into the cache and runs them:
//
//	HELM=/path/to/helm go test -tags helm ./deployments/helm/
package helm

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"os"
	"os/exec"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"
)

const (
	chartDir    = "tangram"
	releaseName = "tangram"
	namespace   = "tangram-system"
)

// helmBinary finds helm: $HELM, then PATH. Missing helm is a failure, not a
// skip: these tests only build with the "helm" tag, which says helm is wanted.
func helmBinary(t *testing.T) string {
	t.Helper()
	if h := os.Getenv("HELM"); h != "" {
		return h
	}
	h, err := exec.LookPath("helm")
	if err != nil {
		t.Fatalf("helm is not on PATH and $HELM is not set: run `make test-chart`, which builds helm into the cache, or set HELM=/path/to/helm")
	}
	return h
}

// runHelm runs helm with args and returns stdout, or an error carrying stderr.
func runHelm(t *testing.T, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command(helmBinary(t), args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), errors.New(strings.TrimSpace(stderr.String() + "\n" + err.Error()))
	}
	return stdout.String(), nil
}

// setArgs turns "key=value" pairs into helm --set flags; a pair whose key
// ends in "@json" is passed with --set-json instead, and a flag
// ("--api-versions=...") is passed as it is.
func setArgs(sets []string) []string {
	var args []string
	for _, s := range sets {
		if strings.HasPrefix(s, "--") {
			args = append(args, s)
			continue
		}
		if k, v, ok := strings.Cut(s, "@json="); ok {
			args = append(args, "--set-json", k+"="+v)
			continue
		}
		args = append(args, "--set", s)
	}
	return args
}

func template(t *testing.T, sets ...string) (string, error) {
	t.Helper()
	args := append([]string{"template", releaseName, chartDir, "--namespace", namespace}, setArgs(sets)...)
	return runHelm(t, args...)
}

// objects is a rendered chart, indexed by kind and name.
type objects map[string]map[string]runtime.Object

func (o objects) get(t *testing.T, kind, name string) runtime.Object {
	t.Helper()
	obj, ok := o[kind][name]
	if !ok {
		var have []string
		for n := range o[kind] {
			have = append(have, n)
		}
		t.Fatalf("rendered chart has no %s %q (have %v)", kind, name, have)
	}
	return obj
}

func (o objects) has(kind, name string) bool {
	_, ok := o[kind][name]
	return ok
}

// render runs helm template and decodes every object strictly.
func render(t *testing.T, sets ...string) objects {
	t.Helper()
	out, err := template(t, sets...)
	if err != nil {
		t.Fatalf("helm template %v: %v", sets, err)
	}
	decoder := serializer.NewCodecFactory(scheme.Scheme, serializer.EnableStrict).UniversalDeserializer()
	objs := objects{}
	reader := utilyaml.NewYAMLReader(bufio.NewReader(strings.NewReader(out)))
	for {
		doc, err := reader.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("reading rendered YAML: %v", err)
		}
		if isBlank(doc) {
			continue
		}
		obj, gvk, err := decoder.Decode(doc, nil, nil)
		if runtime.IsNotRegisteredError(err) {
			// Kinds of other projects (cert-manager's Certificate and
			// Issuer): no Go types here, so checked as plain maps.
			u := &unstructured.Unstructured{}
			if err = yaml.UnmarshalStrict(doc, &u.Object); err == nil {
				obj, gvk = u, ptr.To(u.GroupVersionKind())
			}
		}
		if err != nil {
			t.Fatalf("rendered object does not decode strictly: %v\n%s", err, doc)
		}
		name := obj.(interface{ GetName() string }).GetName()
		if objs[gvk.Kind] == nil {
			objs[gvk.Kind] = map[string]runtime.Object{}
		}
		if objs.has(gvk.Kind, name) {
			t.Fatalf("%s %q is rendered twice", gvk.Kind, name)
		}
		objs[gvk.Kind][name] = obj
	}
	return objs
}

// isBlank reports whether a YAML document holds only comments and space.
func isBlank(doc []byte) bool {
	for _, line := range bytes.Split(doc, []byte("\n")) {
		l := bytes.TrimSpace(line)
		if len(l) > 0 && l[0] != '#' && string(l) != "---" {
			return false
		}
	}
	return true
}

func TestLint(t *testing.T) {
	tests := []struct {
		name string
		sets []string
	}{
		{name: "defaults (real GPUs)"},
		{name: "demo", sets: []string{"fakeGPU.profile=dgx-h100", "image.pullPolicy=Never"}},
		{name: "webhook certificate from cert-manager, scheduler on", sets: []string{"controller.enabled=true", "controller.webhook.enabled=true", "controller.webhook.certManager.enabled=true", "scheduler.enabled=true"}},
		{name: "monitoring with every component", sets: []string{"monitoring.enabled=true", "controller.enabled=true", "scheduler.enabled=true"}},
		{name: "whole cards only, controller and webhook on", sets: []string{"sharing.enabled=false", "controller.enabled=true", "controller.replicas=2", "controller.webhook.enabled=true"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			args := append([]string{"lint", "--strict", chartDir, "--namespace", namespace}, setArgs(tc.sets)...)
			if out, err := runHelm(t, args...); err != nil {
				t.Fatalf("helm lint: %v\n%s", err, out)
			}
		})
	}
}
