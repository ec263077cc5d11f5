package schedperf

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	"github.com/tangram-gpu/tangram/pkg/device"
	"github.com/tangram-gpu/tangram/pkg/dra"
	"github.com/tangram-gpu/tangram/pkg/gpu/fakegpu"
	"github.com/tangram-gpu/tangram/pkg/placement/sim"
	"github.com/tangram-gpu/tangram/pkg/resourceslices"
	"github.com/tangram-gpu/tangram/pkg/trace"
)

// BenchLabel is the only label of every selected workload; the benchmark
// sets the harness's label filter to it.
const BenchLabel = "tangram-bench"

// Workload is one test case of the harness with exactly one workload.
type Workload struct {
	Case, Name string
	// Source is "upstream" (upstream's YAML as shipped) or "tangram".
	Source string
	Nodes  int
	// Threshold is upstream's minimum for its own CI job (topic "dra"),
	// 0 where upstream sets none.
	Threshold float64
	testCase  map[string]any
}

// ID is "case/workload", the name the table and the selection use.
func (w Workload) ID() string { return w.Case + "/" + w.Name }

// Config is the harness's configuration file for this workload alone;
// schedulerConfig is the path of a KubeSchedulerConfiguration, empty for
// the harness's default (the stock profile).
func (w Workload) Config(schedulerConfig string) ([]byte, error) {
	tc := map[string]any{}
	for k, v := range w.testCase {
		tc[k] = v
	}
	if schedulerConfig != "" {
		tc["schedulerConfigPath"] = schedulerConfig
	}
	out, err := yaml.Marshal([]any{tc})
	if err != nil {
		return nil, fmt.Errorf("encoding the harness configuration of %s: %w", w.ID(), err)
	}
	return out, nil
}

// UpstreamWorkloads are the workloads of upstream's DRA configuration files
// (paths relative to k8sDir, the k8s.io/kubernetes module) whose
// "case/workload" ID is in ids, unchanged but for their labels and their
// template paths made absolute.
func UpstreamWorkloads(k8sDir string, files []string, ids []string) ([]Workload, error) {
	want := map[string]bool{}
	for _, id := range ids {
		want[id] = true
	}
	var out []Workload
	for _, f := range files {
		path := filepath.Join(k8sDir, f)
		data, err := os.ReadFile(path)
		if err != nil {
			return nil, fmt.Errorf("reading upstream's scheduler_perf configuration (is k8s.io/kubernetes v1.37.0 in the module cache? `go mod download` in cmd/tangram-scheduler): %w", err)
		}
		var cases []map[string]any
		if err := yaml.Unmarshal(data, &cases); err != nil {
			return nil, fmt.Errorf("parsing %s: %w", path, err)
		}
		for _, tc := range cases {
			absolutePaths(tc, filepath.Dir(path))
			name, _ := tc["name"].(string)
			workloads, _ := tc["workloads"].([]any)
			for _, wl := range workloads {
				m, _ := wl.(map[string]any)
				wname, _ := m["name"].(string)
				if !want[name+"/"+wname] {
					continue
				}
				delete(want, name+"/"+wname)
				w := Workload{Case: name, Name: wname, Source: "upstream"}
				if params, ok := m["params"].(map[string]any); ok {
					if n, ok := params["nodesWithDRA"].(float64); ok {
						w.Nodes = int(n)
					}
				}
				switch th := m["threshold"].(type) {
				case float64:
					w.Threshold = th
				case map[string]any:
					w.Threshold, _ = th["dra"].(float64)
				}
				m["labels"] = []any{BenchLabel}
				single := map[string]any{}
				for k, v := range tc {
					single[k] = v
				}
				single["workloads"] = []any{m}
				w.testCase = single
				out = append(out, w)
			}
		}
	}
	if len(want) > 0 {
		var missing []string
		for id := range want {
			missing = append(missing, id)
		}
		sort.Strings(missing)
		return nil, fmt.Errorf("upstream's configuration has no workload %s (names are case/workload of %s)", strings.Join(missing, ", "), strings.Join(files, ", "))
	}
	return out, nil
}

