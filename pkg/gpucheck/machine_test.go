package gpucheck

import (
	"strings"
	"testing"

	"github.com/tangram-gpu/tangram/pkg/gpucheck/nvidiasmi"
)

func cardsWith(modes ...string) []nvidiasmi.Card {
	var out []nvidiasmi.Card
	for i, m := range modes {
		compute, mig, _ := strings.Cut(m, "/")
		out = append(out, nvidiasmi.Card{UUID: "GPU-" + string(rune('a'+i)), ComputeMode: compute, MIGMode: mig})
	}
	return out
}

func r615() Facts {
	return Facts{DriverVersion: "615.23.01", KernelRelease: "6.18.0-fc", CgroupV2: true,
		RootControllers: []string{"cpu", "memory", "dmem"}, RootSubtree: []string{"memory", "dmem"},
		Cards: cardsWith("Default/Disabled"), MPSControl: "/usr/bin/nvidia-cuda-mps-control", CUDADriver: "/usr/lib64/libcuda.so.1"}
}

func r580() Facts {
	f := r615()
	f.DriverVersion = "580.159.03"
	return f
}

func TestCeiling(t *testing.T) {
	for _, tc := range []struct {
		name   string
		change func(*Facts)
		want   string
		why    string
	}{
		{name: "r615 with dmem", change: func(*Facts) {}, want: "hard"},
		{name: "r580", change: func(f *Facts) { f.DriverVersion = "580.159.03" }, want: "advisory", why: "older than 615"},
		{name: "cgroup v1", change: func(f *Facts) { f.CgroupV2, f.RootControllers = false, nil }, want: "compute-only", why: "cgroup v1"},
		{name: "6.18 without dmem", change: func(f *Facts) { f.RootControllers = []string{"memory"} }, want: "compute-only", why: "no dmem"},
		{name: "6.8 without dmem: driver fallback", change: func(f *Facts) { f.KernelRelease, f.RootControllers = "6.8.0-45-generic", nil }, want: "hard"},
		{name: "MIG", change: func(f *Facts) { f.Cards = cardsWith("Default/Disabled", "Default/Enabled") }, want: "compute-only", why: "MIG"},
		{name: "kernel unreadable", change: func(f *Facts) { f.KernelRelease = "" }, want: "compute-only", why: "unreadable"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := r615()
			tc.change(&f)
			got, why := f.Ceiling()
			if got != tc.want || !strings.Contains(why, tc.why) {
				t.Errorf("Ceiling() = %s (%s), want %s (%s)", got, why, tc.want, tc.why)
			}
		})
	}
}

func TestEnforcementOutcome(t *testing.T) {
	good580 := Detected{Level: "advisory", Reason: "NVIDIA driver 580.159.03 is older than release 615", DriverMajor: 580, KernelMajor: 6, KernelMinor: 18, CgroupV2: true, Dmem: true}
	for _, tc := range []struct {
		name  string
		facts Facts
		det   func(Detected) Detected
		want  Result
		say   string
	}{
		{name: "r580 advisory", facts: r580(), det: func(d Detected) Detected { return d }, want: Passed, say: "level advisory"},
		{name: "r580 claims hard", facts: r580(), det: func(d Detected) Detected { d.Level = "hard"; return d }, want: Failed, say: "allows at most advisory"},
		{name: "r615 hard", facts: r615(), det: func(d Detected) Detected { d.Level, d.Reason, d.DriverMajor = "hard", "", 615; return d }, want: Passed},
		{name: "r615 stricter: safe", facts: r615(), det: func(d Detected) Detected { d.Level, d.DriverMajor = "compute-only", 615; return d }, want: Passed, say: "stricter"},
		{name: "r615 with MIG claims hard", facts: func() Facts { f := r615(); f.Cards = cardsWith("Default/Enabled"); return f }(),
			det: func(d Detected) Detected { d.Level, d.DriverMajor = "hard", 615; return d }, want: Failed, say: "MIG"},
		{name: "wrong driver read", facts: r580(), det: func(d Detected) Detected { d.DriverMajor = 550; return d }, want: Failed, say: "driver release 550"},
		{name: "wrong kernel read", facts: r580(), det: func(d Detected) Detected { d.KernelMinor = 1; return d }, want: Failed, say: "kernel 6.1"},
		{name: "dmem invented", facts: func() Facts { f := r580(); f.RootControllers = nil; return f }(), det: func(d Detected) Detected { return d }, want: Failed, say: "dmem detected"},
		{name: "no reason", facts: r580(), det: func(d Detected) Detected { d.Reason = ""; return d }, want: Failed, say: "without a reason"},
		{name: "unknown level", facts: r580(), det: func(d Detected) Detected { d.Level = "soft"; return d }, want: Failed, say: "unknown level"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out := EnforcementOutcome(tc.det(good580), tc.facts)
			if out.Result != tc.want || !strings.Contains(out.Detail, tc.say) {
				t.Errorf("%+v, want %s saying %q", out, tc.want, tc.say)
			}
		})
	}
}

