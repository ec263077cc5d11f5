package gpucheck

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/tangram-gpu/tangram/pkg/gpucheck/nvidiasmi"
)

// Facts are what the machine has, read independently of the plugin's
// detection: the driver's tool, uname and the cgroup root.
type Facts struct {
	// DriverVersion is nvidia-smi's, e.g. "580.95.05".
	DriverVersion string
	// KernelRelease is uname -r.
	KernelRelease string
	// CgroupV2: the cgroup root has cgroup.controllers.
	CgroupV2 bool
	// RootControllers are the root's cgroup.controllers (v2).
	RootControllers []string
	// RootSubtree is the root's cgroup.subtree_control: the controllers
	// its children get.
	RootSubtree []string
	// Cards are nvidia-smi's cards (compute mode, MIG mode).
	Cards []nvidiasmi.Card
	// MPSControl is the driver root's nvidia-cuda-mps-control, "" when
	// the driver root has none.
	MPSControl string
	// CUDADriver is the driver root's libcuda.so.1, "" when none.
	CUDADriver string
}

// Requirements of MPS v3 and per-cgroup memory limits, as NVIDIA documents
// them (shared/notes/NVIDIA-FACTS.md).
const (
	v3DriverMajor = 615
	dmemKernel    = 614 // 6.14, as major*100+minor
)

// DriverMajor is the driver's release, 0 when unreadable.
func (f Facts) DriverMajor() int {
	head, _, _ := strings.Cut(strings.TrimSpace(f.DriverVersion), ".")
	n, _ := strconv.Atoi(head)
	return n
}

// kernel is major*100+minor, 0 when unreadable.
func (f Facts) kernel() int {
	parts := strings.SplitN(strings.TrimSpace(f.KernelRelease), ".", 3)
	if len(parts) < 2 {
		return 0
	}
	major, err := strconv.Atoi(parts[0])
	if err != nil {
		return 0
	}
	digits := parts[1]
	if i := strings.IndexFunc(digits, func(r rune) bool { return r < '0' || r > '9' }); i >= 0 {
		digits = digits[:i]
	}
	minor, err := strconv.Atoi(digits)
	if err != nil {
		return 0
	}
	return major*100 + minor
}

// Dmem reports the dmem controller in the root's cgroup.controllers.
func (f Facts) Dmem() bool {
	if !f.CgroupV2 {
		return false
	}
	for _, c := range f.RootControllers {
		if c == "dmem" {
			return true
		}
	}
	return false
}

// AnyMIG reports whether any card is in MIG mode.
func (f Facts) AnyMIG() bool {
	for _, c := range f.Cards {
		if c.MIGEnabled() {
			return true
		}
	}
	return false
}

// Ceiling is the highest share enforcement level the machine allows and
// why it is not higher: hard needs a driver ≥ 615, cgroup v2, the dmem
// controller from kernel 6.14 on, and no card in MIG mode.
func (f Facts) Ceiling() (level, why string) {
	major := f.DriverMajor()
	switch {
	case major < v3DriverMajor:
		return "advisory", fmt.Sprintf("driver %s is older than %d (no MPS v3, no per-cgroup memory limits)", f.DriverVersion, v3DriverMajor)
	case !f.CgroupV2:
		return "compute-only", "cgroup v1: per-cgroup memory limits need cgroup v2"
	case f.kernel() == 0:
		return "compute-only", fmt.Sprintf("kernel release %q is unreadable", f.KernelRelease)
	case f.kernel() >= dmemKernel && !f.Dmem():
		return "compute-only", "the kernel has no dmem controller in the root cgroup"
	case f.AnyMIG():
		return "compute-only", "a card is in MIG mode: per-cgroup memory limits are not supported there"
	}
	return "hard", "driver, cgroup v2, dmem and MIG allow it"
}

var levelRank = map[string]int{"advisory": 0, "compute-only": 1, "hard": 2}

// Detected is what the plugin's enforcement detection reported.
type Detected struct {
	Level       string
	Reason      string
	DriverMajor int
	KernelMajor int
	KernelMinor int
	CgroupV2    bool
	Dmem        bool
}

