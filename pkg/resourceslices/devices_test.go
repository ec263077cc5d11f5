package resourceslices

import (
	"context"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/utils/ptr"

	"github.com/tangram-gpu/tangram/pkg/gpu"
	"github.com/tangram-gpu/tangram/pkg/gpu/fakegpu"
)

var quantityEqual = cmp.Comparer(func(a, b resource.Quantity) bool { return a.Cmp(b) == 0 })

// card is what a test expects of one published device.
type card struct {
	index         int
	uuid, product string
	brand, arch   string
	ccap, driver  string // published versions
	cuda          string
	memory        string
	busID         string
	numa          int
	domain        string
	peers         int
}

// expectedDevice writes out the device the device model prescribes for c.
func expectedDevice(c card, sharing bool) resourceapi.Device {
	str := func(s string) resourceapi.DeviceAttribute { return resourceapi.DeviceAttribute{StringValue: ptr.To(s)} }
	ver := func(s string) resourceapi.DeviceAttribute {
		return resourceapi.DeviceAttribute{VersionValue: ptr.To(s)}
	}
	num := func(n int) resourceapi.DeviceAttribute {
		return resourceapi.DeviceAttribute{IntValue: ptr.To(int64(n))}
	}
	d := resourceapi.Device{
		Name: "gpu-" + strconv.Itoa(c.index),
		Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
			"type":                            str("gpu"),
			"uuid":                            str(c.uuid),
			"index":                           num(c.index),
			"minor":                           num(c.index),
			"productName":                     str(c.product),
			"brand":                           str(c.brand),
			"architecture":                    str(c.arch),
			"cudaComputeCapability":           ver(c.ccap),
			"driverVersion":                   ver(c.driver),
			"cudaDriverVersion":               ver(c.cuda),
			"nvlinkDomain":                    str(c.domain),
			"nvlinkPeers":                     num(c.peers),
			"shareable":                       {BoolValue: ptr.To(sharing)},
			"resource.kubernetes.io/pciBusID": str(c.busID),
			"resource.kubernetes.io/numaNode": num(c.numa),
		},
		Capacity: map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{
			"memory":  {Value: resource.MustParse(c.memory)},
			"compute": {Value: resource.MustParse("100")},
		},
	}
	if sharing {
		d.AllowMultipleAllocations = ptr.To(true)
		mem := resource.MustParse(c.memory)
		d.Capacity["memory"] = resourceapi.DeviceCapacity{Value: mem, RequestPolicy: &resourceapi.CapacityRequestPolicy{
			Default:    &mem,
			ValidRange: &resourceapi.CapacityRequestPolicyRange{Min: ptr.To(resource.MustParse("0")), Max: &mem, Step: ptr.To(resource.MustParse("256Mi"))},
		}}
		d.Capacity["compute"] = resourceapi.DeviceCapacity{Value: resource.MustParse("100"), RequestPolicy: &resourceapi.CapacityRequestPolicy{
			Default:    ptr.To(resource.MustParse("0")),
			ValidRange: &resourceapi.CapacityRequestPolicyRange{Min: ptr.To(resource.MustParse("0")), Max: ptr.To(resource.MustParse("100")), Step: ptr.To(resource.MustParse("1"))},
		}}
	}
	return d
}

