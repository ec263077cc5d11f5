// Package enforcement decides how hard a node can enforce the limits of a
// GPU share, from the NVIDIA driver (its version, whether its NVML has the
// per-cgroup memory limit calls, MIG modes), the kernel and the cgroup file
// system down to the kubelet's pod cgroups (docs/enforcement.md). The
// plugin publishes the level as the device attribute
// gpu.tangram.dev/shareEnforcement so that a DeviceClass or claim can
// require it with CEL, and, below hard, the reason as
// gpu.tangram.dev/shareEnforcementReason.
//
// Detect is pure; ReadHost gathers its inputs from configurable roots so
// that tests and the mock driver root can stand in for a GPU node.
package enforcement

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/tangram-gpu/tangram/pkg/device"
)

// Level is how a node enforces a share's limits.
type Level string

const (
	// Hard: the share's memory is a limit on its pod's cgroup the driver
	// enforces (nvmlDeviceSetMemoryLimits_v1) and its compute is an MPS v3
	// namespace the server enforces.
	Hard Level = "hard"
	// ComputeOnly: MPS v3 holds compute server-side, but memory cannot be
	// limited per cgroup (no cgroup v2, dmem missing on the way to the pod
	// cgroups, MIG mode, or an NVML without the call).
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
	// MemoryLimitsSymbol says NVML has nvmlDeviceSetMemoryLimits_v1
	// (looked up, never called: an older library lacks the symbol).
	MemoryLimitsSymbol bool
	// MIGEnabled are the UUIDs of cards whose MIG mode is on.
	MIGEnabled []string
	// KernelRelease is uname -r, e.g. "6.14.0-1007-nvidia".
	KernelRelease string
	// CgroupV2 says the host's cgroup root is the unified hierarchy
	// (it has cgroup.controllers).
	CgroupV2 bool
	// CgroupControllers are the root's cgroup.controllers (v2 only).
	CgroupControllers []string
	// PodCgroupChain are the cgroups whose cgroup.subtree_control must
	// enable dmem for the kubelet's pod cgroups to have dmem.* files: the
	// root, each cgroup down to the kubelet's pods cgroup (kubepods), and
	// its QoS cgroups (burstable, besteffort). Empty when the pods cgroup
	// was not found.
	PodCgroupChain []CgroupLevel
}

// CgroupLevel is one cgroup on the way to the pod cgroups.
type CgroupLevel struct {
	// Path is relative to the cgroup root; "" is the root.
	Path string
	// SubtreeControl are the controllers its cgroup.subtree_control enables.
	SubtreeControl []string
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
	// ReasonCode is why the level is not higher, one of device.Reason…
	// (published as shareEnforcementReason); "" on a hard node.
	ReasonCode string
	// Reason says the same for people reading logs, with the details.
	Reason string
}

