// Package enforcement decides how hard a node can enforce the limits of a
// GPU share, from the NVIDIA driver version, the kernel and the cgroup
// file system (docs/enforcement.md). The plugin publishes the level as the
// device attribute gpu.tangram.dev/shareEnforcement so that a DeviceClass
// or claim can require it with CEL.
//
// Detect is pure; ReadHost gathers its inputs from configurable roots so
// that tests and the mock driver root can stand in for a GPU node.
package enforcement

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// Level is how a node enforces a share's limits.
type Level string

const (
	// Hard: the share's memory is a per-container cgroup limit the driver
	// enforces (nvmlDeviceSetMemoryLimits_v1) and its compute is an MPS v3
	// namespace the server enforces.
	Hard Level = "hard"
	// ComputeOnly: MPS v3 holds compute server-side, but memory cannot be
	// limited per cgroup (no cgroup v2, or a kernel without dmem).
	ComputeOnly Level = "compute-only"
	// Advisory: classic MPS; the limits are environment variables in the
	// container, which a tenant can unset.
	Advisory Level = "advisory"
)

// Requirements NVIDIA documents for per-cgroup memory limits and MPS v3.
const (
	// MinDriverMajor is the driver release with MPS v3 and
	// nvmlDeviceSetMemoryLimits_v1 (CUDA 13.4).
	MinDriverMajor = 615
	// Kernels from 6.14 have the dmem cgroup controller the driver uses;
	// older kernels use a driver-internal fallback.
	dmemKernelMajor, dmemKernelMinor = 6, 14
)

// Inputs are what detection looks at.
type Inputs struct {
	// DriverVersion is NVML's driver version, e.g. "615.23.01".
	DriverVersion string
	// KernelRelease is uname -r, e.g. "6.14.0-1007-nvidia".
	KernelRelease string
	// CgroupV2 says the host's cgroup root is the unified hierarchy
	// (it has cgroup.controllers).
	CgroupV2 bool
	// CgroupControllers are the root's cgroup.controllers (v2 only).
	CgroupControllers []string
}

// Capabilities is what a node can enforce, and the level that follows.
type Capabilities struct {
	DriverMajor  int
	KernelMajor  int
	KernelMinor  int
	MPSv3        bool
	CgroupV2     bool
	Dmem         bool
	MemoryLimits bool
	Level        Level
	// Reason says, for people reading logs and events, why the level is
	// not higher.
	Reason string
}

// Detect derives the capabilities from in. An unreadable driver version is
// an error; an unreadable kernel release only means no memory limits.
func Detect(in Inputs) (Capabilities, error) {
	var c Capabilities
	major, err := leadingInt(in.DriverVersion)
	if err != nil {
		return Capabilities{}, fmt.Errorf("deciding share enforcement: NVIDIA driver version %q: %w", in.DriverVersion, err)
	}
	c.DriverMajor = major
	c.MPSv3 = major >= MinDriverMajor
	c.CgroupV2 = in.CgroupV2
	for _, ctl := range in.CgroupControllers {
		if ctl == "dmem" {
			c.Dmem = c.CgroupV2
		}
	}
	kernelKnown := false
	if kmaj, kmin, err := kernelVersion(in.KernelRelease); err == nil {
		c.KernelMajor, c.KernelMinor, kernelKnown = kmaj, kmin, true
	}
	dmemKernel := kernelKnown && (c.KernelMajor > dmemKernelMajor || c.KernelMajor == dmemKernelMajor && c.KernelMinor >= dmemKernelMinor)

	switch {
	case !c.MPSv3:
		c.Reason = fmt.Sprintf("NVIDIA driver %s is older than release %d: classic MPS only, limits are environment variables", in.DriverVersion, MinDriverMajor)
	case !c.CgroupV2:
		c.Reason = "the host is not on cgroup v2: per-container GPU memory limits need the unified hierarchy"
	case !kernelKnown:
		c.Reason = fmt.Sprintf("kernel release %q is unreadable: cannot tell whether the dmem controller is needed", in.KernelRelease)
	case dmemKernel && !c.Dmem:
		c.Reason = fmt.Sprintf("kernel %d.%d has no dmem controller in the root cgroup.controllers (kernel built without CONFIG_CGROUP_DMEM?)", c.KernelMajor, c.KernelMinor)
	default:
		// From 6.14 the driver charges dmem; before, its own fallback.
		c.MemoryLimits = true
	}
	switch {
	case c.MPSv3 && c.MemoryLimits:
		c.Level = Hard
	case c.MPSv3:
		c.Level = ComputeOnly
	default:
		c.Level = Advisory
	}
	return c, nil
}

