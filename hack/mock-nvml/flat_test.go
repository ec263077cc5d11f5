package mocknvml

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tangram-gpu/tangram/pkg/gpu/fakegpu"
)

func TestFlattenWiresNVLinks(t *testing.T) {
	tests := []struct {
		profile string
		want    []string // lines that must appear
		notWant []string
	}{
		// All-to-all: NVSwitches at bus IDs no card uses.
		{"dgx-h100", []string{"nvlink 0 00000000:01:00.0", "nvlink 7 00000000:04:00.0", "gpu 4 4 " + fakegpu.FakeGPUUUID("n", 4) + " 00000000:9D:00.0 85899345920 1 9 14 9 0"}, []string{"nvlink 0 00000000:43:00.0"}},
		// Bridges: straight to the peer.
		{"pcie-a100-pairs", []string{"nvlink 0 00000000:31:00.0", "nvlink 1 00000000:17:00.0", "driver 580.95.05 13000"}, []string{"nvlink 0 00000000:01:00.0"}},
		{"pcie-l4", []string{"name 0 NVIDIA L4"}, []string{"nvlink"}},
	}
	for _, tt := range tests {
		t.Run(tt.profile, func(t *testing.T) {
			p, err := fakegpu.BuiltinProfile(tt.profile)
			if err != nil {
				t.Fatal(err)
			}
			out, err := Flatten(p, "n")
			if err != nil {
				t.Fatal(err)
			}
			text := string(out)
			if !strings.HasPrefix(text, FormatVersion+"\n") {
				t.Errorf("missing format line:\n%s", text)
			}
			for _, w := range tt.want {
				if !strings.Contains(text, w+"\n") {
					t.Errorf("missing line %q in:\n%s", w, text)
				}
			}
			for _, w := range tt.notWant {
				if strings.Contains(text, w) {
					t.Errorf("unexpected %q in:\n%s", w, text)
				}
			}
		})
	}
}

func TestFlattenRejects(t *testing.T) {
	card := func(i int, bus string) fakegpu.ProfileGPU {
		return fakegpu.ProfileGPU{Index: i, ProductName: "X", Memory: "1Gi", PCIBusID: bus, DriverVersion: "580.95.05", CUDADriverVersion: "13.0"}
	}
	many := make([]int, 0, 19)
	cards := []fakegpu.ProfileGPU{card(0, "0000:10:00.0")}
	for i := 1; i <= 19; i++ {
		many = append(many, i)
		cards = append(cards, card(i, "0000:"+string("0123456789abcdef"[i/16])+string("0123456789abcdef"[i%16])+":01.0"))
	}
	cards[0].NVLinks = many
	for i := 1; i <= 19; i++ {
		cards[i].NVLinks = []int{0}
	}
	mixed := []fakegpu.ProfileGPU{card(0, "0000:10:00.0"), card(1, "0000:11:00.0")}
	mixed[1].DriverVersion = "570.1.2"
	noBus := []fakegpu.ProfileGPU{card(0, "")}
	fabric := []fakegpu.ProfileGPU{card(0, "0000:10:00.0")}
	fabric[0].FabricCliqueID = "default/1"
	tests := []struct {
		name  string
		cards []fakegpu.ProfileGPU
		node  string
		want  string
	}{
		{"no node", noBus, "", "the node name is empty"},
		{"no bus ID", noBus, "n", "pciBusID is empty"},
		{"two drivers", mixed, "n", "one NVML library has one driver"},
		{"too many links", cards, "n", "has 19 NVLink peers; NVML has at most 18"},
		{"fabric not a UUID", fabric, "n", `"default/1": want <cluster UUID>/<clique id>`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Flatten(&fakegpu.Profile{Name: "t", GPUs: tt.cards}, tt.node)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %v, want one containing %q", err, tt.want)
			}
		})
	}
}

func TestCSourceQuotes(t *testing.T) {
	got := CSource([]byte("a \"b\"\\\n"), "/s")
	want := "const char tangram_mock_builtin_devices[] = \"a \\\"b\\\"\\\\\\n\"\n  \"\";\n"
	if !strings.Contains(got, want) || !strings.Contains(got, `tangram_mock_default_state_dir[] = "/s";`) {
		t.Errorf("CSource:\n%s", got)
	}
}

func TestWriteSysfsResolvesToPCIeRoots(t *testing.T) {
	p, err := fakegpu.BuiltinProfile("dgx-h100")
	if err != nil {
		t.Fatal(err)
	}
	sys := t.TempDir()
	if err := WriteSysfs(sys, p); err != nil {
		t.Fatal(err)
	}
	// Twice: re-creating a driver root over an old one works.
	if err := WriteSysfs(sys, p); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct{ bus, root string }{{"0000:1b:00.0", "pci0000:1a"}, {"0000:df:00.0", "pci0000:de"}} {
		target, err := os.Readlink(filepath.Join(sys, "bus/pci/devices", tt.bus))
		if err != nil {
			t.Fatal(err)
		}
		want := "../../../devices/" + tt.root + "/" + strings.TrimPrefix(tt.root, "pci") + ":00.0/" + tt.bus
		if target != want {
			t.Errorf("%s -> %s, want %s", tt.bus, target, want)
		}
		numa, err := os.ReadFile(filepath.Join(sys, "bus/pci/devices", tt.bus, "numa_node"))
		if err != nil || len(numa) == 0 {
			t.Errorf("numa_node of %s: %q, %v", tt.bus, numa, err)
		}
	}
	if _, err := PCIeRoot("0000:00:01.0"); err == nil {
		t.Error("a card on bus 00 got a root port before it")
	}
}