func profileGPUs(t *testing.T, profile, node string) []gpu.GPU {
	t.Helper()
	p, err := fakegpu.BuiltinProfile(profile)
	if err != nil {
		t.Fatal(err)
	}
	gpus, err := fakegpu.NewFakeSource(node, p).GPUs(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return gpus
}

func TestDevicesOfBuiltinProfiles(t *testing.T) {
	const node = "node-a"
	type cardSpec struct {
		bus    string
		numa   int
		domain string
		peers  int
	}
	tests := []struct {
		profile string
		product string
		arch    string
		ccap    string
		memory  string
		cards   []cardSpec
	}{
		{
			profile: "dgx-h100", product: "NVIDIA H100 80GB HBM3", arch: "hopper", ccap: "9.0.0", memory: "80Gi",
			cards: []cardSpec{
				{"0000:1b:00.0", 0, "node-a-nvl0", 7}, {"0000:43:00.0", 0, "node-a-nvl0", 7},
				{"0000:52:00.0", 0, "node-a-nvl0", 7}, {"0000:61:00.0", 0, "node-a-nvl0", 7},
				{"0000:9d:00.0", 1, "node-a-nvl0", 7}, {"0000:c3:00.0", 1, "node-a-nvl0", 7},
				{"0000:d1:00.0", 1, "node-a-nvl0", 7}, {"0000:df:00.0", 1, "node-a-nvl0", 7},
			},
		},
		{
			profile: "pcie-l4", product: "NVIDIA L4", arch: "ada-lovelace", ccap: "8.9.0", memory: "24Gi",
			cards: []cardSpec{
				{"0000:01:00.0", 0, "node-a-nvl0", 0}, {"0000:21:00.0", 0, "node-a-nvl1", 0},
				{"0000:81:00.0", 1, "node-a-nvl2", 0}, {"0000:a1:00.0", 1, "node-a-nvl3", 0},
			},
		},
		{
			profile: "pcie-a100-pairs", product: "NVIDIA A100-PCIE-40GB", arch: "ampere", ccap: "8.0.0", memory: "40Gi",
			cards: []cardSpec{
				{"0000:17:00.0", 0, "node-a-nvl0", 1}, {"0000:31:00.0", 0, "node-a-nvl0", 1},
				{"0000:4b:00.0", 0, "node-a-nvl2", 1}, {"0000:65:00.0", 0, "node-a-nvl2", 1},
				{"0000:98:00.0", 1, "node-a-nvl4", 1}, {"0000:b1:00.0", 1, "node-a-nvl4", 1},
				{"0000:ca:00.0", 1, "node-a-nvl6", 1}, {"0000:e3:00.0", 1, "node-a-nvl6", 1},
			},
		},
	}
	for _, tc := range tests {
		for _, sharing := range []bool{false, true} {
			t.Run(tc.profile+"/sharing="+strconv.FormatBool(sharing), func(t *testing.T) {
				gpus := profileGPUs(t, tc.profile, node)
				got, err := Devices(gpus, Options{NodeName: node, Sharing: sharing})
				if err != nil {
					t.Fatal(err)
				}
				var want []resourceapi.Device
				for i, c := range tc.cards {
					want = append(want, expectedDevice(card{
						index: i, uuid: fakegpu.FakeGPUUUID(node, i), product: tc.product, brand: "Nvidia", arch: tc.arch,
						ccap: tc.ccap, driver: "580.95.5", cuda: "13.0.0", memory: tc.memory,
						busID: c.bus, numa: c.numa, domain: c.domain, peers: c.peers,
					}, sharing))
				}
				if diff := cmp.Diff(want, got, quantityEqual); diff != "" {
					t.Errorf("devices differ (-want +got):\n%s", diff)
				}
				for i := range got {
					if err := ValidateDevice(&got[i]); err != nil {
						t.Errorf("published device is invalid: %v", err)
					}
				}
			})
		}
	}
}

func TestDevicesOddValues(t *testing.T) {
	numa := func(n int) *int { return &n }
	tests := []struct {
		name string
		gpu  gpu.GPU
		opts Options
		// attributes that must be present with these values (nil value:
		// must be absent)
		want     map[resourceapi.QualifiedName]*resourceapi.DeviceAttribute
		wantLogs []string
		check    func(t *testing.T, d resourceapi.Device)
	}{
		{
			name: "unparsable versions are left out with a log line",
			gpu:  gpu.GPU{Index: 0, MemoryBytes: 1 << 30, DriverVersion: "580.95.05-beta", CUDAComputeCapability: "n/a", CUDADriverVersion: "12.4"},
			want: map[resourceapi.QualifiedName]*resourceapi.DeviceAttribute{
				"driverVersion":         nil,
				"cudaComputeCapability": nil,
				"cudaDriverVersion":     {VersionValue: ptr.To("12.4.0")},
			},
			wantLogs: []string{`Version cannot be published; attribute left out gpu=0 attribute="driverVersion"`, `attribute="cudaComputeCapability"`},
		},
		{
			name: "four-part driver version keeps the fourth part as build metadata",
			gpu:  gpu.GPU{Index: 0, MemoryBytes: 1 << 30, DriverVersion: "525.85.12.01"},
			want: map[resourceapi.QualifiedName]*resourceapi.DeviceAttribute{"driverVersion": {VersionValue: ptr.To("525.85.12+01")}},
		},
		{
			name: "missing identity and topology are left out, never guessed",
			gpu:  gpu.GPU{Index: 3, Minor: 7, MemoryBytes: 1 << 30},
			want: map[resourceapi.QualifiedName]*resourceapi.DeviceAttribute{
				"uuid": nil, "productName": nil, "brand": nil, "architecture": nil,
				"resource.kubernetes.io/pciBusID": nil, "resource.kubernetes.io/numaNode": nil, "resource.kubernetes.io/pcieRoot": nil,
				"minor": {IntValue: ptr.To(int64(7))}, "index": {IntValue: ptr.To(int64(3))},
			},
		},
		{
			name: "NVML bus ID form is canonicalised, negative NUMA node left out",
			gpu:  gpu.GPU{Index: 0, MemoryBytes: 1 << 30, PCIBusID: "00000000:1B:00.0", NUMANode: numa(-1)},
			want: map[resourceapi.QualifiedName]*resourceapi.DeviceAttribute{
				"resource.kubernetes.io/pciBusID": {StringValue: ptr.To("0000:1b:00.0")},
				"resource.kubernetes.io/numaNode": nil,
			},
			wantLogs: []string{"NUMA node cannot be published"},
		},
		{
			name: "malformed bus ID is left out with a log line",
			gpu:  gpu.GPU{Index: 0, MemoryBytes: 1 << 30, PCIBusID: "18:00.0"},
			want: map[resourceapi.QualifiedName]*resourceapi.DeviceAttribute{
				"resource.kubernetes.io/pciBusID": nil,
			},
			wantLogs: []string{"PCI bus ID cannot be published"},
		},
		{
			name: "over-long product name is left out",
			gpu:  gpu.GPU{Index: 0, MemoryBytes: 1 << 30, ProductName: strings.Repeat("x", 65)},
			want: map[resourceapi.QualifiedName]*resourceapi.DeviceAttribute{"productName": nil},
		},
		{
			name: "card without memory size has no memory capacity and is not shareable",
			gpu:  gpu.GPU{Index: 0},
			opts: Options{Sharing: true},
			want: map[resourceapi.QualifiedName]*resourceapi.DeviceAttribute{"shareable": {BoolValue: ptr.To(false)}},
			check: func(t *testing.T, d resourceapi.Device) {
				if _, ok := d.Capacity["memory"]; ok || d.AllowMultipleAllocations != nil {
					t.Errorf("want no memory capacity and no allowMultipleAllocations, got %+v", d)
				}
			},
		},
		{
			name: "memory that is not a whole number of steps: the remainder stays unallocatable",
			gpu:  gpu.GPU{Index: 0, MemoryBytes: 81559 << 20}, // what NVML reports for an H100 80GB
			opts: Options{Sharing: true},
			want: map[resourceapi.QualifiedName]*resourceapi.DeviceAttribute{"shareable": {BoolValue: ptr.To(true)}},
			check: func(t *testing.T, d resourceapi.Device) {
				m := d.Capacity["memory"]
				if m.Value.Value() != 81559<<20 || m.RequestPolicy.Default.Value() != 81408<<20 || m.RequestPolicy.ValidRange.Max.Value() != 81408<<20 {
					t.Errorf("want capacity 81559Mi with default and max 81408Mi, got %s, %s, %s", &m.Value, m.RequestPolicy.Default, m.RequestPolicy.ValidRange.Max)
				}
			},
		},
		{
			name: "card smaller than two steps is whole-card only",
			gpu:  gpu.GPU{Index: 0, MemoryBytes: 256 << 20},
			opts: Options{Sharing: true},
			want: map[resourceapi.QualifiedName]*resourceapi.DeviceAttribute{"shareable": {BoolValue: ptr.To(false)}},
			check: func(t *testing.T, d resourceapi.Device) {
				if d.AllowMultipleAllocations != nil || d.Capacity["memory"].RequestPolicy != nil {
					t.Errorf("want a whole-card device, got %+v", d)
				}
			},
		},
		{
			name: "custom memory step",
			gpu:  gpu.GPU{Index: 0, MemoryBytes: 24 << 30},
			opts: Options{Sharing: true, MemoryStep: resource.MustParse("1Gi")},
			check: func(t *testing.T, d resourceapi.Device) {
				// Min is 0 so that admin access (monitoring) fits beside holders.
				if r := d.Capacity["memory"].RequestPolicy.ValidRange; r.Step.Value() != 1<<30 || r.Min.Value() != 0 {
					t.Errorf("want step 1Gi and min 0, got %s and %s", r.Step, r.Min)
				}
			},
		},
		{
			name: "peers are counted once, self-links ignored",
			gpu:  gpu.GPU{Index: 0, MemoryBytes: 1 << 30, NVLinkPeers: []int{0, 1, 1, 2}},
			want: map[resourceapi.QualifiedName]*resourceapi.DeviceAttribute{"nvlinkPeers": {IntValue: ptr.To(int64(2))}},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			logger := ktesting.NewLogger(t, ktesting.NewConfig(ktesting.BufferLogs(true)))
			opts := tc.opts
			opts.NodeName = "n1"
			opts.Logger = logger
			devs, err := Devices([]gpu.GPU{tc.gpu}, opts)
			if err != nil {
				t.Fatal(err)
			}
			d := devs[0]
			for name, want := range tc.want {
				got, ok := d.Attributes[name]
				switch {
				case want == nil && ok:
					t.Errorf("attribute %s: want absent, got %+v", name, got)
				case want != nil && !ok:
					t.Errorf("attribute %s: want %+v, absent", name, *want)
				case want != nil && !cmp.Equal(*want, got):
					t.Errorf("attribute %s: want %+v, got %+v", name, *want, got)
				}
			}
			logs := logger.GetSink().(ktesting.Underlier).GetBuffer().String()
			for _, want := range tc.wantLogs {
				if !strings.Contains(logs, want) {
					t.Errorf("log lacks %q; log:\n%s", want, logs)
				}
			}
			if tc.check != nil {
				tc.check(t, d)
			}
			if err := ValidateDevice(&d); err != nil {
				t.Errorf("published device is invalid: %v", err)
			}
		})
	}
}