// absolutePaths makes every relative *Path string under v absolute
// against dir: the harness reads them relative to its working directory.
func absolutePaths(v any, dir string) {
	switch t := v.(type) {
	case map[string]any:
		for k, val := range t {
			if s, ok := val.(string); ok && strings.HasSuffix(k, "Path") && !filepath.IsAbs(s) {
				t[k] = filepath.Join(dir, s)
				continue
			}
			absolutePaths(val, dir)
		}
	case []any:
		for _, val := range t {
			absolutePaths(val, dir)
		}
	}
}

// TangramCase is the test case on Tangram's slices.
const TangramCase = "TangramSlices"

// ClaimKinds are the claims of the Tangram workloads, one per workload
// (the harness's steady state creates every pod from one template).
var ClaimKinds = map[string]resourceapi.DeviceClaim{
	// A 20 GiB share of a card: the shared class, consumable capacity.
	"share": {Requests: []resourceapi.DeviceRequest{dra.SharedGPU("gpu", resource.MustParse("20Gi"), resource.Quantity{})}},
	// One whole card.
	"whole": {Requests: []resourceapi.DeviceRequest{dra.WholeGPUs("gpu", 1)}},
	// Eight whole cards: a full DGX.
	"whole8": {Requests: []resourceapi.DeviceRequest{dra.WholeGPUs("gpu", 8)}},
	// NVLink gangs: 2 and 4 cards of one NVLink domain.
	"nvlink2": nvlinkGang(2),
	"nvlink4": nvlinkGang(4),
}

func nvlinkGang(n int64) resourceapi.DeviceClaim {
	return resourceapi.DeviceClaim{
		Requests: []resourceapi.DeviceRequest{dra.WholeGPUs("gpu", n)},
		Constraints: []resourceapi.DeviceConstraint{{
			Requests:       []string{"gpu"},
			MatchAttribute: ptr.To(resourceapi.FullyQualifiedName(device.DriverName + "/" + device.AttrNVLinkDomain)),
		}},
	}
}

// TangramWorkload names one workload on Tangram's slices: claim kind and
// node count.
type TangramWorkload struct {
	Kind  string
	Nodes int
}

// ParseTangramWorkload reads "<kind>_<n>nodes".
func ParseTangramWorkload(name string) (TangramWorkload, error) {
	m := regexp.MustCompile(`^([a-z0-9]+)_([0-9]+)nodes$`).FindStringSubmatch(name)
	if m == nil {
		return TangramWorkload{}, fmt.Errorf("tangram workload %q: want <kind>_<n>nodes", name)
	}
	if _, ok := ClaimKinds[m[1]]; !ok {
		var kinds []string
		for k := range ClaimKinds {
			kinds = append(kinds, k)
		}
		sort.Strings(kinds)
		return TangramWorkload{}, fmt.Errorf("tangram workload %q: unknown claim kind %q (known: %s)", name, m[1], strings.Join(kinds, ", "))
	}
	var n int
	fmt.Sscan(m[2], &n)
	if n < 2 {
		return TangramWorkload{}, fmt.Errorf("tangram workload %q: want at least 2 nodes", name)
	}
	return TangramWorkload{Kind: m[1], Nodes: n}, nil
}

// shape is one kind of node: its Node and ResourceSlice templates.
type shape struct {
	name     string
	node     string
	slice    string
	hasSlice bool
}

