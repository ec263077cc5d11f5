// Package demo holds the demo specs and scripts. This test keeps the specs
// honest without a cluster: every object decodes strictly into the Kubernetes
// type it claims to be, every pod's claims resolve inside its own file, and
// each GpuConfig is accepted or rejected exactly as the kubelet plugin will.
package demo

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	schedulingv1beta1 "k8s.io/api/scheduling/v1beta1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes/scheme"

	"github.com/tangram-gpu/tangram/api/gpu/v1alpha1"
	tangramv1alpha1 "github.com/tangram-gpu/tangram/api/tangram/v1alpha1"
	"github.com/tangram-gpu/tangram/pkg/controller/gang"
	"github.com/tangram-gpu/tangram/pkg/device"
)

const (
	demoNamespace = "tangram-demo"
	// workloadImage is what `make images` builds from test/images/gpu-info (hack/images).
	workloadImage = "localhost/tangram/gpu-info:dev"
)

// specFile is what one demo spec contains once decoded.
type specFile struct {
	pods      []*corev1.Pod
	templates map[string]*resourceapi.ResourceClaimTemplate
	podGroups map[string]*schedulingv1beta1.PodGroup
	gangs     map[string]*tangramv1alpha1.GpuGang
	other     []runtime.Object
}

func loadSpec(t *testing.T, path string) specFile {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("reading %s: %v", path, err)
	}
	decoder := serializer.NewCodecFactory(demoScheme(t), serializer.EnableStrict).UniversalDeserializer()
	spec := specFile{
		templates: map[string]*resourceapi.ResourceClaimTemplate{},
		podGroups: map[string]*schedulingv1beta1.PodGroup{},
		gangs:     map[string]*tangramv1alpha1.GpuGang{},
	}
	reader := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	for i := 0; ; i++ {
		doc, err := reader.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("%s: reading YAML document %d: %v", path, i, err)
		}
		if len(bytes.TrimSpace(stripComments(doc))) == 0 {
			continue
		}
		obj, gvk, err := decoder.Decode(doc, nil, nil)
		if err != nil {
			t.Fatalf("%s: document %d does not decode strictly: %v", path, i, err)
		}
		switch o := obj.(type) {
		case *corev1.Pod:
			spec.pods = append(spec.pods, o)
		case *resourceapi.ResourceClaimTemplate:
			spec.templates[o.Name] = o
		case *schedulingv1beta1.PodGroup:
			spec.podGroups[o.Name] = o
		case *tangramv1alpha1.GpuGang:
			spec.gangs[o.Name] = o
			// The controller creates the gang's claim template; its members
			// name it, so it counts as part of the file.
			tmpl := gang.DesiredTemplate(o)
			spec.templates[tmpl.Name] = tmpl
		case *corev1.Namespace, *schedulingv1.PriorityClass:
			spec.other = append(spec.other, o)
		default:
			t.Fatalf("%s: document %d is a %s; the demo uses only Namespaces, PriorityClasses, Pods, ResourceClaimTemplates, PodGroups and GpuGangs", path, i, gvk)
		}
		if o, ok := obj.(interface{ GetNamespace() string }); ok {
			if clusterScoped(obj) {
				continue
			}
			if o.GetNamespace() != demoNamespace {
				t.Errorf("%s: document %d is in namespace %q, want %q", path, i, o.GetNamespace(), demoNamespace)
			}
		}
	}
	return spec
}

// demoScheme knows the Kubernetes types and Tangram's GpuGang.
func demoScheme(t *testing.T) *runtime.Scheme {
	t.Helper()
	s := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{scheme.AddToScheme, tangramv1alpha1.AddToScheme} {
		if err := add(s); err != nil {
			t.Fatalf("building the scheme: %v", err)
		}
	}
	return s
}

// clusterScoped objects have no namespace.
func clusterScoped(obj runtime.Object) bool {
	switch obj.(type) {
	case *corev1.Namespace, *schedulingv1.PriorityClass:
		return true
	}
	return false
}

