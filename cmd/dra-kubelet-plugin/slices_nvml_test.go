//go:build cgo

package main

import (
	"encoding/json"
	"os"
	"os/exec"
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
			// Both advisory, for different reasons.
			if r := dev.Attributes["shareEnforcementReason"].StringValue; r == nil || *r != "driver-before-615" {
				t.Errorf("%s: shareEnforcementReason %v, want driver-before-615 (the mock reports 580)", dev.Name, r)
			}
			delete(dev.Attributes, "shareEnforcementReason")
		}
	}
	for i := range want {
		for j := range want[i].Spec.Devices {
			delete(want[i].Spec.Devices[j].Attributes, "shareEnforcementReason")
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

// envRunCommand makes the test binary run the plugin's command with these
// arguments (JSON) and exit: one process loads one NVML library, so a test
// needing another build of the mock runs the command in a child.
const envRunCommand = "TANGRAM_PLUGIN_TEST_ARGS"

func TestMain(m *testing.M) {
	if args := os.Getenv(envRunCommand); args != "" {
		var argv []string
		if err := json.Unmarshal([]byte(args), &argv); err != nil {
			panic(err)
		}
		root := newRootCommand()
		root.SetArgs(argv)
		if err := root.Execute(); err != nil {
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// runInChild runs the command in a child process with env added; it
// returns its stdout.
func runInChild(t *testing.T, env []string, args ...string) string {
	t.Helper()
	argv, _ := json.Marshal(args)
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(append(os.Environ(), envRunCommand+"="+string(argv)), env...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%v: %v\n%s", args, err, stderr.String())
	}
	return string(out)
}

// TestSlicesShareEnforcementFromDriverRoot: the level (and, below hard,
// the reason) published on every card follows the driver NVML reports,
// whether its library has the memory limit call, the cards' MIG modes and
// the --proc-root/--cgroup-root fixtures, as the realpath e2e's mock root
// sets them.
func TestSlicesShareEnforcementFromDriverRoot(t *testing.T) {
	dir := t.TempDir()
	roots := map[string]string{}
	for _, driver := range []string{"615.23.01", "580.95.05"} {
		lib, err := mocknvml.BuildDriver(filepath.Join(dir, "build-"+driver), driver)
		if err != nil {
			t.Fatal(err)
		}
		root := filepath.Join(dir, "root-"+driver)
		if err := os.MkdirAll(filepath.Join(root, "usr/lib64"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(lib, filepath.Join(root, "usr/lib64", "libnvidia-ml.so.1")); err != nil {
			t.Fatal(err)
		}
		roots[driver] = root
	}
	proc := filepath.Join(dir, "proc")
	writeFixture(t, filepath.Join(proc, "sys/kernel/osrelease"), "6.14.0-1007-nvidia\n")
	// A good node: dmem enabled from the root down to the QoS cgroups.
	good, rootOnly, v1 := filepath.Join(dir, "cgroup-good"), filepath.Join(dir, "cgroup-root-only"), filepath.Join(dir, "cgroup-v1")
	for _, f := range []string{"", "kubepods", "kubepods/burstable", "kubepods/besteffort"} {
		writeFixture(t, filepath.Join(good, f, "cgroup.subtree_control"), "cpu memory dmem\n")
		writeFixture(t, filepath.Join(rootOnly, f, "cgroup.subtree_control"), "cpu memory\n")
	}
	writeFixture(t, filepath.Join(good, "cgroup.controllers"), "cpu io memory pids dmem\n")
	// Today's detection took this for hard: dmem in cgroup.controllers only.
	writeFixture(t, filepath.Join(rootOnly, "cgroup.controllers"), "cpu io memory pids dmem\n")
	if err := os.MkdirAll(v1, 0o755); err != nil {
		t.Fatal(err)
	}

	for _, tt := range []struct {
		name, driver, cgroupRoot string
		migCard                  int // card whose MIG mode is on; -1 none
		want, wantReason         string
	}{
		{"615, dmem on every level", "615.23.01", good, -1, "hard", ""},
		{"615, dmem in the root's controllers only", "615.23.01", rootOnly, -1, "compute-only", "dmem-not-enabled-to-pod-cgroups"},
		{"615, a card in MIG mode", "615.23.01", good, 1, "compute-only", "mig-enabled"},
		{"615, cgroup v1", "615.23.01", v1, -1, "compute-only", "not-cgroup-v2"},
		{"580: no memory limit call in its library", "580.95.05", good, -1, "advisory", "driver-before-615"},
	} {
		t.Run(tt.name, func(t *testing.T) {
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
			state := mocknvml.State{Dir: t.TempDir()}
			if tt.migCard >= 0 {
				if err := state.SetMigMode(fakegpu.FakeGPUUUID("mock-node", tt.migCard), true); err != nil {
					t.Fatal(err)
				}
			}
			out := runInChild(t, []string{mocknvml.EnvDevicesFile + "=" + file, mocknvml.EnvStateDir + "=" + state.Dir},
				"slices", "--node-name", "mock-node", "--driver-root", roots[tt.driver],
				"--proc-root", proc, "--cgroup-root", tt.cgroupRoot, "-o", "json")
			n := 0
			for _, s := range decodeSlices(t, out) {
				for _, d := range s.Spec.Devices {
					n++
					if a := d.Attributes["shareEnforcement"].StringValue; a == nil || *a != tt.want {
						t.Errorf("%s: shareEnforcement %v, want %s", d.Name, a, tt.want)
					}
					reason := d.Attributes["shareEnforcementReason"].StringValue
					if (tt.wantReason == "") != (reason == nil) || (reason != nil && *reason != tt.wantReason) {
						t.Errorf("%s: shareEnforcementReason %v, want %q", d.Name, reason, tt.wantReason)
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