func TestDevicesErrors(t *testing.T) {
	tests := []struct {
		name    string
		gpus    []gpu.GPU
		opts    Options
		wantErr string
	}{
		{"no node name", []gpu.GPU{{Index: 0}}, Options{}, "node name is empty"},
		{"duplicate index", []gpu.GPU{{Index: 1, UUID: "a"}, {Index: 1, UUID: "b"}}, Options{NodeName: "n"}, "two GPUs have index 1"},
		{"negative index", []gpu.GPU{{Index: -1}}, Options{NodeName: "n"}, "negative index -1"},
		{"bad memory step", []gpu.GPU{{Index: 0}}, Options{NodeName: "n", MemoryStep: resource.MustParse("-1")}, "memory step -1 must be a positive"},
		{"fractional memory step", []gpu.GPU{{Index: 0}}, Options{NodeName: "n", MemoryStep: resource.MustParse("500m")}, "memory step 500m must be a positive"},
		{"bad label key", []gpu.GPU{{Index: 0}}, Options{NodeName: "n", NodeLabelAttributes: []string{"a/b/c"}}, `node label key "a/b/c" is not a valid label key`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Devices(tc.gpus, tc.opts)
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("want error containing %q, got %v", tc.wantErr, err)
			}
		})
	}
}

func TestDevicesSortsByIndex(t *testing.T) {
	devs, err := Devices([]gpu.GPU{{Index: 2}, {Index: 0}, {Index: 1}}, Options{NodeName: "n", Logger: ktesting.NewLogger(t, ktesting.NewConfig())})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, d := range devs {
		got = append(got, d.Name)
	}
	if want := []string{"gpu-0", "gpu-1", "gpu-2"}; !cmp.Equal(want, got) {
		t.Errorf("want %v, got %v", want, got)
	}
}

