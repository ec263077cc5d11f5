//go:build cgo

package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	mocknvml "github.com/tangram-gpu/tangram/hack/mock-nvml"
	"github.com/tangram-gpu/tangram/pkg/gpu/fakegpu"
)

// envRunHook makes the test binary run the hook's main with its arguments
// (JSON), as containerd runs the hook: a process of its own, which a
// missing NVML symbol would kill.
const envRunHook = "TANGRAM_CDI_HOOK_TEST_ARGS"

func TestMain(m *testing.M) {
	if args := os.Getenv(envRunHook); args != "" {
		if err := json.Unmarshal([]byte(args), &os.Args); err != nil {
			panic(err)
		}
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// hostWithMockDriver is a driver root with the C mock libnvidia-ml.so.1
// built as driver (serving its built-in dgx-h100 as mock-node), a state
// directory, and a cgroup tree with one pod of two containers whose
// processes are 77 and 78.
type hostWithMockDriver struct {
	driverRoot, proc, cgroups, records string
	state                              mocknvml.State
	pod                                string // the pod cgroup, under cgroups
}

const podCgroup = "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod0f1e2d3c_4b5a_6978_8796_a5b4c3d2e1f0.slice"

func newHost(t *testing.T, driver string) hostWithMockDriver {
	t.Helper()
	dir := t.TempDir()
	lib, err := mocknvml.BuildDriver(filepath.Join(dir, "build"), driver)
	if err != nil {
		t.Fatal(err)
	}
	h := hostWithMockDriver{
		driverRoot: filepath.Join(dir, "driver"), proc: filepath.Join(dir, "proc"), cgroups: filepath.Join(dir, "cgroup"),
		records: filepath.Join(dir, "records"), state: mocknvml.State{Dir: filepath.Join(dir, "state")},
	}
	mustMkdir(t, filepath.Join(h.driverRoot, "usr", "lib64"))
	if err := os.Symlink(lib, filepath.Join(h.driverRoot, "usr", "lib64", "libnvidia-ml.so.1")); err != nil {
		t.Fatal(err)
	}
	h.pod = filepath.Join(h.cgroups, podCgroup)
	for pid, scope := range map[string]string{"77": "cri-containerd-c1.scope", "78": "cri-containerd-c2.scope"} {
		mustMkdir(t, filepath.Join(h.proc, pid))
		mustMkdir(t, filepath.Join(h.pod, scope))
		if err := os.WriteFile(filepath.Join(h.proc, pid, "cgroup"), []byte("0::"+podCgroup+"/"+scope+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return h
}

// hook runs the hook for the container of process pid with the claim's
// limit, with the kernel's dmem as given; it returns its stderr and
// whether it exited 0.
func (h hostWithMockDriver) hook(t *testing.T, pid, limit, kernelDmem string) (string, bool) {
	t.Helper()
	args, _ := json.Marshal([]string{"tangram-cdi-hook", "--driver-root", h.driverRoot, "--proc-root", h.proc, "--cgroup-root", h.cgroups,
		"--state-dir", h.records, "--claim", "11111111-2222-3333-4444-555555555555", "--limit", limit})
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), envRunHook+"="+string(args), mocknvml.EnvDevicesFile+"=", mocknvml.EnvStateDir+"="+h.state.Dir,
		mocknvml.EnvKernelDmem+"="+kernelDmem)
	cmd.Stdin = strings.NewReader(`{"ociVersion":"1.2.0","id":"c","status":"creating","pid":` + pid + `}`)
	out, err := cmd.CombinedOutput()
	return string(out), err == nil
}

// TestHookAgainstMockLibrary runs the hook as containerd would, over the C
// mock libnvidia-ml.so.1 of a 615 driver on a dmem kernel: the two
// containers of one pod get one limit, on the pod's cgroup, once it has
// dmem files; the library's answers reach the container runtime in one
// line.
func TestHookAgainstMockLibrary(t *testing.T) {
	h := newHost(t, mocknvml.MemoryLimitsDriver)
	uuid := fakegpu.FakeGPUUUID("mock-node", 1)
	limit := uuid + "=21474836480"

	// dmem not enabled for the pod cgroup: the driver answers not found.
	out, ok := h.hook(t, "77", limit, "1")
	want := "tangram-cdi-hook: GPU memory limit not set, refusing to start the container: card " + uuid +
		": setting a 21474836480-byte memory limit on pod cgroup " + h.pod + ": Not Found (NVML return 6)"
	if ok || strings.TrimSpace(out) != want {
		t.Fatalf("hook on a pod cgroup without dmem files: ok=%v\n%s\nwant:\n%s", ok, out, want)
	}

	if err := os.WriteFile(filepath.Join(h.pod, "dmem.max"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, pid := range []string{"77", "78"} {
		if out, ok := h.hook(t, pid, limit, "1"); !ok {
			t.Fatalf("hook for container %s: %s", pid, out)
		}
	}
	if err := h.state.FailMemoryLimits(int(nvml.ERROR_NO_PERMISSION)); err != nil {
		t.Fatal(err)
	}
	// A changed limit must be set again, and NVML's refusal stops the container.
	out, ok = h.hook(t, "78", uuid+"=10737418240", "1")
	if ok || !strings.Contains(out, "Insufficient Permissions (NVML return 4)") {
		t.Fatalf("hook with the failure knob: ok=%v %s", ok, out)
	}

	calls, err := h.state.Calls()
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, c := range calls {
		got = append(got, c.String())
	}
	prefix := "nvmlDeviceSetMemoryLimits_v1 index=1 uuid=" + uuid + " namespace=" + h.pod + " soft=0 hard="
	wantCalls := []string{prefix + "21474836480 result=6", prefix + "21474836480 result=0", prefix + "10737418240 result=4"}
	if strings.Join(got, "\n") != strings.Join(wantCalls, "\n") {
		t.Errorf("calls.log:\n%s\nwant refused (no dmem), one 20 GiB limit on the pod cgroup for both containers, then refused:\n%s",
			strings.Join(got, "\n"), strings.Join(wantCalls, "\n"))
	}
}

// TestHookOnADriverBefore615: the library has no memory limit calls; the
// hook says so instead of dying on the missing symbol.
func TestHookOnADriverBefore615(t *testing.T) {
	h := newHost(t, "580.95.05")
	out, ok := h.hook(t, "77", fakegpu.FakeGPUUUID("mock-node", 1)+"=21474836480", "0")
	if ok || !strings.Contains(out, "tangram-cdi-hook: GPU memory limit not set, refusing to start the container: the NVIDIA driver's NVML has no nvmlDeviceSetMemoryLimits_v1: a driver older than r615 has no per-cgroup memory limits") {
		t.Fatalf("hook on a 580 driver: ok=%v\n%s", ok, out)
	}
	if strings.Contains(out, "symbol lookup error") {
		t.Errorf("the hook died on the missing symbol: %s", out)
	}
}

// TestHookRefusesRootOnStrictShare runs the hook of a strict share as
// containerd would, for a root container joining a claim already
// prepared: it is refused before NVML is touched, in one line naming the
// pod, the claim and the fix; a non-root one gets its limit.
func TestHookRefusesRootOnStrictShare(t *testing.T) {
	h := newHost(t, mocknvml.MemoryLimitsDriver)
	if err := os.WriteFile(filepath.Join(h.pod, "dmem.max"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	limit := fakegpu.FakeGPUUUID("mock-node", 1) + "=21474836480"
	run := func(uid string) (string, bool) {
		bundle := t.TempDir()
		config := `{"process":{"user":{"uid":` + uid + `},"noNewPrivileges":true},"annotations":{"io.kubernetes.cri.sandbox-namespace":"team",` +
			`"io.kubernetes.cri.sandbox-name":"late","io.kubernetes.cri.container-name":"cuda"}}`
		if err := os.WriteFile(filepath.Join(bundle, "config.json"), []byte(config), 0o600); err != nil {
			t.Fatal(err)
		}
		args, _ := json.Marshal([]string{"tangram-cdi-hook", "--driver-root", h.driverRoot, "--proc-root", h.proc, "--cgroup-root", h.cgroups,
			"--state-dir", h.records, "--claim", "11111111-2222-3333-4444-555555555555", "--limit", limit,
			"--non-root-class", "hard-shared-gpu.tangram.dev", "--claim-name", "team/share"})
		cmd := exec.Command(os.Args[0])
		cmd.Env = append(os.Environ(), envRunHook+"="+string(args), mocknvml.EnvDevicesFile+"=", mocknvml.EnvStateDir+"="+h.state.Dir,
			mocknvml.EnvKernelDmem+"=1")
		cmd.Stdin = strings.NewReader(`{"ociVersion":"1.2.0","id":"c","status":"creating","pid":77,"bundle":"` + bundle + `"}`)
		out, err := cmd.CombinedOutput()
		return string(out), err == nil
	}
	out, ok := run("0")
	want := `tangram-cdi-hook: refusing to start the container: pod team/late container "cuda" would run as uid 0 (root) on a share of class hard-shared-gpu.tangram.dev (claim team/share)`
	if ok || !strings.HasPrefix(out, want) || strings.Count(strings.TrimSpace(out), "\n") != 0 {
		t.Fatalf("hook for a root container on a strict share: ok=%v\n%s\nwant one line starting:\n%s", ok, out, want)
	}
	if calls, err := h.state.Calls(); err != nil || len(calls) != 0 {
		t.Errorf("NVML calls for a refused container: %v (%v), want none", calls, err)
	}
	if out, ok := run("1000"); !ok {
		t.Fatalf("hook for a non-root container on a strict share: %s", out)
	}
}

func mustMkdir(t *testing.T, dir string) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
}
