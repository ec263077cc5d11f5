package nvcaps

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// realMIGMinorsSHA256 is the sha256 of /proc/driver/nvidia-caps/mig-minors
// on the H200 node of docs/gpu-reports/h200-580.159.04-mig-caps.txt
// (driver 580.159.04, MIG mode off; 4322 lines, trailing newline).
const realMIGMinorsSHA256 = "bf95c04e94568e2998ba7eb6faecbf2c45003e4ec7201629cee11a7cb9de3a9b"

// realDevices is /proc/devices of that node: the lines the report shows
// (grep nvidia) inside the kernel's layout, with a few ordinary devices.
const realDevices = `Character devices:
  1 mem
  4 /dev/vc/0
  4 tty
195 nvidia
195 nvidiactl
238 nvidia-uvm
239 nvidia-nvswitch
240 nvidia-nvlink
241 nvidia-caps
242 nvidia-caps-imex-channels

Block devices:
  7 loop
241 blkext
`

// TestGenerateMIGMinorsIsTheRealFile: the generator (which the mock driver
// root writes) produces the real driver's file byte for byte, and the
// parser reads it with the lines the report shows.
func TestGenerateMIGMinorsIsTheRealFile(t *testing.T) {
	data := GenerateMIGMinors()
	sum := sha256.Sum256(data)
	if got := hex.EncodeToString(sum[:]); got != realMIGMinorsSHA256 {
		t.Errorf("GenerateMIGMinors sha256 = %s, want the real file's %s", got, realMIGMinorsSHA256)
	}
	if n := strings.Count(string(data), "\n"); n != 4322 {
		t.Errorf("GenerateMIGMinors has %d lines, want the real file's 4322", n)
	}
	minors, err := ParseMIGMinors(data)
	if err != nil {
		t.Fatalf("ParseMIGMinors(real file): %v", err)
	}
	// The lines docs/gpu-reports/h200-580.159.04-mig-caps.txt shows.
	for c, want := range map[Cap]uint32{"config": 1, "monitor": 2, "gpu0/gi0/access": 3, "gpu0/gi0/ci0/access": 4, "gpu0/gi0/ci1/access": 5} {
		if got, err := minors.Minor(c); err != nil || got != want {
			t.Errorf("Minor(%s) = %d, %v; want %d", c, got, err, want)
		}
	}
	if len(minors) != 4322 {
		t.Errorf("parsed %d capabilities, want 4322", len(minors))
	}
}

func TestFormulaMinors(t *testing.T) {
	tests := []struct {
		gpu, gi, ci    int
		wantGI, wantCI uint32
	}{
		{0, 0, 0, 3, 4},
		{0, 0, 1, 3, 5},
		{0, 1, 0, 12, 13},
		{0, 14, 7, 129, 137},
		{1, 0, 0, 138, 139},
		{31, 14, 7, 4314, 4322},
	}
	for _, tc := range tests {
		gi, ci := FormulaMinors(tc.gpu, tc.gi, tc.ci)
		if gi != tc.wantGI || ci != tc.wantCI {
			t.Errorf("FormulaMinors(%d, %d, %d) = %d, %d; want %d, %d", tc.gpu, tc.gi, tc.ci, gi, ci, tc.wantGI, tc.wantCI)
		}
	}
}

func TestParseMIGMinors(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		want    MIGMinors
		wantErr string
	}{
		{name: "the real head", in: "config 1\nmonitor 2\ngpu0/gi0/access 3\n", want: MIGMinors{"config": 1, "monitor": 2, "gpu0/gi0/access": 3}},
		{name: "no trailing newline", in: "config 1", want: MIGMinors{"config": 1}},
		{name: "empty file", in: "", want: MIGMinors{}},
		{name: "one field", in: "config 1\nmonitor\n", wantErr: `line 2 "monitor": want "<capability> <minor>"`},
		{name: "three fields", in: "config 1 2\n", wantErr: `line 1 "config 1 2"`},
		{name: "not a number", in: "config x\n", wantErr: `line 1 "config x": minor "x" is not a number`},
		{name: "negative", in: "config -1\n", wantErr: `minor "-1" is not a number`},
		{name: "blank line", in: "config 1\n\nmonitor 2\n", wantErr: `line 2 ""`},
		{name: "twice", in: "config 1\nconfig 2\n", wantErr: `line 2 "config 2": capability config listed twice`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseMIGMinors([]byte(tc.in))
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want one containing %q", err, tc.wantErr)
				}
				if !strings.Contains(err.Error(), MIGMinorsFile) {
					t.Errorf("err = %v does not name %s", err, MIGMinorsFile)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got %v, want %v", got, tc.want)
			}
		})
	}
}