// EnforcementOutcome checks the plugin's detection against the facts: the
// inputs it read must be the machine's, its level must not exceed what the
// machine allows, and a level below hard must say why.
func EnforcementOutcome(d Detected, f Facts) Outcome {
	var wrong []string
	if d.DriverMajor != f.DriverMajor() {
		wrong = append(wrong, fmt.Sprintf("driver release %d, nvidia-smi says %s", d.DriverMajor, f.DriverVersion))
	}
	if k := f.kernel(); k != 0 && d.KernelMajor*100+d.KernelMinor != k {
		wrong = append(wrong, fmt.Sprintf("kernel %d.%d, uname says %s", d.KernelMajor, d.KernelMinor, f.KernelRelease))
	}
	if d.CgroupV2 != f.CgroupV2 {
		wrong = append(wrong, fmt.Sprintf("cgroup v2 %t, the cgroup root says %t", d.CgroupV2, f.CgroupV2))
	}
	if d.Dmem && !f.Dmem() {
		wrong = append(wrong, "dmem detected, but the root cgroup.controllers has none")
	}
	ceiling, why := f.Ceiling()
	rank, known := levelRank[d.Level]
	switch {
	case !known:
		wrong = append(wrong, fmt.Sprintf("unknown level %q", d.Level))
	case rank > levelRank[ceiling]:
		wrong = append(wrong, fmt.Sprintf("level %s, but the machine allows at most %s: %s", d.Level, ceiling, why))
	}
	if d.Level != "hard" && strings.TrimSpace(d.Reason) == "" {
		wrong = append(wrong, fmt.Sprintf("level %s without a reason", d.Level))
	}
	if len(wrong) > 0 {
		return Fail("detection is wrong: %s", strings.Join(wrong, "; "))
	}
	detail := fmt.Sprintf("level %s (reason: %s); the machine allows at most %s (%s)", d.Level, orNone(d.Reason), ceiling, why)
	if d.Level != ceiling {
		detail += "; the detection is stricter than these facts, which is safe"
	}
	return Pass("%s", detail)
}

func orNone(s string) string {
	if strings.TrimSpace(s) == "" {
		return "none"
	}
	return s
}

// Decision says whether a step runs, on which card, and if not, why.
type Decision struct {
	Run bool
	// Card is the nvidia-smi card the step uses.
	Card   nvidiasmi.Card
	Reason string
}

// PlanClassicMPS decides the classic MPS step: it needs the driver's MPS
// control binary, libcuda.so.1, and a card whose compute mode allows
// clients (Default or Exclusive_Process; the check never changes it) and
// that is not in MIG mode.
func PlanClassicMPS(f Facts) Decision {
	if f.MPSControl == "" {
		return Decision{Reason: "the driver root has no nvidia-cuda-mps-control"}
	}
	if f.CUDADriver == "" {
		return Decision{Reason: "the driver root has no libcuda.so.1 for the client"}
	}
	return pickCard(f, "classic MPS")
}

// PlanV3 decides the MPS v3 and memory-limit step: driver ≥ 615, cgroup v2
// with dmem, and a usable card, besides what classic MPS needs.
func PlanV3(f Facts) Decision {
	if major := f.DriverMajor(); major < v3DriverMajor {
		return Decision{Reason: fmt.Sprintf("driver %s is older than %d: no MPS v3 and no per-cgroup memory limits", f.DriverVersion, v3DriverMajor)}
	}
	if !f.CgroupV2 {
		return Decision{Reason: "cgroup v1: the memory limit needs cgroup v2"}
	}
	if !f.Dmem() {
		return Decision{Reason: "no dmem controller in the root cgroup.controllers"}
	}
	d := PlanClassicMPS(f)
	if !d.Run {
		return d
	}
	return pickCard(f, "MPS v3")
}

func pickCard(f Facts, what string) Decision {
	var why []string
	for _, c := range f.Cards {
		mode := strings.ToLower(strings.TrimSpace(c.ComputeMode))
		switch {
		case c.MIGEnabled():
			why = append(why, fmt.Sprintf("%s is in MIG mode", c.UUID))
		case mode == "prohibited":
			why = append(why, fmt.Sprintf("%s has compute mode Prohibited", c.UUID))
		case mode == "default" || mode == "exclusive_process":
			return Decision{Run: true, Card: c}
		default:
			why = append(why, fmt.Sprintf("%s has compute mode %q", c.UUID, c.ComputeMode))
		}
	}
	if len(why) == 0 {
		return Decision{Reason: "no card"}
	}
	return Decision{Reason: fmt.Sprintf("no card can run %s without changing its settings (this check never does): %s", what, strings.Join(why, "; "))}
}

// PlanMemoryLimit decides the memory-limit step: driver ≥ 615, cgroup v2,
// dmem enabled for the root's children (the check creates a scratch cgroup
// there and never changes the root's subtree_control), and a card not in
// MIG mode.
func PlanMemoryLimit(f Facts) Decision {
	if major := f.DriverMajor(); major < v3DriverMajor {
		return Decision{Reason: fmt.Sprintf("driver %s is older than %d: no per-cgroup memory limits (nvmlDeviceSetMemoryLimits_v1)", f.DriverVersion, v3DriverMajor)}
	}
	if !f.CgroupV2 {
		return Decision{Reason: "cgroup v1: the memory limit needs cgroup v2"}
	}
	if !f.Dmem() {
		return Decision{Reason: "no dmem controller in the root cgroup.controllers"}
	}
	enabled := false
	for _, c := range f.RootSubtree {
		enabled = enabled || c == "dmem"
	}
	if !enabled {
		return Decision{Reason: "dmem is not enabled in the root cgroup.subtree_control (the check does not change it; a node for hard shares enables +dmem down to the kubelet's pod cgroups)"}
	}
	return pickCard(f, "the memory limit")
}
