//go:build cgo

package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	resourceapi "k8s.io/api/resource/v1"

	mocknvml "github.com/tangram-gpu/tangram/hack/mock-nvml"
	"github.com/tangram-gpu/tangram/pkg/gpu/fakegpu"
)

// TestSlicesFromDriverRoot runs `slices` the way a GPU node does, with
// NVML loaded from --driver-root (here the C mock library, serving its
// built-in dgx-h100 as node mock-node) and PCIe roots read from
// --sysfs-root, and wants what --fake-profile dgx-h100 publishes plus the
// pcieRoot of each card.
func TestSlicesFromDriverRoot(t *testing.T) {
	lib, err := mocknvml.Build("")
	if err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	libDir := filepath.Join(root, "usr/lib64")
	if err := os.MkdirAll(libDir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(lib, filepath.Join(libDir, "libnvidia-ml.so.1")); err != nil {
		t.Fatal(err)
	}
	profile, err := fakegpu.BuiltinProfile("dgx-h100")
	if err != nil {
		t.Fatal(err)
	}
	if err := mocknvml.WriteSysfs(filepath.Join(root, "sys"), profile); err != nil {
		t.Fatal(err)
	}
	t.Setenv(mocknvml.EnvDevicesFile, "")
	t.Setenv(mocknvml.EnvStateDir, t.TempDir())

	nvmlOut, err := runCommand(t, "slices", "--node-name", "mock-node", "--driver-root", root, "--sysfs-root", filepath.Join(root, "sys"), "-o", "json")
	if err != nil {
		t.Fatal(err)
	}
	fakeOut, err := runCommand(t, "slices", "--node-name", "mock-node", "--fake-profile", "dgx-h100", "-o", "json")
	if err != nil {
		t.Fatal(err)
	}
	got, want := decodeSlices(t, nvmlOut), decodeSlices(t, fakeOut)
	roots := 0
	for i := range got {
		for j := range got[i].Spec.Devices {
			dev := &got[i].Spec.Devices[j]
			bus := dev.Attributes["resource.kubernetes.io/pciBusID"].StringValue
			wantRoot, err := mocknvml.PCIeRoot(*bus)
			if err != nil {
				t.Fatal(err)
			}
			if r := dev.Attributes["resource.kubernetes.io/pcieRoot"].StringValue; r == nil || *r != wantRoot {
				t.Errorf("%s: pcieRoot %v, want %s from the mock sysfs", dev.Name, r, wantRoot)
			} else {
				roots++
			}
			delete(dev.Attributes, "resource.kubernetes.io/pcieRoot")
		}
	}
	if roots != 8 {
		t.Errorf("%d cards with pcieRoot, want 8", roots)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("slices from NVML differ from the fake profile's (-fake +nvml):\n%s", diff)
	}

	_, err = runCommand(t, "slices", "--node-name", "mock-node", "--driver-root", t.TempDir())
	if err == nil || !containsAll(err.Error(), "libnvidia-ml.so.1 not found under the NVIDIA driver root", "usr/lib64/libnvidia-ml.so.1", "--driver-root") {
		t.Errorf("empty driver root: %v", err)
	}
}

func decodeSlices(t *testing.T, out string) []resourceapi.ResourceSlice {
	t.Helper()
	var list struct {
		Items []resourceapi.ResourceSlice `json:"items"`
	}
	if err := json.Unmarshal([]byte(out), &list); err != nil {
		t.Fatalf("%v in %s", err, out)
	}
	if len(list.Items) == 0 {
		t.Fatalf("no slices in %s", out)
	}
	return list.Items
}

func containsAll(s string, parts ...string) bool {
	for _, p := range parts {
		if !strings.Contains(s, p) {
			return false
		}
	}
	return true
}

// TestSlicesShareEnforcementFromDriverRoot: the level published on every
// card follows the driver NVML reports and the --proc-root/--cgroup-root
// fixtures, as the realpath e2e's mock root sets them.
func TestSlicesShareEnforcementFromDriverRoot(t *testing.T) {
	lib, err := mocknvml.Build("")
	if err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "usr/lib64"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(lib, filepath.Join(root, "usr/lib64", "libnvidia-ml.so.1")); err != nil {
		t.Fatal(err)
	}
	proc := filepath.Join(root, "proc")
	writeFixture(t, filepath.Join(proc, "sys/kernel/osrelease"), "6.14.0-1007-nvidia\n")
	v2dmem, v1 := filepath.Join(root, "cgroup-v2"), filepath.Join(root, "cgroup-v1")
	writeFixture(t, filepath.Join(v2dmem, "cgroup.controllers"), "cpu io memory pids dmem\n")
	if err := os.MkdirAll(v1, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv(mocknvml.EnvStateDir, t.TempDir())

	for _, tt := range []struct {
		driver, cgroupRoot, want string
	}{
		{"615.23.01", v2dmem, "hard"},
		{"615.23.01", v1, "compute-only"},
		{"580.95.05", v2dmem, "advisory"},
	} {
		t.Run(tt.driver+" "+filepath.Base(tt.cgroupRoot), func(t *testing.T) {
			profile, err := fakegpu.BuiltinProfile("pcie-l4")
			if err != nil {
				t.Fatal(err)
			}
			for i := range profile.GPUs {
				profile.GPUs[i].DriverVersion = tt.driver
			}
			devices, err := mocknvml.Flatten(profile, "mock-node")
			if err != nil {
				t.Fatal(err)
			}
			file := filepath.Join(t.TempDir(), "devices")
			writeFixture(t, file, string(devices))
			t.Setenv(mocknvml.EnvDevicesFile, file)
			out, err := runCommand(t, "slices", "--node-name", "mock-node", "--driver-root", root,
				"--proc-root", proc, "--cgroup-root", tt.cgroupRoot, "-o", "json")
			if err != nil {
				t.Fatal(err)
			}
			n := 0
			for _, s := range decodeSlices(t, out) {
				for _, d := range s.Spec.Devices {
					n++
					if a := d.Attributes["shareEnforcement"].StringValue; a == nil || *a != tt.want {
						t.Errorf("%s: shareEnforcement %v, want %s", d.Name, a, tt.want)
					}
				}
			}
			if n == 0 {
				t.Fatal("no devices published")
			}
		})
	}
}

func writeFixture(t *testing.T, file, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(file, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}