func TestSemver(t *testing.T) {
	tests := []struct {
		in, want, wantErr string
	}{
		{in: "9.0", want: "9.0.0"},
		{in: "12", want: "12.0.0"},
		{in: "580.95.05", want: "580.95.5"},
		{in: "550.54.15", want: "550.54.15"},
		{in: "535.104.05", want: "535.104.5"},
		{in: "525.85.12.01", want: "525.85.12+01"},
		{in: "1.2.3.4.5", want: "1.2.3+4.5"},
		{in: " 13.0 ", want: "13.0.0"},
		{in: "00.00", want: "0.0.0"},
		{in: "", wantErr: "not dot-separated numbers"},
		{in: "v12.4", wantErr: "not dot-separated numbers"},
		{in: "12..4", wantErr: "not dot-separated numbers"},
		{in: "580.95.05-beta", wantErr: "not dot-separated numbers"},
		{in: "99999999999999999999.1", wantErr: "too large"},
	}
	for _, tc := range tests {
		t.Run(tc.in, func(t *testing.T) {
			got, err := Semver(tc.in)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("want error containing %q, got %q, %v", tc.wantErr, got, err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("want %q, got %q, %v", tc.want, got, err)
			}
			if !semverPattern.MatchString(got) {
				t.Errorf("%q is not semver", got)
			}
		})
	}
}

