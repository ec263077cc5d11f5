//go:build cgo

package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	mocknvml "github.com/tangram-gpu/tangram/hack/mock-nvml"
	"github.com/tangram-gpu/tangram/pkg/gpu/fakegpu"
)

// TestHookAgainstMockLibrary runs the hook as containerd would, over the C
// mock libnvidia-ml.so.1 under a driver root: the limit lands in the mock's
// call log on the container's cgroup, and the mock's failure knob makes the
// hook fail with the card, the cgroup and NVML's answer.
func TestHookAgainstMockLibrary(t *testing.T) {
	dir := t.TempDir()
	lib, err := mocknvml.Build(filepath.Join(dir, "build"))
	if err != nil {
		t.Fatal(err)
	}
	driverRoot := filepath.Join(dir, "driver")
	mustMkdir(t, filepath.Join(driverRoot, "usr", "lib64"))
	if err := os.Symlink(lib, filepath.Join(driverRoot, "usr", "lib64", "libnvidia-ml.so.1")); err != nil {
		t.Fatal(err)
	}
	profile, err := fakegpu.BuiltinProfile("dgx-h100")
	if err != nil {
		t.Fatal(err)
	}
	devices, err := mocknvml.Flatten(profile, "node-a")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "devices"), devices, 0o644); err != nil {
		t.Fatal(err)
	}
	state := mocknvml.State{Dir: filepath.Join(dir, "state")}
	t.Setenv(mocknvml.EnvDevicesFile, filepath.Join(dir, "devices"))
	t.Setenv(mocknvml.EnvStateDir, state.Dir)

	const scope = "/kubepods.slice/pod1.slice/cri-containerd-c1.scope"
	proc, cgroups := filepath.Join(dir, "proc"), filepath.Join(dir, "cgroup")
	mustMkdir(t, filepath.Join(proc, "77"))
	mustMkdir(t, filepath.Join(cgroups, scope))
	if err := os.WriteFile(filepath.Join(proc, "77", "cgroup"), []byte("0::"+scope+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	uuid := fakegpu.FakeGPUUUID("node-a", 1)
	args := []string{"--driver-root", driverRoot, "--proc-root", proc, "--cgroup-root", cgroups, "--limit", uuid + "=21474836480"}
	stdin := `{"ociVersion":"1.2.0","id":"c1","status":"creating","pid":77}`

	if err := run(args, strings.NewReader(stdin)); err != nil {
		t.Fatalf("hook: %v", err)
	}
	if err := state.FailMemoryLimits(int(nvml.ERROR_NO_PERMISSION)); err != nil {
		t.Fatal(err)
	}
	err = run(args, strings.NewReader(stdin))
	want := "card " + uuid + ": setting a 21474836480-byte memory limit on cgroup " + filepath.Join(cgroups, scope)
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("hook with the failure knob: %v, want an error containing %q", err, want)
	}

	calls, err := state.Calls()
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, c := range calls {
		got = append(got, c.String())
	}
	prefix := "nvmlDeviceSetMemoryLimits_v1 index=1 uuid=" + uuid + " namespace=" + filepath.Join(cgroups, scope) + " soft=0 hard=21474836480 result="
	if len(got) != 2 || got[0] != prefix+"0" || got[1] != prefix+"4" {
		t.Errorf("calls.log:\n%s\nwant the limit set once, then refused (result 4)", strings.Join(got, "\n"))
	}
}

func mustMkdir(t *testing.T, dir string) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
}
