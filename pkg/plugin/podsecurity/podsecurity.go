// Package podsecurity is the prepare-time half of "non-root where isolation
// depends on it": the pure rule that a pod using a claim of a strict share
// class (the chart's hard-shared-gpu.tangram.dev, and shared-gpu.tangram.dev
// with sharing.requireHardEnforcement) runs locked down. The chart's
// ValidatingAdmissionPolicies check the same rule when the pod is created,
// but they only see the claims and templates that exist at that moment: a
// pod created before its claim or template passes them, so the kubelet
// plugin checks again here, with the pods that reserve the claim.
//
// The rule, for every container (init and ephemeral ones too):
//   - securityContext.runAsNonRoot true (its own, else the pod's);
//   - securityContext.allowPrivilegeEscalation false (a setuid binary
//     otherwise makes a non-root process root again);
//   - no securityContext.capabilities.add;
//   - not securityContext.privileged.
//
// Nothing here reads the API server; pkg/plugin does.
package podsecurity

import (
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
)

// StrictClasses returns the device classes, among classes, of the claim's
// allocated results of driver, in the order of the results and without
// repeats. A result names its request ("req", or "req/sub" for a
// firstAvailable subrequest); the class is that request's.
func StrictClasses(claim *resourceapi.ResourceClaim, driver string, classes []string) []string {
	if claim == nil || claim.Status.Allocation == nil || len(classes) == 0 {
		return nil
	}
	var out []string
	for _, r := range claim.Status.Allocation.Devices.Results {
		if r.Driver != driver {
			continue
		}
		class := requestClass(claim.Spec.Devices.Requests, r.Request)
		if class != "" && slices.Contains(classes, class) && !slices.Contains(out, class) {
			out = append(out, class)
		}
	}
	return out
}

// requestClass is the class of the request a result names, "" when the
// claim has no such request.
func requestClass(requests []resourceapi.DeviceRequest, name string) string {
	main, sub, isSub := strings.Cut(name, "/")
	for _, r := range requests {
		if r.Name != main {
			continue
		}
		if !isSub {
			if r.Exactly != nil {
				return r.Exactly.DeviceClassName
			}
			return ""
		}
		for _, s := range r.FirstAvailable {
			if s.Name == sub {
				return s.DeviceClassName
			}
		}
	}
	return ""
}

// Violations lists what keeps pod from using a share of class, one line
// per container and field, e.g.
//
//	pod ns/p container "c": securityContext.allowPrivilegeEscalation must be false for a share of class hard-shared-gpu.tangram.dev
//
// Empty: the pod may use it.
func Violations(pod *corev1.Pod, class string) []string {
	podNonRoot := pod.Spec.SecurityContext != nil && pod.Spec.SecurityContext.RunAsNonRoot != nil && *pod.Spec.SecurityContext.RunAsNonRoot
	var out []string
	check := func(kind, name string, sc *corev1.SecurityContext) {
		fail := func(field, want string) {
			out = append(out, fmt.Sprintf("pod %s/%s %s %q: securityContext.%s must be %s for a share of class %s",
				pod.Namespace, pod.Name, kind, name, field, want, class))
		}
		nonRoot := podNonRoot
		if sc != nil && sc.RunAsNonRoot != nil {
			nonRoot = *sc.RunAsNonRoot
		}
		if !nonRoot {
			fail("runAsNonRoot", "true (on the container or the pod)")
		}
		if sc == nil || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
			fail("allowPrivilegeEscalation", "false")
		}
		if sc != nil && sc.Capabilities != nil && len(sc.Capabilities.Add) > 0 {
			fail("capabilities.add", "empty")
		}
		if sc != nil && sc.Privileged != nil && *sc.Privileged {
			fail("privileged", "false")
		}
	}
	for _, c := range pod.Spec.InitContainers {
		check("init container", c.Name, c.SecurityContext)
	}
	for _, c := range pod.Spec.Containers {
		check("container", c.Name, c.SecurityContext)
	}
	for _, c := range pod.Spec.EphemeralContainers {
		check("ephemeral container", c.Name, c.SecurityContext)
	}
	return out
}

// Check is the whole rule for one claim: nil when none of its results of
// driver is of a class in classes, or when every pod may use them;
// otherwise an error naming each pod, container and field, and what to do.
func Check(claim *resourceapi.ResourceClaim, pods []*corev1.Pod, driver string, classes []string) error {
	strict := StrictClasses(claim, driver, classes)
	if len(strict) == 0 {
		return nil
	}
	var lines []string
	for _, pod := range pods {
		lines = append(lines, Violations(pod, strict[0])...)
	}
	if len(lines) == 0 {
		return nil
	}
	return &RefusedError{Lines: lines}
}

// RefusedError is a claim refused at prepare because a pod reserving it is
// not locked down.
type RefusedError struct {
	Lines []string
}

func (e *RefusedError) Error() string {
	return strings.Join(e.Lines, "; ") +
		" (the isolation of a strict share relies on its MPS clients being unprivileged: set these fields in the pod's spec and recreate it)"
}