// ReadHost reads the kernel release from <procRoot>/sys/kernel/osrelease
// and the cgroup version and controllers from <cgroupRoot>/cgroup.controllers
// (absent: cgroup v1), and detects with driverVersion.
func ReadHost(driverVersion, procRoot, cgroupRoot string) (Capabilities, error) {
	in := Inputs{DriverVersion: driverVersion}
	release, err := os.ReadFile(filepath.Join(procRoot, "sys", "kernel", "osrelease"))
	if err != nil {
		return Capabilities{}, fmt.Errorf("deciding share enforcement: reading the kernel release: %w", err)
	}
	in.KernelRelease = strings.TrimSpace(string(release))
	controllers, err := os.ReadFile(filepath.Join(cgroupRoot, "cgroup.controllers"))
	switch {
	case errors.Is(err, fs.ErrNotExist):
		// cgroup v1 (or v2 not mounted there).
	case err != nil:
		return Capabilities{}, fmt.Errorf("deciding share enforcement: reading the cgroup root %s: %w", cgroupRoot, err)
	default:
		in.CgroupV2 = true
		in.CgroupControllers = strings.Fields(string(controllers))
	}
	return Detect(in)
}

func leadingInt(s string) (int, error) {
	head, _, _ := strings.Cut(strings.TrimSpace(s), ".")
	n, err := strconv.Atoi(head)
	if err != nil || n < 0 {
		return 0, errors.New("want <major>.<minor>…, e.g. 615.23.01")
	}
	return n, nil
}

// kernelVersion reads "6.14.0-1007-nvidia" as 6, 14.
func kernelVersion(release string) (int, int, error) {
	parts := strings.SplitN(strings.TrimSpace(release), ".", 3)
	if len(parts) < 2 {
		return 0, 0, fmt.Errorf("kernel release %q: want <major>.<minor>…", release)
	}
	major, err := strconv.Atoi(parts[0])
	if err != nil {
		return 0, 0, fmt.Errorf("kernel release %q: %w", release, err)
	}
	minorDigits := parts[1] // "14" of "14-rc1" too
	if i := strings.IndexFunc(parts[1], func(r rune) bool { return r < '0' || r > '9' }); i >= 0 {
		minorDigits = parts[1][:i]
	}
	minor, err := strconv.Atoi(minorDigits)
	if err != nil {
		return 0, 0, fmt.Errorf("kernel release %q: %w", release, err)
	}
	return major, minor, nil
}

// ForNode is the level the plugin publishes for a node whose cards report
// driverVersions (NVML's, one per card; all the same on a node). Fake GPUs
// enforce nothing, so they are advisory whatever their profile says. Any
// input that cannot be read makes the node advisory too, with the reason:
// claiming less than the node can do only keeps hard-requiring claims
// away, claiming more would break the promise.
func ForNode(fake bool, driverVersions []string, procRoot, cgroupRoot string) Capabilities {
	if fake {
		return Capabilities{Level: Advisory, Reason: "fake GPUs: nothing is enforced"}
	}
	version := ""
	for _, v := range driverVersions {
		if v != "" {
			version = v
			break
		}
	}
	if version == "" {
		return Capabilities{Level: Advisory, Reason: "no card reports an NVIDIA driver version"}
	}
	c, err := ReadHost(version, procRoot, cgroupRoot)
	if err != nil {
		return Capabilities{Level: Advisory, Reason: err.Error()}
	}
	return c
}
