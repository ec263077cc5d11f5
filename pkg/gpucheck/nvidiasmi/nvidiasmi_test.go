package nvidiasmi

import (
	"os"
	"reflect"
	"strings"
	"testing"
)

func readSMI(t *testing.T) Report {
	t.Helper()
	f, err := os.Open("testdata/nvidia-smi-q-2xh100.xml")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rep, err := Parse(f)
	if err != nil {
		t.Fatal(err)
	}
	return rep
}

func TestParseSMI(t *testing.T) {
	rep := readSMI(t)
	if rep.DriverVersion != "580.95.05" || rep.CUDAVersion != "13.0" || len(rep.Cards) != 2 {
		t.Fatalf("report %+v", rep)
	}
	for i, tc := range []struct {
		busID, uuid, compute string
		mib                  int64
		mig                  bool
	}{
		{"0000:1b:00.0", "GPU-aaaaaaaa-0000-0000-0000-000000000000", "Default", 81559, false},
		{"0000:43:00.0", "GPU-bbbbbbbb-0000-0000-0000-000000000000", "Exclusive_Process", 81559, true},
	} {
		c := rep.Cards[i]
		mib, ok := c.MemoryMiB()
		if c.BusID() != tc.busID || c.UUID != tc.uuid || c.ComputeMode != tc.compute || !ok || mib != tc.mib || c.MIGEnabled() != tc.mig {
			t.Errorf("card %d: %+v (bus %s, %d MiB, MIG %t)", i, c, c.BusID(), mib, c.MIGEnabled())
		}
	}
	for _, bad := range []string{"<nvidia_smi_log><driver_version>1</driver_version></nvidia_smi_log>", "not xml"} {
		if _, err := Parse(strings.NewReader(bad)); err == nil {
			t.Errorf("Parse(%q) succeeded", bad)
		}
	}
}

func TestSMIValues(t *testing.T) {
	for _, tc := range []struct {
		in, bus string
	}{
		{"00000000:1B:00.0", "0000:1b:00.0"},
		{"0001:c1:00.0", "0001:c1:00.0"},
		{"garbage", ""},
		{"zz:00:00.0", ""},
	} {
		if got := NormalBusID(tc.in); got != tc.bus {
			t.Errorf("NormalBusID(%q) = %q, want %q", tc.in, got, tc.bus)
		}
	}
	for _, tc := range []struct {
		in string
		ok bool
	}{{"81559 MiB", true}, {"N/A", false}, {"80 GiB", false}} {
		if _, ok := (Card{MemoryTotal: tc.in}).MemoryMiB(); ok != tc.ok {
			t.Errorf("MemoryMiB(%q) ok %t", tc.in, ok)
		}
	}
}

func TestParseTopology(t *testing.T) {
	sample, err := os.ReadFile("testdata/nvidia-smi-topo-2xh100.txt")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name    string
		in      string
		want    Topology
		wantErr bool
	}{
		{name: "two cards over NVLink, a NIC, the legend", in: string(sample), want: Topology{0: {1}, 1: {0}}},
		{name: "one card", in: "\tGPU0\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\nGPU0\t X \t0-15\t0\t\tN/A\n\nLegend:\n", want: Topology{0: {}}},
		{name: "PCIe only, coloured header", in: "\x1b[4mGPU0\tGPU1\tCPU Affinity\x1b[0m\nGPU0\t X \tPHB\t0-11\nGPU1\tPHB\t X \t0-11\n", want: Topology{0: {}, 1: {}}},
		{name: "four cards, two NVLink pairs", in: "\tGPU0\tGPU1\tGPU2\tGPU3\tCPU Affinity\nGPU0\t X \tNV4\tSYS\tSYS\t0\nGPU1\tNV4\t X \tSYS\tSYS\t0\nGPU2\tSYS\tSYS\t X \tNV4\t1\nGPU3\tSYS\tSYS\tNV4\t X \t1\n",
			want: Topology{0: {1}, 1: {0}, 2: {3}, 3: {2}}},
		{name: "no matrix", in: "NVML: not supported\n", wantErr: true},
		{name: "short row", in: "\tGPU0\tGPU1\nGPU0\t X\n", wantErr: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseTopology(strings.NewReader(tc.in))
			if (err != nil) != tc.wantErr {
				t.Fatalf("error %v, want error %t", err, tc.wantErr)
			}
			if !tc.wantErr && !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got %v, want %v", got, tc.want)
			}
		})
	}
}