// Detect derives the capabilities from in. An unreadable driver version is
// an error; anything else that is missing or unreadable only lowers the
// level: claiming less than the node can do only keeps hard-requiring
// claims away, claiming more would break the promise.
func Detect(in Inputs) (Capabilities, error) {
	var c Capabilities
	major, err := leadingInt(in.DriverVersion)
	if err != nil {
		return Capabilities{}, fmt.Errorf("deciding share enforcement: NVIDIA driver version %q: %w", in.DriverVersion, err)
	}
	c.DriverMajor = major
	c.MPSv3 = major >= MinDriverMajor
	c.CgroupV2 = in.CgroupV2
	c.Dmem = c.CgroupV2 && slices.Contains(in.CgroupControllers, "dmem")
	kernelKnown := false
	if kmaj, kmin, err := kernelVersion(in.KernelRelease); err == nil {
		c.KernelMajor, c.KernelMinor, kernelKnown = kmaj, kmin, true
	}
	dmemKernel := kernelKnown && (c.KernelMajor > dmemKernelMajor || c.KernelMajor == dmemKernelMajor && c.KernelMinor >= dmemKernelMinor)

	notEnabled := -1 // the first level of the chain without dmem
	for i, l := range in.PodCgroupChain {
		if !slices.Contains(l.SubtreeControl, "dmem") {
			notEnabled = i
			break
		}
	}
	switch {
	case !c.MPSv3:
		c.ReasonCode = device.ReasonDriverBefore615
		c.Reason = fmt.Sprintf("NVIDIA driver %s is older than release %d: classic MPS only, limits are environment variables", in.DriverVersion, MinDriverMajor)
	case !in.MemoryLimitsSymbol:
		c.ReasonCode = device.ReasonNoMemoryLimitsSymbol
		c.Reason = fmt.Sprintf("NVIDIA driver %s: its NVML has no nvmlDeviceSetMemoryLimits_v1, so memory cannot be limited per pod cgroup", in.DriverVersion)
	case len(in.MIGEnabled) > 0:
		c.ReasonCode = device.ReasonMIGEnabled
		c.Reason = fmt.Sprintf("MIG mode is on for %s: NVML's per-cgroup memory limits do not support MIG", strings.Join(in.MIGEnabled, ", "))
	case !c.CgroupV2:
		c.ReasonCode = device.ReasonNotCgroupV2
		c.Reason = "the host is not on cgroup v2: per-pod GPU memory limits need the unified hierarchy"
	case !kernelKnown:
		c.ReasonCode = device.ReasonKernelUnreadable
		c.Reason = fmt.Sprintf("kernel release %q is unreadable: cannot tell whether the dmem controller is needed", in.KernelRelease)
	case dmemKernel && !c.Dmem:
		c.ReasonCode = device.ReasonNoDmemController
		c.Reason = fmt.Sprintf("kernel %d.%d has no dmem controller in the root cgroup.controllers (kernel built without CONFIG_CGROUP_DMEM?)", c.KernelMajor, c.KernelMinor)
	case dmemKernel && len(in.PodCgroupChain) == 0:
		c.ReasonCode = device.ReasonKubeletCgroupsNotFound
		c.Reason = "the kubelet's pods cgroup (kubepods or kubepods.slice) is not under the cgroup root: cannot check that its pod cgroups get dmem (--kubelet-cgroup-root)"
	case dmemKernel && notEnabled >= 0:
		c.ReasonCode = device.ReasonDmemNotEnabled
		c.Reason = fmt.Sprintf("dmem is not enabled in %s: pod cgroups get dmem.* files only with +dmem in cgroup.subtree_control on every level down to them (systemd does not manage dmem: enable it on the root and the kubelet's cgroups)",
			filepath.Join("/", in.PodCgroupChain[notEnabled].Path, "cgroup.subtree_control"))
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

// Host is where ReadHost reads the kernel and the cgroup file system.
type Host struct {
	// ProcRoot is the proc file system (kernel release).
	ProcRoot string
	// CgroupRoot is the host's cgroup root as this process sees it.
	CgroupRoot string
	// KubeletCgroup is the kubelet's pods cgroup under the cgroup root
	// (kubepods with the cgroupfs driver, kubepods.slice with systemd, or
	// below the kubelet's --cgroup-root); empty: whichever of the two
	// exists.
	KubeletCgroup string
}

// ReadHost reads in.KernelRelease from <ProcRoot>/sys/kernel/osrelease, the
// cgroup version and controllers from <CgroupRoot>/cgroup.controllers
// (absent: cgroup v1) and the pod cgroup chain's cgroup.subtree_control
// files, into in, and detects.
func ReadHost(in Inputs, h Host) (Capabilities, error) {
	release, err := os.ReadFile(filepath.Join(h.ProcRoot, "sys", "kernel", "osrelease"))
	if err != nil {
		return Capabilities{}, fmt.Errorf("deciding share enforcement: reading the kernel release: %w", err)
	}
	in.KernelRelease = strings.TrimSpace(string(release))
	controllers, err := os.ReadFile(filepath.Join(h.CgroupRoot, "cgroup.controllers"))
	switch {
	case errors.Is(err, fs.ErrNotExist):
		// cgroup v1 (or v2 not mounted there).
	case err != nil:
		return Capabilities{}, fmt.Errorf("deciding share enforcement: reading the cgroup root %s: %w", h.CgroupRoot, err)
	default:
		in.CgroupV2 = true
		in.CgroupControllers = strings.Fields(string(controllers))
		if in.PodCgroupChain, err = podCgroupChain(h); err != nil {
			return Capabilities{}, err
		}
	}
	return Detect(in)
}

// podCgroupChain reads the cgroup.subtree_control of the root, of each
// cgroup down to the kubelet's pods cgroup and of its QoS cgroups; none
// when the pods cgroup does not exist.
func podCgroupChain(h Host) ([]CgroupLevel, error) {
	kubepods := h.KubeletCgroup
	if kubepods == "" {
		for _, name := range []string{"kubepods.slice", "kubepods"} {
			if st, err := os.Stat(filepath.Join(h.CgroupRoot, name)); err == nil && st.IsDir() {
				kubepods = name
				break
			}
		}
	}
	kubepods = strings.Trim(filepath.Clean("/"+kubepods), "/")
	if kubepods == "" {
		return nil, nil
	}
	if st, err := os.Stat(filepath.Join(h.CgroupRoot, kubepods)); err != nil || !st.IsDir() {
		return nil, nil
	}
	paths := []string{""}
	parts := strings.Split(kubepods, "/")
	for i := range parts {
		paths = append(paths, strings.Join(parts[:i+1], "/"))
	}
	entries, err := os.ReadDir(filepath.Join(h.CgroupRoot, kubepods))
	if err != nil {
		return nil, fmt.Errorf("deciding share enforcement: listing the kubelet's pods cgroup: %w", err)
	}
	for _, e := range entries {
		n := e.Name()
		if e.IsDir() && (n == "burstable" || n == "besteffort" || strings.HasSuffix(n, "-burstable.slice") || strings.HasSuffix(n, "-besteffort.slice")) {
			paths = append(paths, kubepods+"/"+n)
		}
	}
	var chain []CgroupLevel
	for _, p := range paths {
		data, err := os.ReadFile(filepath.Join(h.CgroupRoot, p, "cgroup.subtree_control"))
		if err != nil {
			return nil, fmt.Errorf("deciding share enforcement: reading %s: %w", filepath.Join("/", p, "cgroup.subtree_control"), err)
		}
		chain = append(chain, CgroupLevel{Path: p, SubtreeControl: strings.Fields(string(data))})
	}
	return chain, nil
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

// Driver is what detection asks NVML on a real node (the NVML GPU source
// answers it).
type Driver interface {
	// HasMemoryLimitsSymbol looks nvmlDeviceSetMemoryLimits_v1 up.
	HasMemoryLimitsSymbol() bool
	// MIGEnabled lists the UUIDs of the cards whose MIG mode is on.
	MIGEnabled(ctx context.Context) ([]string, error)
}

// ForNode is the level the plugin publishes for a node whose cards report
// driverVersions (NVML's, one per card; all the same on a node), asking
// driver (nil with fake GPUs) and reading host. Fake GPUs enforce nothing,
// so they are advisory whatever their profile says. Any input that cannot
// be read makes the node advisory too, with the reason.
func ForNode(ctx context.Context, fake bool, driverVersions []string, driver Driver, host Host) Capabilities {
	if fake {
		return Capabilities{Level: Advisory, ReasonCode: device.ReasonFakeGPUs, Reason: "fake GPUs: nothing is enforced"}
	}
	if driver == nil {
		return Capabilities{Level: Advisory, ReasonCode: device.ReasonHostUnreadable, Reason: "deciding share enforcement: the GPU source cannot be asked about the driver's memory limits and MIG modes"}
	}
	version := ""
	for _, v := range driverVersions {
		if v != "" {
			version = v
			break
		}
	}
	if version == "" {
		return Capabilities{Level: Advisory, ReasonCode: device.ReasonDriverUnknown, Reason: "no card reports an NVIDIA driver version"}
	}
	in := Inputs{DriverVersion: version, MemoryLimitsSymbol: driver.HasMemoryLimitsSymbol()}
	mig, err := driver.MIGEnabled(ctx)
	if err != nil {
		return Capabilities{Level: Advisory, ReasonCode: device.ReasonHostUnreadable, Reason: fmt.Sprintf("deciding share enforcement: reading MIG modes: %v", err)}
	}
	in.MIGEnabled = mig
	c, err := ReadHost(in, host)
	if err != nil {
		code := device.ReasonHostUnreadable
		if _, verr := leadingInt(version); verr != nil {
			code = device.ReasonDriverUnknown
		}
		return Capabilities{Level: Advisory, ReasonCode: code, Reason: err.Error()}
	}
	return c
}
