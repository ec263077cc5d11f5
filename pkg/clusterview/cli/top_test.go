package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/utils/ptr"

	"github.com/tangram-gpu/tangram/pkg/clusterview/usageview"
	"github.com/tangram-gpu/tangram/pkg/device"
)

func pluginPod(ns, name, node string, phase corev1.PodPhase) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{"app.kubernetes.io/component": "kubelet-plugin"}},
		Spec:       corev1.PodSpec{NodeName: node},
		Status:     corev1.PodStatus{Phase: phase},
	}
}

func cardSlice(node string, uuids ...string) *resourceapi.ResourceSlice {
	s := &resourceapi.ResourceSlice{
		ObjectMeta: metav1.ObjectMeta{Name: node + "-gpu"},
		Spec:       resourceapi.ResourceSliceSpec{Driver: device.DriverName, NodeName: ptr.To(node)},
	}
	for i, uuid := range uuids {
		s.Spec.Devices = append(s.Spec.Devices, resourceapi.Device{Name: device.CardDeviceName(i),
			Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{device.AttrUUID: {StringValue: ptr.To(uuid)}}})
	}
	return s
}

// metricsOf serves node's metrics: a share over its memory on the second
// of two cards.
func metricsOf(node string) []byte {
	return []byte(strings.NewReplacer("NODE", node).Replace(`# TYPE tangram_gpu_claim_memory_used_bytes gauge
tangram_gpu_claim_memory_used_bytes{claim="infer",device="gpu-1",namespace="team",node="NODE"} 5.36870912e+09
# TYPE tangram_gpu_claim_memory_allowed_bytes gauge
tangram_gpu_claim_memory_allowed_bytes{claim="infer",device="gpu-1",namespace="team",node="NODE"} 4.294967296e+09
# TYPE tangram_gpu_claim_memory_over gauge
tangram_gpu_claim_memory_over{claim="infer",device="gpu-1",namespace="team",node="NODE"} 1
# TYPE tangram_gpu_card_memory_used_bytes gauge
tangram_gpu_card_memory_used_bytes{node="NODE",uuid="GPU-A"} 0
tangram_gpu_card_memory_used_bytes{node="NODE",uuid="GPU-B"} 5.36870912e+09
# TYPE tangram_gpu_usage_round_timestamp_seconds gauge
tangram_gpu_usage_round_timestamp_seconds{node="NODE"} 1.7723664e+09
`))
}

// fakeMetrics serves metricsOf each pod's node, but fails for the pods
// in failing, and records what it read.
type fakeMetrics struct {
	failing []string
	mu      sync.Mutex
	read    []string
}

func (f *fakeMetrics) read1(_ context.Context, pod *corev1.Pod) ([]byte, error) {
	f.mu.Lock()
	f.read = append(f.read, pod.Name)
	f.mu.Unlock()
	if slices.Contains(f.failing, pod.Name) {
		return nil, errors.New(`reading its /metrics through the API server: the server could not find the requested resource (get pods ` + pod.Name + `:metrics)`)
	}
	return metricsOf(pod.Spec.NodeName), nil
}

func runTop(t *testing.T, client *fake.Clientset, m *fakeMetrics, args ...string) (string, error) {
	t.Helper()
	var out bytes.Buffer
	cmd := newCommand(&out, func() (*clients, error) {
		return &clients{kube: client, namespace: "default", metrics: m.read1}, nil
	})
	cmd.SetArgs(append([]string{"top", "--color", "never"}, args...))
	cmd.SetOut(&out)
	cmd.SetErr(&out)
	err := cmd.ExecuteContext(context.Background())
	return out.String(), err
}

func topCluster() *fake.Clientset {
	return fake.NewClientset(
		pluginPod("tangram-system", "plugin-a", "n1", corev1.PodRunning),
		pluginPod("tangram-system", "plugin-b", "n2", corev1.PodRunning),
		pluginPod("tangram-system", "plugin-c", "n3", corev1.PodPending),
		pluginPod("tangram-system", "plugin-unscheduled", "", corev1.PodPending),
		pluginPod("elsewhere", "plugin-x", "n9", corev1.PodRunning),
		&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "tangram-system", Name: "controller"}, Spec: corev1.PodSpec{NodeName: "n1"}, Status: corev1.PodStatus{Phase: corev1.PodRunning}},
		cardSlice("n1", "GPU-A", "GPU-B"),
	)
}