func TestPlans(t *testing.T) {
	type plan func(Facts) Decision
	for _, tc := range []struct {
		name     string
		plan     plan
		facts    func() Facts
		wantRun  bool
		wantCard string
		reason   string
	}{
		{name: "classic on r580", plan: PlanClassicMPS, facts: r580, wantRun: true, wantCard: "GPU-a"},
		{name: "classic: no control binary", plan: PlanClassicMPS, facts: func() Facts { f := r580(); f.MPSControl = ""; return f }, reason: "no nvidia-cuda-mps-control"},
		{name: "classic: no libcuda", plan: PlanClassicMPS, facts: func() Facts { f := r580(); f.CUDADriver = ""; return f }, reason: "libcuda.so.1"},
		{name: "classic: skips MIG and Prohibited, takes Exclusive_Process", plan: PlanClassicMPS,
			facts: func() Facts {
				f := r580()
				f.Cards = cardsWith("Default/Enabled", "Prohibited/Disabled", "Exclusive_Process/N/A")
				return f
			}, wantRun: true, wantCard: "GPU-c"},
		{name: "classic: no usable card, never changes one", plan: PlanClassicMPS,
			facts: func() Facts { f := r580(); f.Cards = cardsWith("Prohibited/Disabled", "Default/Enabled"); return f }, reason: "never does"},
		{name: "v3 on r580", plan: PlanV3, facts: r580, reason: "older than 615"},
		{name: "v3 on r615", plan: PlanV3, facts: r615, wantRun: true, wantCard: "GPU-a"},
		{name: "v3 without dmem", plan: PlanV3, facts: func() Facts { f := r615(); f.RootControllers = []string{"memory"}; return f }, reason: "no dmem"},
		{name: "v3 on cgroup v1", plan: PlanV3, facts: func() Facts { f := r615(); f.CgroupV2 = false; return f }, reason: "cgroup v1"},
		{name: "memory limit on r580", plan: PlanMemoryLimit, facts: r580, reason: "older than 615"},
		{name: "memory limit on r615", plan: PlanMemoryLimit, facts: r615, wantRun: true, wantCard: "GPU-a"},
		{name: "memory limit: dmem not enabled for children", plan: PlanMemoryLimit, facts: func() Facts { f := r615(); f.RootSubtree = []string{"memory"}; return f }, reason: "does not change it"},
		{name: "memory limit: only MIG cards", plan: PlanMemoryLimit, facts: func() Facts { f := r615(); f.Cards = cardsWith("Default/Enabled"); return f }, reason: "MIG mode"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := tc.plan(tc.facts())
			if d.Run != tc.wantRun || d.Card.UUID != tc.wantCard || !strings.Contains(d.Reason, tc.reason) {
				t.Errorf("decision %+v, want run %t on %q, reason with %q", d, tc.wantRun, tc.wantCard, tc.reason)
			}
		})
	}
}
