package enforcement

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestDetect(t *testing.T) {
	v2dmem := []string{"cpuset", "cpu", "io", "memory", "pids", "dmem"}
	v2 := []string{"cpuset", "cpu", "io", "memory", "pids"}
	tests := []struct {
		name       string
		in         Inputs
		want       Level
		wantMemory bool
		wantReason string // substring; "" = none
	}{
		{"615, kernel 6.14, v2 + dmem", Inputs{"615.23.01", "6.14.0-1007-nvidia", true, v2dmem}, Hard, true, ""},
		{"620, kernel 6.18, v2 + dmem", Inputs{"620.10", "6.18.44", true, v2dmem}, Hard, true, ""},
		{"615, kernel 6.8 (driver fallback), v2", Inputs{"615.23.01", "6.8.0-45-generic", true, v2}, Hard, true, ""},
		{"615, kernel 6.14 without dmem", Inputs{"615.23.01", "6.14.2", true, v2}, ComputeOnly, false, "no dmem controller"},
		{"615, kernel 7.0 without dmem", Inputs{"615.23.01", "7.0.1", true, v2}, ComputeOnly, false, "no dmem controller"},
		{"615, cgroup v1", Inputs{"615.23.01", "6.14.0", false, nil}, ComputeOnly, false, "not on cgroup v2"},
		{"615, dmem listed but v1 (nonsense input)", Inputs{"615.23.01", "6.14.0", false, []string{"dmem"}}, ComputeOnly, false, "not on cgroup v2"},
		{"615, kernel unreadable", Inputs{"615.23.01", "", true, v2dmem}, ComputeOnly, false, "unreadable"},
		{"615, kernel 6.14-rc1", Inputs{"615.0", "6.14-rc1", true, v2dmem}, Hard, true, ""},
		{"614, everything else there", Inputs{"614.99.99", "6.14.0", true, v2dmem}, Advisory, true, "older than release 615"},
		{"580 (today's drivers), v1", Inputs{"580.95.05", "6.8.0", false, nil}, Advisory, false, "older than release 615"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := Detect(tt.in)
			if err != nil {
				t.Fatal(err)
			}
			if c.Level != tt.want {
				t.Errorf("level %q, want %q (%+v)", c.Level, tt.want, c)
			}
			if c.MPSv3 != (c.DriverMajor >= 615) {
				t.Errorf("MPSv3 %v with driver %d", c.MPSv3, c.DriverMajor)
			}
			if tt.wantMemory != c.MemoryLimits && tt.want != Advisory {
				t.Errorf("MemoryLimits %v, want %v", c.MemoryLimits, tt.wantMemory)
			}
			if (tt.wantReason == "") != (c.Reason == "") || !strings.Contains(c.Reason, tt.wantReason) {
				t.Errorf("reason %q, want one containing %q", c.Reason, tt.wantReason)
			}
		})
	}
}

func TestDetectBadDriverVersion(t *testing.T) {
	for _, v := range []string{"", "r615", "-1.0"} {
		if _, err := Detect(Inputs{DriverVersion: v, KernelRelease: "6.14.0"}); err == nil || !strings.Contains(err.Error(), "driver version") {
			t.Errorf("Detect(driver %q) error %v, want one about the driver version", v, err)
		}
	}
}

func TestReadHost(t *testing.T) {
	tests := []struct {
		name        string
		osrelease   string // "" = missing
		controllers string // "" = missing (cgroup v1)
		want        Level
		wantErr     string
	}{
		{"v2 + dmem", "6.14.0-1007-nvidia\n", "cpuset cpu io memory pids dmem\n", Hard, ""},
		{"v2 without dmem on 6.14", "6.14.0\n", "cpu memory\n", ComputeOnly, ""},
		{"v1", "6.14.0\n", "", ComputeOnly, ""},
		{"no /proc", "", "cpu memory dmem\n", "", "reading the kernel release"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root := t.TempDir()
			proc, cgroup := filepath.Join(root, "proc"), filepath.Join(root, "cgroup")
			write(t, filepath.Join(proc, "sys", "kernel", "osrelease"), tt.osrelease)
			write(t, filepath.Join(cgroup, "cgroup.controllers"), tt.controllers)
			c, err := ReadHost("615.23.01", proc, cgroup)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if c.Level != tt.want {
				t.Errorf("level %q, want %q (%+v)", c.Level, tt.want, c)
			}
		})
	}
}

// write creates file with content; empty content leaves it out.
func write(t *testing.T, file, content string) {
	t.Helper()
	if content == "" {
		return
	}
	if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(file, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestForNode(t *testing.T) {
	root := t.TempDir()
	proc, cgroup := filepath.Join(root, "proc"), filepath.Join(root, "cgroup")
	write(t, filepath.Join(proc, "sys", "kernel", "osrelease"), "6.14.0\n")
	write(t, filepath.Join(cgroup, "cgroup.controllers"), "cpu memory dmem\n")
	tests := []struct {
		name       string
		fake       bool
		versions   []string
		procRoot   string
		want       Level
		wantReason string
	}{
		{"615 on v2 + dmem", false, []string{"", "615.23.01"}, proc, Hard, ""},
		{"fake GPUs", true, []string{"615.23.01"}, proc, Advisory, "fake GPUs"},
		{"no driver version", false, []string{"", ""}, proc, Advisory, "no card reports"},
		{"unreadable kernel release", false, []string{"615.23.01"}, filepath.Join(root, "missing"), Advisory, "reading the kernel release"},
		{"bad driver version", false, []string{"r615"}, proc, Advisory, "driver version"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := ForNode(tt.fake, tt.versions, tt.procRoot, cgroup)
			if c.Level != tt.want || !strings.Contains(c.Reason, tt.wantReason) || (tt.wantReason == "") != (c.Reason == "") {
				t.Errorf("ForNode = %q (%q), want %q with a reason containing %q", c.Level, c.Reason, tt.want, tt.wantReason)
			}
		})
	}
}