func TestParseDevices(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		want    Devices
		wantErr string
	}{
		{name: "the real layout; block devices left out", in: realDevices, want: Devices{
			"mem": 1, "/dev/vc/0": 4, "tty": 4, "nvidia": 195, "nvidiactl": 195, "nvidia-uvm": 238,
			"nvidia-nvswitch": 239, "nvidia-nvlink": 240, "nvidia-caps": 241, "nvidia-caps-imex-channels": 242}},
		{name: "no header", in: "241 nvidia-caps\n", wantErr: `line 1 "241 nvidia-caps": a device before the "Character devices:" header`},
		{name: "bad major", in: "Character devices:\nx nvidia\n", wantErr: `line 2 "x nvidia": major "x" is not a number`},
		{name: "three fields", in: "Character devices:\n1 a b\n", wantErr: `line 2 "1 a b": want "<major> <name>"`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseDevices([]byte(tc.in))
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got %v, want %v", got, tc.want)
			}
		})
	}
	d, _ := ParseDevices([]byte(realDevices))
	if _, err := d.CharMajor("blkext"); err == nil || !strings.Contains(err.Error(), `no character device "blkext"`) {
		t.Errorf("CharMajor(a block device) err = %v", err)
	}
}

func TestMIGNodes(t *testing.T) {
	minors, err := ParseMIGMinors(GenerateMIGMinors())
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name             string
		gpuMinor, gi, ci int
		want             []Node
		wantErr          string
	}{
		{name: "card 0, GI 7 (a 1g), CI 0", gpuMinor: 0, gi: 7, ci: 0, want: []Node{
			{Path: "/dev/nvidia-caps/nvidia-cap66", Major: 241, Minor: 66}, {Path: "/dev/nvidia-caps/nvidia-cap67", Major: 241, Minor: 67}}},
		{name: "card minor 2, GI 1, CI 0", gpuMinor: 2, gi: 1, ci: 0, want: []Node{
			{Path: "/dev/nvidia-caps/nvidia-cap282", Major: 241, Minor: 282}, {Path: "/dev/nvidia-caps/nvidia-cap283", Major: 241, Minor: 283}}},
		{name: "GPU instance beyond the file", gpuMinor: 0, gi: 15, ci: 0, wantErr: "capability gpu0/gi15/access is not in driver/nvidia-caps/mig-minors"},
		{name: "compute instance beyond the file", gpuMinor: 0, gi: 0, ci: 8, wantErr: "gpu0/gi0/ci8/access is not in"},
		{name: "card beyond the file", gpuMinor: 32, gi: 0, ci: 0, wantErr: "MIG device (card minor 32, GPU instance 0, compute instance 0)"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := MIGNodes(minors, 241, tc.gpuMinor, tc.gi, tc.ci)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestRead(t *testing.T) {
	write := func(t *testing.T, root, name, data string) {
		t.Helper()
		p := filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	tests := []struct {
		name      string
		minors    string // "" leaves the file out
		devices   string
		wantMajor uint32
		wantErr   []string
	}{
		{name: "both files", minors: "config 1\n", devices: realDevices, wantMajor: 241},
		{name: "no mig-minors", devices: realDevices, wantErr: []string{"driver/nvidia-caps/mig-minors: no such file", "NVIDIA kernel module publishes it", "point --proc-root at it"}},
		{name: "no devices", minors: "config 1\n", wantErr: []string{"/devices: no such file", "every Linux kernel publishes it, so this is not a proc root", "--proc-root"}},
		{name: "no nvidia-caps major", minors: "config 1\n", devices: "Character devices:\n195 nvidia\n", wantErr: []string{`no character device "nvidia-caps"`}},
		{name: "bad mig-minors", minors: "config\n", devices: realDevices, wantErr: []string{"mig-minors", `line 1 "config"`}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			if tc.minors != "" {
				write(t, root, MIGMinorsFile, tc.minors)
			}
			if tc.devices != "" {
				write(t, root, DevicesFile, tc.devices)
			}
			got, err := Read(root, "--proc-root")
			if len(tc.wantErr) > 0 {
				if err == nil {
					t.Fatal("no error")
				}
				for _, w := range tc.wantErr {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("err = %v, want it to contain %q", err, w)
					}
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got.CapsMajor != tc.wantMajor || got.Minors[ConfigCap] != 1 {
				t.Errorf("got %+v", got)
			}
		})
	}
}

func TestParseCapabilityFile(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		want    CapabilityFile
		wantErr string
	}{
		// The H200's mig/config and mig/monitor (docs/gpu-reports/h200-580.159.04-mig-caps.txt).
		{name: "config", in: "DeviceFileMinor: 1\nDeviceFileMode: 256\nDeviceFileModify: 1\n", want: CapabilityFile{DeviceFileMinor: 1, DeviceFileMode: 256}},
		{name: "monitor", in: "DeviceFileMinor: 2\nDeviceFileMode: 292\nDeviceFileModify: 1\n", want: CapabilityFile{DeviceFileMinor: 2, DeviceFileMode: 292}},
		{name: "no minor", in: "DeviceFileMode: 256\n", wantErr: "no DeviceFileMinor line"},
		{name: "no colon", in: "DeviceFileMinor 1\n", wantErr: `line 1 "DeviceFileMinor 1"`},
		{name: "not a number", in: "DeviceFileMinor: x\n", wantErr: `line 1 "DeviceFileMinor: x": "x" is not a number`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseCapabilityFile([]byte(tc.in))
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Errorf("got %+v, %v; want %+v", got, err, tc.want)
			}
		})
	}
}
