package gpucheck

import (
	"reflect"
	"strings"
	"testing"

	cdispec "tags.cncf.io/container-device-interface/specs-go"

	"github.com/tangram-gpu/tangram/pkg/gpu"
)

func TestJudgeLimitedClient(t *testing.T) {
	for _, tc := range []struct {
		name, log string
		want      Result
		say       string
	}{
		{name: "refused below the limit", log: "cuda-alloc: devices=1 total_mib=143771 free_mib=143000 allocated_mib=1792 refused=1 error=2\n", want: Passed, say: "1792 MiB under a 2048 MiB limit"},
		{name: "never refused", log: "cuda-alloc: devices=1 total_mib=143771 free_mib=143000 allocated_mib=3072 refused=0 error=0", want: Failed, say: "not enforced"},
		{name: "over the limit", log: "cuda-alloc: devices=1 total_mib=1 free_mib=1 allocated_mib=2304 refused=1 error=2", want: Failed, say: "more than the limit"},
		{name: "refused far too early", log: "cuda-alloc: devices=1 total_mib=1 free_mib=1 allocated_mib=256 refused=1 error=2", want: Failed, say: "long before"},
		{name: "no result line", log: "cuda-alloc: cuInit failed with CUresult 999", want: Failed, say: "no result"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out := JudgeLimitedClient(2048, tc.log)
			if out.Result != tc.want || !strings.Contains(out.Detail, tc.say) {
				t.Errorf("%+v, want %s saying %q", out, tc.want, tc.say)
			}
		})
	}
}

func TestSpecPaths(t *testing.T) {
	common := cdispec.ContainerEdits{
		DeviceNodes: []*cdispec.DeviceNode{{Path: "/dev/nvidiactl"}, {Path: "/dev/nvidia-uvm", HostPath: "/host/dev/nvidia-uvm"}},
		Mounts:      []*cdispec.Mount{{HostPath: "/usr/lib64/libcuda.so.580.1", ContainerPath: "/usr/lib64/libcuda.so.580.1"}},
		Hooks:       []*cdispec.Hook{{HookName: "createContainer", Path: "/usr/bin/nvidia-cdi-hook"}},
	}
	card := cdispec.ContainerEdits{DeviceNodes: []*cdispec.DeviceNode{{Path: "/dev/nvidia0"}, {Path: "/dev/nvidiactl"}}}
	got := SpecPaths(common, card)
	want := []string{"/dev/nvidia0", "/dev/nvidiactl", "/host/dev/nvidia-uvm", "/usr/bin/nvidia-cdi-hook", "/usr/lib64/libcuda.so.580.1"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("SpecPaths = %v, want %v", got, want)
	}
	for _, tc := range []struct {
		name    string
		paths   []string
		missing map[string]bool
		want    Result
		say     string
	}{
		{name: "all there", paths: want, want: Passed, say: "all 5 named paths"},
		{name: "one missing", paths: want, missing: map[string]bool{"/dev/nvidia0": true}, want: Failed, say: "1 of 5 paths named by the CDI edits do not exist: /dev/nvidia0"},
		{name: "nothing named", want: Failed, say: "no path at all"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out := SpecPathsOutcome(1, tc.paths, func(p string) bool { return !tc.missing[p] })
			if out.Result != tc.want || !strings.Contains(out.Detail, tc.say) {
				t.Errorf("%+v, want %s saying %q", out, tc.want, tc.say)
			}
		})
	}
}

func TestHealthOutcome(t *testing.T) {
	ok := gpu.HealthRegistration{Index: 0, Supported: []string{"XidCriticalError"}, Registered: []string{"XidCriticalError"}}
	for _, tc := range []struct {
		name  string
		regs  []gpu.HealthRegistration
		cards int
		want  Result
		say   string
	}{
		{name: "registered", regs: []gpu.HealthRegistration{ok}, cards: 1, want: Passed, say: "gpu 0: XidCriticalError"},
		{name: "a card missing", regs: []gpu.HealthRegistration{ok}, cards: 2, want: Failed, say: "registered 1 card(s), the node has 2"},
		{name: "error", regs: []gpu.HealthRegistration{{Index: 0, Error: "the card does not report XID events"}}, cards: 1, want: Failed, say: "does not report XID"},
		{name: "registered for something else", regs: []gpu.HealthRegistration{{Index: 0, Supported: []string{"GpuRecoveryAction"}, Registered: []string{"GpuRecoveryAction"}}}, cards: 1, want: Failed, say: "not registered for XidCriticalError"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out := HealthOutcome(tc.regs, tc.cards, "XidCriticalError")
			if out.Result != tc.want || !strings.Contains(out.Detail, tc.say) {
				t.Errorf("%+v, want %s saying %q", out, tc.want, tc.say)
			}
		})
	}
}

func TestSettingsOutcome(t *testing.T) {
	before := map[string]string{"GPU-a": "compute mode Default, MIG Disabled"}
	if out := SettingsOutcome(before, map[string]string{"GPU-a": "compute mode Default, MIG Disabled"}); out.Result != Passed {
		t.Errorf("unchanged: %+v", out)
	}
	out := SettingsOutcome(before, map[string]string{"GPU-a": "compute mode Exclusive_Process, MIG Disabled"})
	if out.Result != Failed || !strings.Contains(out.Detail, "Exclusive_Process") {
		t.Errorf("changed: %+v", out)
	}
	if out := SettingsOutcome(before, nil); out.Result != Failed {
		t.Errorf("card gone: %+v", out)
	}
}
