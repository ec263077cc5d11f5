package device

// AttrShareEnforcementReason says, on a node whose shareEnforcement is not
// "hard", why not: one of the ShareEnforcementReason codes (a string
// attribute holds at most 64 characters, so the plugin's log has the
// details). A hard node leaves it out. `kubectl tangram describe` shows it
// with ShareEnforcementReasonText.
const AttrShareEnforcementReason = "shareEnforcementReason"

// ShareEnforcementReason codes (pkg/plugin/enforcement decides them).
const (
	ReasonFakeGPUs               = "fake-gpus"
	ReasonDriverUnknown          = "driver-version-unknown"
	ReasonDriverBefore615        = "driver-before-615"
	ReasonNoMemoryLimitsSymbol   = "nvml-without-memory-limits"
	ReasonMIGEnabled             = "mig-enabled"
	ReasonHostUnreadable         = "host-unreadable"
	ReasonNotCgroupV2            = "not-cgroup-v2"
	ReasonKernelUnreadable       = "kernel-release-unreadable"
	ReasonNoDmemController       = "no-dmem-controller"
	ReasonKubeletCgroupsNotFound = "kubelet-cgroups-not-found"
	ReasonDmemNotEnabled         = "dmem-not-enabled-to-pod-cgroups"
)

var shareEnforcementReasonTexts = map[string]string{
	ReasonFakeGPUs:               "fake GPUs: nothing is enforced",
	ReasonDriverUnknown:          "no card reports an NVIDIA driver version",
	ReasonDriverBefore615:        "NVIDIA driver older than r615: classic MPS, limits are environment variables the tenant can unset",
	ReasonNoMemoryLimitsSymbol:   "the driver's NVML has no nvmlDeviceSetMemoryLimits_v1 (r615 and later have it): memory is not limited per pod",
	ReasonMIGEnabled:             "a card is in MIG mode, which per-cgroup GPU memory limits do not support: memory is not limited per pod",
	ReasonHostUnreadable:         "the kernel release or the cgroup root could not be read: memory is not limited per pod",
	ReasonNotCgroupV2:            "the host is not on cgroup v2: memory is not limited per pod",
	ReasonKernelUnreadable:       "the kernel release is unreadable: cannot tell whether the dmem controller is needed",
	ReasonNoDmemController:       "the kernel has no dmem cgroup controller (6.14+ built without CONFIG_CGROUP_DMEM?): memory is not limited per pod",
	ReasonKubeletCgroupsNotFound: "the kubelet's pod cgroups (kubepods) were not found under the cgroup root: memory is not limited per pod",
	ReasonDmemNotEnabled:         "dmem is not enabled (+dmem in cgroup.subtree_control) on every level down to the kubelet's pod cgroups: memory is not limited per pod",
}

// ShareEnforcementReasonText explains a shareEnforcementReason code for
// people; an unknown code (a newer plugin) is returned as it is.
func ShareEnforcementReasonText(code string) string {
	if t, ok := shareEnforcementReasonTexts[code]; ok {
		return t
	}
	return code
}
