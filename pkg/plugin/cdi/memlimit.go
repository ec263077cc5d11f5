package cdi

import (
	"strconv"

	cdiapi "tags.cncf.io/container-device-interface/pkg/cdi"
	cdispec "tags.cncf.io/container-device-interface/specs-go"

	"github.com/tangram-gpu/tangram/pkg/plugin/prepared"
)

// MemoryLimitHook is how a share's CDI device calls tangram-cdi-hook, which
// sets the claim's hard memory limit on the cgroup of the container's pod
// through NVML before the container's process runs (docs/enforcement.md).
// The plugin sets it only on nodes whose enforcement level is hard.
type MemoryLimitHook struct {
	// Path is the hook binary as the host (the container runtime) sees it.
	Path string
	// DriverRoot is the NVIDIA driver root as the host sees it, where the
	// hook finds libnvidia-ml.so.1.
	DriverRoot string
	// StateDir is where the hook keeps which pod holds each claim
	// (memlimit.Records), as the host sees it: the plugin's
	// <state-dir>/memory-limits.
	StateDir string
}

// hookName is the program name the hook is given as argv[0].
const hookName = "tangram-cdi-hook"

// MemoryLimitHookTimeout is the OCI hook timeout, in seconds, of
// tangram-cdi-hook: the container runtime kills a hook still running then,
// and the container does not start (fail closed, retried by the kubelet),
// so a hook hung in NVML or on a lock never holds a container, nor the
// node's records lock, for ever. Loading NVML and setting a limit take
// well under a second with persistence mode, a few seconds per card
// without it; the hook waits at most memlimit.DefaultLockWait for each of
// its two locks (the node's records, its pod's), which leaves 20 s of the
// 60 for NVML. It is well below the kubelet's CRI deadline for starting a
// container (--runtime-request-timeout, 2 minutes by default), during
// which the runtime runs createRuntime hooks, so the pod's events carry
// the runtime's "hook timed out" rather than a CRI deadline.
const MemoryLimitHookTimeout = 60

// memoryLimitHook is the createRuntime hook limiting claim claimUID's
// containers to limitBytes of the card, together, on their pod's cgroup:
// createRuntime runs after the container's cgroup exists and before its
// process starts, so the workload never runs unlimited; the hook exits
// non-zero if it cannot set the limit (or another pod holds the claim),
// and the runtime then refuses to start the container.
//
// Without a StateDir the hook keeps no record of the claim's pod (no
// one-pod-per-claim check): for callers outside a node's plugin.
//
// A claim of a strict class (prepared.Claim.NonRootClass) has the hook
// refuse, first, a container that would run as root or may gain
// privileges (--non-root-class; pkg/plugin/podsecurity): every container
// that joins the claim runs it, including pods that were not reserving the
// claim when it was prepared.
func (h MemoryLimitHook) hook(claim prepared.Claim, uuid string, limitBytes int64) *cdispec.Hook {
	args := []string{hookName, "--driver-root", h.DriverRoot}
	if h.StateDir != "" {
		args = append(args, "--state-dir", h.StateDir, "--claim", claim.UID)
	}
	if claim.NonRootClass != "" {
		args = append(args, "--non-root-class", claim.NonRootClass, "--claim-name", claim.Namespace+"/"+claim.Name)
	}
	timeout := MemoryLimitHookTimeout
	return &cdispec.Hook{
		HookName: cdiapi.CreateRuntimeHook,
		Path:     h.Path,
		Args:     append(args, "--limit", uuid+"="+strconv.FormatInt(limitBytes, 10)),
		Timeout:  &timeout,
	}
}
