package gpucheck

import (
	"os"
	"strings"
	"testing"

	"github.com/tangram-gpu/tangram/pkg/gpu"
	"github.com/tangram-gpu/tangram/pkg/gpucheck/nvidiasmi"
)

func ptr(i int) *int { return &i }

// readSMI is the `nvidia-smi -q -x` of two H100s that pkg/gpucheck/nvidiasmi
// tests its reader on.
func readSMI(t *testing.T) nvidiasmi.Report {
	t.Helper()
	f, err := os.Open("nvidiasmi/testdata/nvidia-smi-q-2xh100.xml")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rep, err := nvidiasmi.Parse(f)
	if err != nil {
		t.Fatal(err)
	}
	return rep
}

func pluginCards() []gpu.GPU {
	return []gpu.GPU{
		{Index: 0, Minor: 0, UUID: "GPU-aaaaaaaa-0000-0000-0000-000000000000", ProductName: "NVIDIA H100 80GB HBM3", Architecture: "hopper",
			DriverVersion: "580.95.05", MemoryBytes: 81559<<20 + 12345, PCIBusID: "0000:1b:00.0", NUMANode: ptr(0), NVLinkPeers: []int{1}},
		{Index: 1, Minor: 1, UUID: "GPU-bbbbbbbb-0000-0000-0000-000000000000", ProductName: "NVIDIA H100 80GB HBM3", Architecture: "hopper",
			DriverVersion: "580.95.05", MemoryBytes: 81559 << 20, PCIBusID: "0000:43:00.0", NUMANode: ptr(1), NVLinkPeers: []int{0}},
	}
}

func TestCompareInventory(t *testing.T) {
	smi := readSMI(t)
	ref := Reference{SMI: smi, Topology: nvidiasmi.Topology{0: {1}, 1: {0}}, NUMA: map[string]int{"0000:1b:00.0": 0, "0000:43:00.0": 1}}
	for _, tc := range []struct {
		name   string
		change func(cards []gpu.GPU, ref *Reference) []gpu.GPU
		want   []string // substrings of the mismatches, in order
		pass   bool
	}{
		{name: "equal", change: func(c []gpu.GPU, _ *Reference) []gpu.GPU { return c }, pass: true},
		{name: "memory", change: func(c []gpu.GPU, _ *Reference) []gpu.GPU { c[1].MemoryBytes = 80000 << 20; return c },
			want: []string{`GPU-bbbbbbbb-0000-0000-0000-000000000000 memory (MiB): plugin "80000", machine "81559"`}},
		{name: "bus id and NUMA", change: func(c []gpu.GPU, _ *Reference) []gpu.GPU {
			c[0].PCIBusID, c[0].NUMANode = "0000:1c:00.0", nil
			return c
		}, want: []string{`PCI bus id: plugin "0000:1c:00.0", machine "0000:1b:00.0"`, `NUMA node: plugin "none", machine "0"`}},
		{name: "kernel says no NUMA node", change: func(c []gpu.GPU, r *Reference) []gpu.GPU {
			r.NUMA = map[string]int{"0000:1b:00.0": -1}
			c[0].NUMANode = nil
			return c
		}, pass: true},
		{name: "NVLink peers missing", change: func(c []gpu.GPU, _ *Reference) []gpu.GPU { c[0].NVLinkPeers, c[1].NVLinkPeers = nil, nil; return c },
			want: []string{`NVLink peers: plugin "none", machine "GPU-bbbbbbbb`, `NVLink peers: plugin "none", machine "GPU-aaaaaaaa`}},
		{name: "no topology: NVLink not compared", change: func(c []gpu.GPU, r *Reference) []gpu.GPU {
			r.Topology = nil
			c[0].NVLinkPeers = nil
			return c
		}, pass: true},
		{name: "card missing from the plugin", change: func(c []gpu.GPU, _ *Reference) []gpu.GPU { c[1].NVLinkPeers = nil; return c[:1] },
			want: []string{`node cards: plugin "1", machine "2"`, `GPU-aaaaaaaa-0000-0000-0000-000000000000 NVLink peers: plugin "index 1 (unknown)"`, `GPU-bbbbbbbb-0000-0000-0000-000000000000 listed by the plugin: plugin "no"`}},
		{name: "card unknown to nvidia-smi", change: func(c []gpu.GPU, _ *Reference) []gpu.GPU {
			return append(c, gpu.GPU{Index: 2, UUID: "GPU-cccc"})
		}, want: []string{`node cards: plugin "3", machine "2"`, `GPU-cccc listed by nvidia-smi: plugin "yes", machine "no"`}},
		{name: "driver version", change: func(c []gpu.GPU, _ *Reference) []gpu.GPU { c[0].DriverVersion = "580.95"; return c },
			want: []string{`driver version: plugin "580.95", machine "580.95.05"`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := ref
			r.NUMA = map[string]int{"0000:1b:00.0": 0, "0000:43:00.0": 1}
			cards := tc.change(pluginCards(), &r)
			mismatches, compared := CompareInventory(cards, r)
			if compared < 10 {
				t.Errorf("only %d values compared", compared)
			}
			if len(mismatches) != len(tc.want) {
				t.Fatalf("mismatches %v, want %d: %q", mismatches, len(tc.want), tc.want)
			}
			for i, w := range tc.want {
				if !strings.Contains(mismatches[i].String(), w) {
					t.Errorf("mismatch %d = %q, want it to contain %q", i, mismatches[i], w)
				}
			}
			out := InventoryOutcome(cards, r)
			if (out.Result == Passed) != tc.pass {
				t.Errorf("outcome %+v, pass %t", out, tc.pass)
			}
		})
	}
}