func TestDevicesShareEnforcement(t *testing.T) {
	for _, tt := range []struct {
		level string
		want  *string // nil: attribute left out
	}{
		{"", nil},
		{"hard", ptr.To("hard")},
		{"advisory", ptr.To("advisory")},
	} {
		t.Run(tt.level, func(t *testing.T) {
			devs, err := Devices([]gpu.GPU{{Index: 0}, {Index: 1}}, Options{NodeName: "n", ShareEnforcement: tt.level, Logger: ktesting.NewLogger(t, ktesting.NewConfig())})
			if err != nil {
				t.Fatal(err)
			}
			for _, d := range devs {
				attr, ok := d.Attributes["shareEnforcement"]
				if tt.want == nil {
					if ok {
						t.Errorf("%s: shareEnforcement %v published without a level", d.Name, attr)
					}
					continue
				}
				if !ok || attr.StringValue == nil || *attr.StringValue != *tt.want {
					t.Errorf("%s: shareEnforcement %v, want %q", d.Name, attr, *tt.want)
				}
			}
		})
	}
}

// TestDevicesShareBackend: the node's sharing backend is published on
// shareable cards only (the shared classes select on it), and left out
// when none is given or the card is whole-card only.
func TestDevicesShareBackend(t *testing.T) {
	const gib = int64(1) << 30
	for _, tt := range []struct {
		name    string
		sharing bool
		backend string
		want    *string // nil: attribute left out
	}{
		{"mps", true, "mps", ptr.To("mps")},
		{"none", true, "none", ptr.To("none")},
		{"unset", true, "", nil},
		{"whole-card node", false, "none", nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			devs, err := Devices([]gpu.GPU{{Index: 0, MemoryBytes: 80 * gib}, {Index: 1, MemoryBytes: 80 * gib}},
				Options{NodeName: "n", Sharing: tt.sharing, ShareBackend: tt.backend, Logger: ktesting.NewLogger(t, ktesting.NewConfig())})
			if err != nil {
				t.Fatal(err)
			}
			for _, d := range devs {
				attr, ok := d.Attributes["shareBackend"]
				if tt.want == nil {
					if ok {
						t.Errorf("%s: shareBackend %v published", d.Name, attr)
					}
					continue
				}
				if !ok || attr.StringValue == nil || *attr.StringValue != *tt.want {
					t.Errorf("%s: shareBackend %v, want %q", d.Name, attr, *tt.want)
				}
			}
		})
	}
}