// TangramWorkloads writes the templates of the Tangram test case into dir
// and returns its workloads. The cluster is make bench-scheduler's: node i
// is a fake DGX H100 (8 × H100 80GB, sharing on) when i is even, else the
// i/2-th node of the openb node list (openbNodes), with the slices
// pkg/resourceslices publishes and the chart's DeviceClasses. Nodes of one
// shape are created by one createNodes/createAny pair, so a node's name
// is tangram-<shape>-<index>.
func TangramWorkloads(dir, openbNodes string, names []string, duration string) ([]Workload, error) {
	var wls []TangramWorkload
	maxNodes := 0
	for _, n := range names {
		w, err := ParseTangramWorkload(n)
		if err != nil {
			return nil, err
		}
		wls = append(wls, w)
		maxNodes = max(maxNodes, w.Nodes)
	}
	if len(wls) == 0 {
		return nil, nil
	}
	openb, err := trace.ReadNodes(openbNodes)
	if err != nil {
		return nil, fmt.Errorf("reading the openb node list: %w", err)
	}
	if len(openb) < maxNodes/2 {
		return nil, fmt.Errorf("the openb node list %s has %d nodes, %d wanted for %d nodes", openbNodes, len(openb), maxNodes/2, maxNodes)
	}
	// Shapes in order of first appearance; shapeOf[i] of node i.
	shapes := []*shape{}
	byKey := map[string]*shape{}
	shapeOf := make([]*shape, maxNodes)
	openbShapes := 0
	for i := range maxNodes {
		var key string
		var tn trace.Node
		if i%2 == 0 {
			key = "dgx"
		} else {
			tn = openb[i/2]
			key = fmt.Sprintf("%s/%d/%d/%d", tn.Model, tn.GPUs, tn.CPUMilli, tn.MemoryMiB)
		}
		s := byKey[key]
		if s == nil {
			s = &shape{name: "dgx"}
			if key != "dgx" {
				s.name = fmt.Sprintf("s%d", openbShapes)
				openbShapes++
			}
			if err := writeShape(dir, s, key == "dgx", tn); err != nil {
				return nil, err
			}
			byKey[key] = s
			shapes = append(shapes, s)
		}
		shapeOf[i] = s
	}
	if err := writeCommon(dir); err != nil {
		return nil, err
	}
	var template []any
	for _, s := range shapes {
		template = append(template, map[string]any{"opcode": "createNodes", "nodeTemplatePath": s.node, "countParam": "$n_" + s.name})
		if s.hasSlice {
			template = append(template, map[string]any{"opcode": "createAny", "templatePath": s.slice, "countParam": "$n_" + s.name})
		}
	}
	for i := range device.DeviceClasses() {
		template = append(template, map[string]any{"opcode": "createAny", "templatePath": filepath.Join(dir, fmt.Sprintf("deviceclass-%d.yaml", i))})
	}
	template = append(template,
		map[string]any{"opcode": "createAny", "templatePath": filepath.Join(dir, "claimtemplate.yaml"), "namespace": "test",
			"templateParams": map[string]any{"kind": "$kind"}},
		map[string]any{"opcode": "createPods", "namespace": "test", "countParam": "$measurePods", "steadyStateParam": "$steadyState",
			"durationParam": "$duration", "podTemplatePath": filepath.Join(dir, "pod.yaml"), "collectMetrics": true},
	)
	var out []Workload
	for i, w := range wls {
		params := map[string]any{"kind": w.Kind, "measurePods": 10, "steadyState": true, "duration": duration}
		for _, s := range shapes {
			params["n_"+s.name] = 0
		}
		for j := range w.Nodes {
			params["n_"+shapeOf[j].name] = params["n_"+shapeOf[j].name].(int) + 1
		}
		tc := map[string]any{
			"name":             TangramCase,
			"featureGates":     map[string]any{"DynamicResourceAllocation": true, "DRAConsumableCapacity": true},
			"workloadTemplate": template,
			"workloads":        []any{map[string]any{"name": names[i], "labels": []any{BenchLabel}, "params": params}},
		}
		out = append(out, Workload{Case: TangramCase, Name: names[i], Source: "tangram", Nodes: w.Nodes, testCase: tc})
	}
	return out, nil
}

// placeholder stands for the node's index in names; the harness's
// text/template fills it in.
const placeholder = "IDX"