func TestSpecs(t *testing.T) {
	tests := []struct {
		file string
		// pods and the number of devices each pod's claims request in total.
		wantDevices map[string]int64
		// wantConfigErr is the GpuConfig error the plugin must report ("" = valid).
		wantConfigErr string
		wantPodGroup  string
		// wantScheduler is every pod's spec.schedulerName ("" = the default scheduler).
		wantScheduler string
		// wantGpuGang: every pod is a member of this GpuGang of the same file.
		wantGpuGang string
		// wantPriorityClass is every pod's spec.priorityClassName.
		wantPriorityClass string
	}{
		{file: "01-whole-card.yaml", wantDevices: map[string]int64{"whole-card": 1}},
		{file: "02-memory-shares.yaml", wantDevices: map[string]int64{"share-a": 1, "share-b": 1, "share-c": 1}},
		{file: "03-nvlink-pair.yaml", wantDevices: map[string]int64{"nvlink-pair": 2}},
		{file: "04-podgroup-gang.yaml", wantDevices: map[string]int64{"trainer-0": 1, "trainer-1": 1, "trainer-2": 1}, wantPodGroup: "trainers"},
		{
			file:          "05-mistake-bad-config.yaml",
			wantDevices:   map[string]int64{"bad-config": 1},
			wantConfigErr: `sharing.mps.defaultActiveThreadPercentage: Invalid value: 150: must be between 1 and 100 (percent of the card's streaming multiprocessors)`,
		},
		{file: "06-packing-stock.yaml", wantDevices: map[string]int64{"next-share-stock": 1}},
		// The chart's default scheduler.schedulerName.
		{file: "07-packing-tangram.yaml", wantDevices: map[string]int64{"next-share-tangram": 1}, wantScheduler: "tangram"},
		{file: "08-gpugang.yaml", wantDevices: map[string]int64{"finetune-0": 2, "finetune-1": 2}, wantGpuGang: "finetune"},
		{file: "09-preemption-fill.yaml", wantDevices: map[string]int64{
			"low-0": 1, "low-1": 1, "low-2": 1, "low-3": 1, "low-4": 1, "low-5": 1, "low-6": 1, "low-7": 1,
		}, wantPriorityClass: "tangram-demo-low"},
		{file: "10-preemption-high.yaml", wantDevices: map[string]int64{"urgent": 1}, wantScheduler: "tangram",
			wantPriorityClass: "tangram-demo-high"},
		// A share of any node runs (advisory on fake GPUs); one of the hard
		// class would take a card of a "hard" node, and stays Pending here.
		{file: "11-hard-enforcement.yaml", wantDevices: map[string]int64{"runs-advisory": 1, "needs-hard": 1}},
	}
	seen := map[string]bool{"00-namespace.yaml": true}
	for _, tc := range tests {
		seen[tc.file] = true
		t.Run(tc.file, func(t *testing.T) {
			spec := loadSpec(t, filepath.Join("specs", tc.file))
			gotDevices := map[string]int64{}
			for _, pod := range spec.pods {
				gotDevices[pod.Name] = checkPod(t, pod, spec)
				if pod.Spec.PriorityClassName != tc.wantPriorityClass {
					t.Errorf("pod %s: priorityClassName %q, want %q", pod.Name, pod.Spec.PriorityClassName, tc.wantPriorityClass)
				}
				if pod.Spec.SchedulerName != tc.wantScheduler {
					t.Errorf("pod %s: schedulerName %q, want %q", pod.Name, pod.Spec.SchedulerName, tc.wantScheduler)
				}
				if tc.wantPodGroup != "" {
					checkGangMember(t, pod, spec, tc.wantPodGroup)
				}
				if tc.wantGpuGang != "" {
					checkGpuGangMember(t, pod, spec, tc.wantGpuGang)
				}
			}
			if !equalCounts(gotDevices, tc.wantDevices) {
				t.Errorf("devices per pod = %v, want %v", gotDevices, tc.wantDevices)
			}
			if tc.wantPodGroup != "" {
				pg := spec.podGroups[tc.wantPodGroup]
				if pg == nil || pg.Spec.SchedulingPolicy.Gang == nil {
					t.Fatalf("PodGroup %q with a gang policy is missing", tc.wantPodGroup)
				}
				if got := int(pg.Spec.SchedulingPolicy.Gang.MinCount); got != len(spec.pods) {
					t.Errorf("gang minCount = %d but the spec has %d members", got, len(spec.pods))
				}
			}
			checkConfigs(t, spec, tc.wantConfigErr)
		})
	}
	// A spec added to the directory must be added to the table too.
	entries, err := os.ReadDir("specs")
	if err != nil {
		t.Fatalf("listing specs: %v", err)
	}
	for _, e := range entries {
		if !seen[e.Name()] {
			t.Errorf("specs/%s is not covered by TestSpecs", e.Name())
		}
	}
}