// TestTop: every plugin pod's node is shown, those whose metrics could not
// be read too; the cards named from the slices, the share over its
// memory marked.
func TestTop(t *testing.T) {
	m := &fakeMetrics{failing: []string{"plugin-b"}}
	out, err := runTop(t, topCluster(), m)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"NODE n1  2 cards, 5 GiB used; read ",
		"  gpu-0   0 GiB  no GPU process\n",
		"  gpu-1   5 GiB  team/infer      gpu-1   5 GiB  4 GiB  125%   -  OVER\n",
		"NODE n2  usage not known\n  pod plugin-b: reading its /metrics through the API server: the server could not find the requested resource (get pods plugin-b:metrics)\n",
		"NODE n3  usage not known\n  pod plugin-c: the pod is Pending\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("top shows no %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "n9") || strings.Contains(out, "controller") {
		t.Errorf("top shows a pod that is not the plugin's in its namespace:\n%s", out)
	}
	slices.Sort(m.read)
	if want := []string{"plugin-a", "plugin-b"}; !slices.Equal(m.read, want) {
		t.Errorf("read the metrics of %v, want %v (the running plugin pods)", m.read, want)
	}

	out, err = runTop(t, topCluster(), &fakeMetrics{}, "-o", "json")
	if err != nil {
		t.Fatal(err)
	}
	var v usageview.View
	if err := json.Unmarshal([]byte(out), &v); err != nil {
		t.Fatalf("top -o json is not a View: %v\n%s", err, out)
	}
	if len(v.Nodes) != 3 || v.Nodes[0].Cards[1].Devices[0].Claim != "infer" || !v.Nodes[0].Cards[1].Devices[0].Over {
		t.Errorf("top -o json:\n%s", out)
	}
}

func TestTopNode(t *testing.T) {
	m := &fakeMetrics{}
	out, err := runTop(t, topCluster(), m, "--node", "n1")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "NODE n1") || strings.Contains(out, "NODE n2") || strings.Contains(out, "NODE n3") {
		t.Errorf("top --node n1 shows another node:\n%s", out)
	}
	if !slices.Equal(m.read, []string{"plugin-a"}) {
		t.Errorf("top --node n1 read %v, want only n1's plugin", m.read)
	}
	out, err = runTop(t, topCluster(), m, "--node", "n9", "--plugin-namespace", "elsewhere")
	if err != nil || !strings.Contains(out, "NODE n9") {
		t.Errorf("top --node n9 --plugin-namespace elsewhere = %v:\n%s", err, out)
	}
	// n9's cards have no slice: named by UUID.
	if !strings.Contains(out, "  GPU-B   5 GiB\n  ?") {
		t.Errorf("top of a node without slices does not name its cards by UUID:\n%s", out)
	}
}

func TestTopNoPlugin(t *testing.T) {
	tests := []struct {
		args    []string
		wantErr string
	}{
		{[]string{"--plugin-namespace", "gpu"}, "no kubelet plugin pod in namespace gpu with label app.kubernetes.io/component=kubelet-plugin: pass --plugin-namespace with the namespace Tangram is installed in"},
		{[]string{"--node", "n7"}, "no kubelet plugin pod on node n7 in namespace tangram-system with label app.kubernetes.io/component=kubelet-plugin: pass --plugin-namespace"},
	}
	for _, tt := range tests {
		_, err := runTop(t, topCluster(), &fakeMetrics{}, tt.args...)
		if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
			t.Errorf("top %v = %v, want %q", tt.args, err, tt.wantErr)
		}
	}
	client := topCluster()
	client.PrependReactor("list", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewForbidden(schema.GroupResource{Resource: "pods"}, "", errors.New("no"))
	})
	if _, err := runTop(t, client, &fakeMetrics{}); err == nil || !strings.Contains(err.Error(), "listing the kubelet plugin's pods (namespace tangram-system, label app.kubernetes.io/component=kubelet-plugin): pods is forbidden") {
		t.Errorf("top without the right to list the plugin's pods = %v", err)
	}
}

// TestTopWithoutSlices: cards are shown by UUID, and the view says why.
func TestTopWithoutSlices(t *testing.T) {
	client := topCluster()
	client.PrependReactor("list", "resourceslices", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewForbidden(schema.GroupResource{Group: "resource.k8s.io", Resource: "resourceslices"}, "", errors.New("no"))
	})
	out, err := runTop(t, client, &fakeMetrics{}, "--node", "n1")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "  GPU-A   0 GiB  no GPU process\n") || !strings.Contains(out, "Note: cards are shown by UUID: listing ResourceSlices failed: resourceslices.resource.k8s.io is forbidden") {
		t.Errorf("top without slices:\n%s", out)
	}
}

// TestMetricsPort: the declared port named metrics, else --metrics-address's
// (a plugin on the host's network declares no ports).
func TestMetricsPort(t *testing.T) {
	for _, tc := range []struct {
		name    string
		ports   []corev1.ContainerPort
		args    []string
		want    string
		wantErr string
	}{
		{name: "declared", ports: []corev1.ContainerPort{{Name: "healthz", ContainerPort: 51515}, {Name: "metrics", ContainerPort: 9400}}, args: []string{"--metrics-address=:9500"}, want: "9400"},
		{name: "host network: the flag's", args: []string{"run", "--metrics-address=:9401"}, want: "9401"},
		{name: "an address with a host", args: []string{"--metrics-address=0.0.0.0:9402"}, want: "9402"},
		{name: "metrics off", args: []string{"--metrics-address="}, wantErr: "serves no metrics"},
		{name: "neither", args: []string{"run"}, wantErr: "no port named metrics"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pod := &corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "plugin", Ports: tc.ports, Args: tc.args}}}}
			got, err := MetricsPort(pod)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want one with %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Errorf("MetricsPort = %q, %v; want %q", got, err, tc.want)
			}
		})
	}
}
