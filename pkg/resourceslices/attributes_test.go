package resourceslices

import (
	"io/fs"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/google/go-cmp/cmp"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/utils/ptr"

	"github.com/tangram-gpu/tangram/pkg/gpu"
)

func TestLabelAttributeName(t *testing.T) {
	tests := []struct {
		key     string
		want    resourceapi.QualifiedName
		wantErr string
	}{
		{key: "topology.kubernetes.io/zone", want: "topology.kubernetes.io/zone"},
		{key: "node.kubernetes.io/instance-type", want: "node.kubernetes.io/instance_type"},
		{key: "example.com/ib.zone-2", want: "example.com/ib_zone_2"},
		{key: "rack", want: "rack"},
		{key: "gpu.tangram.dev/pool", want: "pool"},
		{key: "2nd-rack", want: "_2nd_rack"},
		{key: "a/b/c", wantErr: "is not a valid label key"},
		{key: "", wantErr: "is not a valid label key"},
		{key: "example.com/" + strings.Repeat("a", 33), wantErr: "longer than the 32 characters"},
		{key: strings.Repeat("a", 64) + ".com/zone", wantErr: "longer than the 63 characters"},
	}
	for _, tc := range tests {
		t.Run(tc.key, func(t *testing.T) {
			got, err := LabelAttributeName(tc.key)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("want error containing %q, got %q, %v", tc.wantErr, got, err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("want %q, got %q, %v", tc.want, got, err)
			}
			if err := validateQualifiedName(got); err != nil {
				t.Errorf("%q is not a valid attribute name: %v", got, err)
			}
		})
	}
}

func TestNodeLabelAttributes(t *testing.T) {
	labels := map[string]string{
		"topology.kubernetes.io/zone":      "zone-a",
		"node.kubernetes.io/instance-type": "p5.48xlarge",
		"rack":                             "r12",
		"rack_name":                        "other",
	}
	tests := []struct {
		name    string
		keys    []string
		want    map[resourceapi.QualifiedName]string
		wantErr string
	}{
		{
			name: "labels present on the node are copied",
			keys: []string{"topology.kubernetes.io/zone", "node.kubernetes.io/instance-type", "rack"},
			want: map[resourceapi.QualifiedName]string{
				"topology.kubernetes.io/zone":      "zone-a",
				"node.kubernetes.io/instance_type": "p5.48xlarge",
				"rack":                             "r12",
			},
		},
		{
			name: "a missing label is simply not set",
			keys: []string{"example.com/ib-zone", "rack"},
			want: map[resourceapi.QualifiedName]string{"rack": "r12"},
		},
		{
			name: "a key listed twice is copied once",
			keys: []string{"rack", "rack"},
			want: map[resourceapi.QualifiedName]string{"rack": "r12"},
		},
		{name: "collision between labels", keys: []string{"rack-name", "rack_name"}, wantErr: `node label keys "rack-name" and "rack_name" both become attribute "rack_name"`},
		{name: "collision with a built-in attribute", keys: []string{"uuid"}, wantErr: `would become attribute "uuid", which Tangram already publishes`},
		{name: "collision with a driver-prefixed label", keys: []string{"gpu.tangram.dev/index"}, wantErr: `already publishes`},
		{name: "collision with a standard attribute", keys: []string{"resource.kubernetes.io/numaNode"}, wantErr: `already publishes`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			devs, err := Devices([]gpu.GPU{{Index: 0, MemoryBytes: 1 << 30}}, Options{NodeName: "n", NodeLabels: labels, NodeLabelAttributes: tc.keys})
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("want error containing %q, got %v", tc.wantErr, err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			got := map[resourceapi.QualifiedName]string{}
			for name, attr := range devs[0].Attributes {
				if builtinAttributes[name] {
					continue
				}
				got[name] = ptr.Deref(attr.StringValue, "<not a string>")
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("label attributes differ (-want +got):\n%s", diff)
			}
			if err := ValidateDevice(&devs[0]); err != nil {
				t.Error(err)
			}
		})
	}
}

func TestTooManyLabelAttributes(t *testing.T) {
	var keys []string
	labels := map[string]string{}
	for i := range 20 {
		key := "example.com/l" + strings.Repeat("x", i)
		keys = append(keys, key)
		labels[key] = "v"
	}
	numa := 0
	full := gpu.GPU{Index: 0, UUID: "GPU-1", ProductName: "p", Brand: "b", Architecture: "a", CUDAComputeCapability: "9.0",
		DriverVersion: "580.95.05", CUDADriverVersion: "13.0", MemoryBytes: 1 << 30, PCIBusID: "0000:18:00.0", NUMANode: &numa}
	_, err := Devices([]gpu.GPU{full}, Options{NodeName: "n", NodeLabels: labels, NodeLabelAttributes: keys})
	if err == nil || !strings.Contains(err.Error(), "exceed the API limit of 32; copy fewer node labels") {
		t.Fatalf("want a clear limit error, got %v", err)
	}
}

func TestPCIeRootFromSysfs(t *testing.T) {
	sysfs := fstest.MapFS{
		"bus/pci/devices/0000:1b:00.0":                 {Mode: fs.ModeSymlink | 0o777, Data: []byte("../../../devices/pci0000:15/0000:15:01.0/0000:1b:00.0")},
		"devices/pci0000:15/0000:15:01.0/0000:1b:00.0": {Mode: fs.ModeDir | 0o755},
	}
	gpus := []gpu.GPU{
		{Index: 0, MemoryBytes: 1 << 30, PCIBusID: "0000:1b:00.0"},
		{Index: 1, MemoryBytes: 1 << 30, PCIBusID: "0000:43:00.0"}, // not in sysfs
	}
	devs, err := Devices(gpus, Options{NodeName: "n", Sysfs: sysfs})
	if err != nil {
		t.Fatal(err)
	}
	if got := devs[0].Attributes["resource.kubernetes.io/pcieRoot"].StringValue; got == nil || *got != "pci0000:15" {
		t.Errorf("gpu-0: want pcieRoot pci0000:15, got %v", got)
	}
	if got, ok := devs[1].Attributes["resource.kubernetes.io/pcieRoot"]; ok {
		t.Errorf("gpu-1: want no pcieRoot, got %+v", got)
	}
	if _, ok := devs[1].Attributes["resource.kubernetes.io/pciBusID"]; !ok {
		t.Error("gpu-1: a missing sysfs entry must not drop pciBusID")
	}

	// Without sysfs (fake cards) pcieRoot is never derived.
	devs, err = Devices(gpus[:1], Options{NodeName: "n"})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := devs[0].Attributes["resource.kubernetes.io/pcieRoot"]; ok {
		t.Error("want no pcieRoot without sysfs")
	}
}