// checkPod verifies the pod uses the demo workload, that every container
// claim names a pod claim and every pod claim names a template of the same
// file. It returns how many devices the pod's claims request.
func checkPod(t *testing.T, pod *corev1.Pod, spec specFile) int64 {
	t.Helper()
	podClaims := map[string]string{}
	for _, c := range pod.Spec.ResourceClaims {
		if c.ResourceClaimTemplateName == nil {
			t.Errorf("pod %s claim %s: the demo uses templates, so every pod gets its own claim", pod.Name, c.Name)
			continue
		}
		podClaims[c.Name] = *c.ResourceClaimTemplateName
	}
	for _, ctr := range pod.Spec.Containers {
		if ctr.Image != workloadImage {
			t.Errorf("pod %s container %s: image %q, want the demo workload %q", pod.Name, ctr.Name, ctr.Image, workloadImage)
		}
		if ctr.ImagePullPolicy != corev1.PullIfNotPresent {
			t.Errorf("pod %s: imagePullPolicy %q, want IfNotPresent (images come from archives, not a registry)", pod.Name, ctr.ImagePullPolicy)
		}
		for _, rc := range ctr.Resources.Claims {
			if _, ok := podClaims[rc.Name]; !ok {
				t.Errorf("pod %s container %s uses claim %q that the pod does not declare", pod.Name, ctr.Name, rc.Name)
			}
		}
	}
	var devices int64
	for claim, tmplName := range podClaims {
		tmpl, ok := spec.templates[tmplName]
		if !ok {
			t.Errorf("pod %s claim %s: template %q is not in the same file", pod.Name, claim, tmplName)
			continue
		}
		for _, req := range tmpl.Spec.Spec.Devices.Requests {
			if req.Exactly == nil {
				t.Errorf("template %s request %s: want an exact request", tmplName, req.Name)
				continue
			}
			switch req.Exactly.DeviceClassName {
			case device.DeviceClassName, device.SharedDeviceClassName, device.HardSharedDeviceClassName:
			default:
				t.Errorf("template %s request %s: class %q is not one the chart installs", tmplName, req.Name, req.Exactly.DeviceClassName)
			}
			if req.Exactly.Count > 0 {
				devices += req.Exactly.Count
			} else {
				devices++
			}
		}
	}
	return devices
}

func checkGangMember(t *testing.T, pod *corev1.Pod, spec specFile, group string) {
	t.Helper()
	sg := pod.Spec.SchedulingGroup
	if sg == nil || sg.PodGroupName == nil || *sg.PodGroupName != group {
		t.Errorf("pod %s is not a member of PodGroup %q", pod.Name, group)
	}
	if _, ok := spec.podGroups[group]; !ok {
		t.Errorf("PodGroup %q is not in the same file as its members", group)
	}
}

// checkGpuGangMember verifies the pod names the PodGroup the GpuGang's
// controller creates, and that the gang has as many members as the file has
// pods.
func checkGpuGangMember(t *testing.T, pod *corev1.Pod, spec specFile, name string) {
	t.Helper()
	g, ok := spec.gangs[name]
	if !ok {
		t.Fatalf("GpuGang %q is not in the same file as its members", name)
	}
	sg := pod.Spec.SchedulingGroup
	if sg == nil || sg.PodGroupName == nil || *sg.PodGroupName != gang.PodGroupName(g) {
		t.Errorf("pod %s does not name PodGroup %q of GpuGang %s", pod.Name, gang.PodGroupName(g), name)
	}
	if int(g.Spec.Members.Count) != len(spec.pods) {
		t.Errorf("GpuGang %s has %d members but the file has %d pods", name, g.Spec.Members.Count, len(spec.pods))
	}
}

// checkConfigs validates every GpuConfig of the file the way the plugin does.
func checkConfigs(t *testing.T, spec specFile, wantErr string) {
	t.Helper()
	var errs []string
	for _, tmpl := range spec.templates {
		for _, cfg := range tmpl.Spec.Spec.Devices.Config {
			if cfg.Opaque == nil || cfg.Opaque.Driver != device.DriverName {
				continue
			}
			if err := v1alpha1.ValidateOpaqueConfig(cfg.Opaque.Parameters.Raw); err != nil {
				errs = append(errs, err.Error())
			}
		}
	}
	sort.Strings(errs)
	got := strings.Join(errs, "\n")
	if got != wantErr {
		t.Errorf("GpuConfig validation errors:\n got: %q\nwant: %q", got, wantErr)
	}
}

func equalCounts(a, b map[string]int64) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// stripComments drops comment-only lines so a document made only of comments
// counts as empty.
func stripComments(doc []byte) []byte {
	var out bytes.Buffer
	for _, line := range bytes.Split(doc, []byte("\n")) {
		if !bytes.HasPrefix(bytes.TrimSpace(line), []byte("#")) {
			out.Write(line)
			out.WriteByte('\n')
		}
	}
	return out.Bytes()
}