func writeShape(dir string, s *shape, dgx bool, tn trace.Node) error {
	nodeName := "tangram-" + s.name + "-" + placeholder
	var devices []resourceapi.Device
	var cpuMilli, memMiB int64
	if dgx {
		profile, err := fakegpu.BuiltinProfile("dgx-h100")
		if err != nil {
			return err
		}
		gpus, err := fakegpu.NewFakeSource(nodeName, profile).GPUs(context.Background())
		if err != nil {
			return err
		}
		if devices, err = resourceslices.Devices(gpus, resourceslices.Options{NodeName: nodeName, Sharing: true}); err != nil {
			return fmt.Errorf("building the DGX H100 slice: %w", err)
		}
		cpuMilli, memMiB = 96000, 1<<20
	} else {
		tn.Name = nodeName
		cluster, err := sim.BuildCluster([]trace.Node{tn})
		if err != nil {
			return fmt.Errorf("building the slice of openb shape %s: %w", s.name, err)
		}
		for _, sl := range cluster.Slices[nodeName] {
			devices = append(devices, sl.Spec.Devices...)
		}
		cpuMilli, memMiB = tn.CPUMilli, tn.MemoryMiB
	}
	node := fmt.Sprintf(`apiVersion: v1
kind: Node
metadata:
  name: %[1]s
  labels:
    kubernetes.io/hostname: %[1]s
spec: {}
status:
  capacity:
    pods: "250"
    cpu: %[2]dm
    memory: %[3]dMi
  allocatable:
    pods: "250"
    cpu: %[2]dm
    memory: %[3]dMi
  conditions:
  - status: "True"
    type: Ready
  phase: Running
`, nodeName, cpuMilli, memMiB)
	s.node = filepath.Join(dir, "node-"+s.name+".yaml")
	if err := writeTemplate(s.node, []byte(node)); err != nil {
		return err
	}
	if len(devices) == 0 {
		return nil
	}
	slice := &resourceapi.ResourceSlice{
		TypeMeta:   metav1.TypeMeta{APIVersion: "resource.k8s.io/v1", Kind: "ResourceSlice"},
		ObjectMeta: metav1.ObjectMeta{Name: nodeName + "-gpu"},
		Spec: resourceapi.ResourceSliceSpec{Driver: device.DriverName, NodeName: ptr.To(nodeName), Devices: devices,
			Pool: resourceapi.ResourcePool{Name: nodeName, ResourceSliceCount: 1}},
	}
	data, err := yaml.Marshal(slice)
	if err != nil {
		return fmt.Errorf("encoding the slice of shape %s: %w", s.name, err)
	}
	s.slice, s.hasSlice = filepath.Join(dir, "slice-"+s.name+".yaml"), true
	return writeTemplate(s.slice, data)
}

// writeTemplate writes data with every placeholder replaced by the
// template's index.
func writeTemplate(path string, data []byte) error {
	text := strings.ReplaceAll(string(data), placeholder, "{{.Index}}")
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		return fmt.Errorf("writing a harness template: %w", err)
	}
	return nil
}

// writeCommon writes the DeviceClasses, the claim template (one branch per
// claim kind) and the pod.
func writeCommon(dir string) error {
	for i, dc := range device.DeviceClasses() {
		dc = dc.DeepCopy()
		dc.TypeMeta = metav1.TypeMeta{APIVersion: "resource.k8s.io/v1", Kind: "DeviceClass"}
		data, err := yaml.Marshal(dc)
		if err != nil {
			return fmt.Errorf("encoding DeviceClass %s: %w", dc.Name, err)
		}
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("deviceclass-%d.yaml", i)), data, 0o644); err != nil {
			return fmt.Errorf("writing a harness template: %w", err)
		}
	}
	var kinds []string
	for k := range ClaimKinds {
		kinds = append(kinds, k)
	}
	sort.Strings(kinds)
	var b strings.Builder
	for i, k := range kinds {
		rct := &resourceapi.ResourceClaimTemplate{
			TypeMeta:   metav1.TypeMeta{APIVersion: "resource.k8s.io/v1", Kind: "ResourceClaimTemplate"},
			ObjectMeta: metav1.ObjectMeta{Name: "tangram-claim"},
			Spec:       resourceapi.ResourceClaimTemplateSpec{Spec: resourceapi.ResourceClaimSpec{Devices: ClaimKinds[k]}},
		}
		data, err := yaml.Marshal(rct)
		if err != nil {
			return fmt.Errorf("encoding claim kind %s: %w", k, err)
		}
		if i == 0 {
			fmt.Fprintf(&b, "{{if eq .kind %q}}\n", k)
		} else {
			fmt.Fprintf(&b, "{{else if eq .kind %q}}\n", k)
		}
		b.Write(data)
	}
	b.WriteString("{{end}}\n")
	if err := os.WriteFile(filepath.Join(dir, "claimtemplate.yaml"), []byte(b.String()), 0o644); err != nil {
		return fmt.Errorf("writing a harness template: %w", err)
	}
	pod := `apiVersion: v1
kind: Pod
metadata:
  generateName: tangram-
spec:
  containers:
  - image: registry.k8s.io/pause:3.10.1
    name: pause
    resources:
      requests:
        cpu: "1"
        memory: 2Gi
      claims:
      - name: gpu
  resourceClaims:
  - name: gpu
    resourceClaimTemplateName: tangram-claim
`
	if err := os.WriteFile(filepath.Join(dir, "pod.yaml"), []byte(pod), 0o644); err != nil {
		return fmt.Errorf("writing a harness template: %w", err)
	}
	return nil
}
