package enforcement

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tangram-gpu/tangram/pkg/device"
)

var (
	v2dmem = []string{"cpuset", "cpu", "io", "memory", "pids", "dmem"}
	v2     = []string{"cpuset", "cpu", "io", "memory", "pids"}
	// goodChain: dmem enabled from the root down to the QoS cgroups.
	goodChain = []CgroupLevel{{"", v2dmem}, {"kubepods.slice", v2dmem}, {"kubepods.slice/kubepods-burstable.slice", v2dmem}, {"kubepods.slice/kubepods-besteffort.slice", v2dmem}}
)

// good is a node that can hold shares hard; each test case changes one thing.
func good(change func(*Inputs)) Inputs {
	in := Inputs{DriverVersion: "615.23.01", MemoryLimitsSymbol: true, KernelRelease: "6.14.0-1007-nvidia", CgroupV2: true,
		CgroupControllers: v2dmem, PodCgroupChain: goodChain}
	if change != nil {
		change(&in)
	}
	return in
}

func TestDetect(t *testing.T) {
	tests := []struct {
		name       string
		in         Inputs
		want       Level
		wantCode   string // "" = none
		wantReason string // substring
	}{
		{"615, kernel 6.14, dmem on every level", good(nil), Hard, "", ""},
		{"620, kernel 6.18", good(func(in *Inputs) { in.DriverVersion, in.KernelRelease = "620.10", "6.18.44" }), Hard, "", ""},
		{"kernel 6.14-rc1", good(func(in *Inputs) { in.KernelRelease = "6.14-rc1" }), Hard, "", ""},
		{"kernel 6.8: the driver's own backend, no dmem needed", good(func(in *Inputs) {
			in.KernelRelease, in.CgroupControllers, in.PodCgroupChain = "6.8.0-45-generic", v2, nil
		}), Hard, "", ""},
		// dmem only in the root's cgroup.controllers (today's detection said hard).
		{"dmem available but enabled nowhere", good(func(in *Inputs) {
			in.PodCgroupChain = []CgroupLevel{{"", v2}, {"kubepods.slice", v2}}
		}), ComputeOnly, device.ReasonDmemNotEnabled, "dmem is not enabled in /cgroup.subtree_control"},
		{"dmem enabled on the root only", good(func(in *Inputs) {
			in.PodCgroupChain = []CgroupLevel{{"", v2dmem}, {"kubepods.slice", v2}, {"kubepods.slice/kubepods-burstable.slice", v2}}
		}), ComputeOnly, device.ReasonDmemNotEnabled, "/kubepods.slice/cgroup.subtree_control"},
		{"dmem not enabled in the besteffort QoS cgroup", good(func(in *Inputs) {
			in.PodCgroupChain = append(append([]CgroupLevel{}, goodChain[:3]...), CgroupLevel{"kubepods.slice/kubepods-besteffort.slice", v2})
		}), ComputeOnly, device.ReasonDmemNotEnabled, "/kubepods.slice/kubepods-besteffort.slice/cgroup.subtree_control"},
		{"the kubelet's pods cgroup not found", good(func(in *Inputs) { in.PodCgroupChain = nil }), ComputeOnly, device.ReasonKubeletCgroupsNotFound, "kubepods"},
		{"kernel 6.14 without the dmem controller", good(func(in *Inputs) { in.CgroupControllers = v2 }), ComputeOnly, device.ReasonNoDmemController, "no dmem controller"},
		{"kernel 7.0 without the dmem controller", good(func(in *Inputs) { in.KernelRelease, in.CgroupControllers = "7.0.1", v2 }), ComputeOnly, device.ReasonNoDmemController, "no dmem controller"},
		{"cgroup v1", good(func(in *Inputs) { in.CgroupV2, in.CgroupControllers, in.PodCgroupChain = false, nil, nil }), ComputeOnly, device.ReasonNotCgroupV2, "not on cgroup v2"},
		{"dmem listed but v1 (nonsense input)", good(func(in *Inputs) { in.CgroupV2 = false }), ComputeOnly, device.ReasonNotCgroupV2, "not on cgroup v2"},
		{"kernel release unreadable", good(func(in *Inputs) { in.KernelRelease = "" }), ComputeOnly, device.ReasonKernelUnreadable, "unreadable"},
		{"MIG mode on a card", good(func(in *Inputs) { in.MIGEnabled = []string{"GPU-1"} }), ComputeOnly, device.ReasonMIGEnabled, "MIG mode is on for GPU-1"},
		{"615 whose NVML lacks the symbol", good(func(in *Inputs) { in.MemoryLimitsSymbol = false }), ComputeOnly, device.ReasonNoMemoryLimitsSymbol, "no nvmlDeviceSetMemoryLimits_v1"},
		{"614, everything else there", good(func(in *Inputs) { in.DriverVersion = "614.99.99" }), Advisory, device.ReasonDriverBefore615, "older than release 615"},
		{"580 (today's drivers), v1, no symbol", Inputs{DriverVersion: "580.95.05", KernelRelease: "6.8.0"}, Advisory, device.ReasonDriverBefore615, "older than release 615"},
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
			if c.MemoryLimits != (tt.want == Hard) {
				t.Errorf("MemoryLimits %v at level %s", c.MemoryLimits, c.Level)
			}
			if c.ReasonCode != tt.wantCode || (tt.wantCode == "") != (c.Reason == "") || !strings.Contains(c.Reason, tt.wantReason) {
				t.Errorf("reason %q (%q), want %q containing %q", c.ReasonCode, c.Reason, tt.wantCode, tt.wantReason)
			}
			if len(c.ReasonCode) > 64 {
				t.Errorf("reason code %q is longer than an attribute value may be", c.ReasonCode)
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

// tree writes files (path -> content) under a new directory.
func tree(t *testing.T, files map[string]string) string {
	t.Helper()
	root := t.TempDir()
	for name, content := range files {
		write(t, filepath.Join(root, name), content)
	}
	return root
}

func TestReadHost(t *testing.T) {
	const dm, nodm = "cpu memory pids dmem\n", "cpu memory pids\n"
	systemd := func(change map[string]string) map[string]string {
		files := map[string]string{
			"proc/sys/kernel/osrelease": "6.14.0-1007-nvidia\n",
			"cgroup/cgroup.controllers": "cpuset cpu io memory pids dmem\n", "cgroup/cgroup.subtree_control": dm,
			"cgroup/kubepods.slice/cgroup.subtree_control":                           dm,
			"cgroup/kubepods.slice/kubepods-burstable.slice/cgroup.subtree_control":  dm,
			"cgroup/kubepods.slice/kubepods-besteffort.slice/cgroup.subtree_control": dm,
		}
		for k, v := range change {
			if v == "" {
				delete(files, k)
			} else {
				files[k] = v
			}
		}
		return files
	}
	cgroupfs := map[string]string{
		"proc/sys/kernel/osrelease": "6.18.2\n",
		"cgroup/cgroup.controllers": "memory dmem\n", "cgroup/cgroup.subtree_control": dm,
		"cgroup/kubepods/cgroup.subtree_control":            dm,
		"cgroup/kubepods/burstable/cgroup.subtree_control":  dm,
		"cgroup/kubepods/besteffort/cgroup.subtree_control": nodm,
	}
	tests := []struct {
		name     string
		files    map[string]string
		kubelet  string
		want     Level
		wantCode string
		wantErr  string
	}{
		{"systemd, dmem down to the QoS cgroups", systemd(nil), "", Hard, "", ""},
		{"systemd: only the root's cgroup.controllers lists dmem", systemd(map[string]string{"cgroup/cgroup.subtree_control": nodm}), "", ComputeOnly, device.ReasonDmemNotEnabled, ""},
		{"systemd: not in kubepods.slice", systemd(map[string]string{"cgroup/kubepods.slice/cgroup.subtree_control": nodm}), "", ComputeOnly, device.ReasonDmemNotEnabled, ""},
		{"systemd: not in the burstable slice", systemd(map[string]string{"cgroup/kubepods.slice/kubepods-burstable.slice/cgroup.subtree_control": nodm}), "", ComputeOnly, device.ReasonDmemNotEnabled, ""},
		{"no kubelet cgroups under the root", systemd(map[string]string{
			"cgroup/kubepods.slice/cgroup.subtree_control": "", "cgroup/kubepods.slice/kubepods-burstable.slice/cgroup.subtree_control": "",
			"cgroup/kubepods.slice/kubepods-besteffort.slice/cgroup.subtree_control": ""}), "", ComputeOnly, device.ReasonKubeletCgroupsNotFound, ""},
		{"a kubelet --cgroup-root named by the flag", systemd(map[string]string{
			"cgroup/kubelet.slice/cgroup.subtree_control": dm, "cgroup/kubelet.slice/kubelet-kubepods.slice/cgroup.subtree_control": dm,
			"cgroup/kubelet.slice/kubelet-kubepods.slice/kubelet-kubepods-burstable.slice/cgroup.subtree_control": nodm}),
			"kubelet.slice/kubelet-kubepods.slice", ComputeOnly, device.ReasonDmemNotEnabled, ""},
		{"the flag names a cgroup that is not there", systemd(nil), "kubelet.slice/kubelet-kubepods.slice", ComputeOnly, device.ReasonKubeletCgroupsNotFound, ""},
		{"cgroupfs: not in besteffort", cgroupfs, "", ComputeOnly, device.ReasonDmemNotEnabled, ""},
		{"v1", map[string]string{"proc/sys/kernel/osrelease": "6.14.0\n", "cgroup/memory/kubepods/tasks": "1\n"}, "", ComputeOnly, device.ReasonNotCgroupV2, ""},
		{"no /proc", map[string]string{"cgroup/cgroup.controllers": dm}, "", "", "", "reading the kernel release"},
		{"a chain level without cgroup.subtree_control", systemd(map[string]string{"cgroup/kubepods.slice/cgroup.subtree_control": ""}), "", "", "", "kubepods.slice/cgroup.subtree_control"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root := tree(t, tt.files)
			c, err := ReadHost(Inputs{DriverVersion: "615.23.01", MemoryLimitsSymbol: true},
				Host{ProcRoot: filepath.Join(root, "proc"), CgroupRoot: filepath.Join(root, "cgroup"), KubeletCgroup: tt.kubelet})
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if c.Level != tt.want || c.ReasonCode != tt.wantCode {
				t.Errorf("level %q (%s: %s), want %q (%s)", c.Level, c.ReasonCode, c.Reason, tt.want, tt.wantCode)
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

type fakeDriver struct {
	symbol bool
	mig    []string
	err    error
}

func (d fakeDriver) HasMemoryLimitsSymbol() bool                  { return d.symbol }
func (d fakeDriver) MIGEnabled(context.Context) ([]string, error) { return d.mig, d.err }

func TestForNode(t *testing.T) {
	root := tree(t, map[string]string{
		"proc/sys/kernel/osrelease": "6.14.0\n",
		"cgroup/cgroup.controllers": "cpu memory dmem\n", "cgroup/cgroup.subtree_control": "dmem\n",
		"cgroup/kubepods/cgroup.subtree_control": "dmem\n",
	})
	host := Host{ProcRoot: filepath.Join(root, "proc"), CgroupRoot: filepath.Join(root, "cgroup")}
	ok := fakeDriver{symbol: true}
	tests := []struct {
		name     string
		fake     bool
		versions []string
		driver   Driver
		host     Host
		want     Level
		wantCode string
	}{
		{"615 on v2 + dmem down to kubepods", false, []string{"", "615.23.01"}, ok, host, Hard, ""},
		{"fake GPUs", true, []string{"615.23.01"}, ok, host, Advisory, device.ReasonFakeGPUs},
		{"no driver version", false, []string{"", ""}, ok, host, Advisory, device.ReasonDriverUnknown},
		{"unreadable kernel release", false, []string{"615.23.01"}, ok, Host{ProcRoot: filepath.Join(root, "missing"), CgroupRoot: host.CgroupRoot}, Advisory, device.ReasonHostUnreadable},
		{"bad driver version", false, []string{"r615"}, ok, host, Advisory, device.ReasonDriverUnknown},
		{"NVML without the symbol", false, []string{"615.23.01"}, fakeDriver{}, host, ComputeOnly, device.ReasonNoMemoryLimitsSymbol},
		{"a card in MIG mode", false, []string{"615.23.01"}, fakeDriver{symbol: true, mig: []string{"GPU-2"}}, host, ComputeOnly, device.ReasonMIGEnabled},
		{"no NVML to ask", false, []string{"615.23.01"}, nil, host, Advisory, device.ReasonHostUnreadable},
		{"MIG modes unreadable", false, []string{"615.23.01"}, fakeDriver{symbol: true, err: errors.New("boom")}, host, Advisory, device.ReasonHostUnreadable},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := ForNode(context.Background(), tt.fake, tt.versions, tt.driver, tt.host)
			if c.Level != tt.want || c.ReasonCode != tt.wantCode || (tt.wantCode == "") != (c.Reason == "") {
				t.Errorf("ForNode = %q (%s: %q), want %q (%s)", c.Level, c.ReasonCode, c.Reason, tt.want, tt.wantCode)
			}
		})
	}
}
