package podsecurity

import (
	"errors"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

const (
	driver = "gpu.tangram.dev"
	strict = "hard-shared-gpu.tangram.dev"
	shared = "shared-gpu.tangram.dev"
)

var strictClasses = []string{strict}

// lockedDown is a container security context that satisfies the rule.
func lockedDown() *corev1.SecurityContext {
	return &corev1.SecurityContext{RunAsNonRoot: ptr.To(true), AllowPrivilegeEscalation: ptr.To(false),
		Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}}
}

func pod(mutate func(*corev1.Pod)) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "p"}, Spec: corev1.PodSpec{
		Containers: []corev1.Container{{Name: "app", SecurityContext: lockedDown()}, {Name: "sidecar", SecurityContext: lockedDown()}},
	}}
	if mutate != nil {
		mutate(p)
	}
	return p
}

// claim of one request of class, allocated on our driver (or another).
func claim(class, resultDriver string) *resourceapi.ResourceClaim {
	return &resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "c"},
		Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{
			{Name: "gpu", Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: class}},
		}}},
		Status: resourceapi.ResourceClaimStatus{Allocation: &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{
			Results: []resourceapi.DeviceRequestAllocationResult{{Request: "gpu", Driver: resultDriver, Pool: "node", Device: "gpu-0"}},
		}}},
	}
}

func TestCheck(t *testing.T) {
	firstAvailable := claim("", driver)
	firstAvailable.Spec.Devices.Requests[0] = resourceapi.DeviceRequest{Name: "gpu", FirstAvailable: []resourceapi.DeviceSubRequest{
		{Name: "whole", DeviceClassName: "gpu.tangram.dev"}, {Name: "share", DeviceClassName: strict},
	}}
	firstAvailable.Status.Allocation.Devices.Results[0].Request = "gpu/share"
	firstAvailableWhole := firstAvailable.DeepCopy()
	firstAvailableWhole.Status.Allocation.Devices.Results[0].Request = "gpu/whole"

	for _, tc := range []struct {
		name    string
		claim   *resourceapi.ResourceClaim
		pods    []*corev1.Pod
		classes []string
		want    []string // substrings of the error; none: allowed
	}{
		{name: "locked-down pod", claim: claim(strict, driver), pods: []*corev1.Pod{pod(nil)}, classes: strictClasses},
		{name: "runAsNonRoot on the pod only", claim: claim(strict, driver), classes: strictClasses, pods: []*corev1.Pod{pod(func(p *corev1.Pod) {
			p.Spec.SecurityContext = &corev1.PodSecurityContext{RunAsNonRoot: ptr.To(true)}
			for i := range p.Spec.Containers {
				p.Spec.Containers[i].SecurityContext.RunAsNonRoot = nil
			}
		})}},
		{name: "runAsNonRoot missing on one container", claim: claim(strict, driver), classes: strictClasses, pods: []*corev1.Pod{pod(func(p *corev1.Pod) {
			p.Spec.Containers[1].SecurityContext.RunAsNonRoot = nil
		})}, want: []string{`pod team/p container "sidecar": securityContext.runAsNonRoot must be true (on the container or the pod) for a share of class hard-shared-gpu.tangram.dev`}},
		{name: "a container overrides the pod back to root", claim: claim(strict, driver), classes: strictClasses, pods: []*corev1.Pod{pod(func(p *corev1.Pod) {
			p.Spec.SecurityContext = &corev1.PodSecurityContext{RunAsNonRoot: ptr.To(true)}
			p.Spec.Containers[0].SecurityContext.RunAsNonRoot = ptr.To(false)
		})}, want: []string{`container "app": securityContext.runAsNonRoot must be true`}},
		{name: "escalation allowed", claim: claim(strict, driver), classes: strictClasses, pods: []*corev1.Pod{pod(func(p *corev1.Pod) {
			p.Spec.Containers[0].SecurityContext.AllowPrivilegeEscalation = ptr.To(true)
		})}, want: []string{`pod team/p container "app": securityContext.allowPrivilegeEscalation must be false for a share of class hard-shared-gpu.tangram.dev`}},
		{name: "escalation not set (defaults to allowed)", claim: claim(strict, driver), classes: strictClasses, pods: []*corev1.Pod{pod(func(p *corev1.Pod) {
			p.Spec.Containers[1].SecurityContext.AllowPrivilegeEscalation = nil
		})}, want: []string{`container "sidecar": securityContext.allowPrivilegeEscalation must be false`}},
		{name: "capabilities added", claim: claim(strict, driver), classes: strictClasses, pods: []*corev1.Pod{pod(func(p *corev1.Pod) {
			p.Spec.Containers[0].SecurityContext.Capabilities.Add = []corev1.Capability{"SYS_ADMIN"}
		})}, want: []string{`container "app": securityContext.capabilities.add must be empty`}},
		{name: "privileged", claim: claim(strict, driver), classes: strictClasses, pods: []*corev1.Pod{pod(func(p *corev1.Pod) {
			p.Spec.Containers[0].SecurityContext.Privileged = ptr.To(true)
		})}, want: []string{`container "app": securityContext.privileged must be false`}},
		{name: "root init container", claim: claim(strict, driver), classes: strictClasses, pods: []*corev1.Pod{pod(func(p *corev1.Pod) {
			p.Spec.InitContainers = []corev1.Container{{Name: "setup"}}
		})}, want: []string{`init container "setup": securityContext.runAsNonRoot`, `init container "setup": securityContext.allowPrivilegeEscalation`}},
		{name: "root ephemeral container", claim: claim(strict, driver), classes: strictClasses, pods: []*corev1.Pod{pod(func(p *corev1.Pod) {
			p.Spec.EphemeralContainers = []corev1.EphemeralContainer{{EphemeralContainerCommon: corev1.EphemeralContainerCommon{Name: "debug"}}}
		})}, want: []string{`ephemeral container "debug": securityContext.runAsNonRoot`}},
		{name: "second reserving pod is root", claim: claim(strict, driver), classes: strictClasses, pods: []*corev1.Pod{pod(nil), pod(func(p *corev1.Pod) {
			p.Name = "q"
			p.Spec.Containers[0].SecurityContext = nil
		})}, want: []string{`pod team/q container "app": securityContext.runAsNonRoot`}},
		{name: "default class root pod allowed", claim: claim(shared, driver), classes: strictClasses, pods: []*corev1.Pod{pod(func(p *corev1.Pod) {
			p.Spec.Containers[0].SecurityContext = nil
			p.Spec.Containers[1].SecurityContext = &corev1.SecurityContext{Privileged: ptr.To(true)}
		})}},
		{name: "default class strict by the chart value", claim: claim(shared, driver), classes: []string{strict, shared}, pods: []*corev1.Pod{pod(func(p *corev1.Pod) {
			p.Spec.Containers[0].SecurityContext = nil
		})}, want: []string{`container "app": securityContext.runAsNonRoot must be true (on the container or the pod) for a share of class shared-gpu.tangram.dev`}},
		{name: "no strict classes configured", claim: claim(strict, driver), classes: nil, pods: []*corev1.Pod{pod(func(p *corev1.Pod) {
			p.Spec.Containers[0].SecurityContext = nil
		})}},
		{name: "another driver's result", claim: claim(strict, "other.example.com"), classes: strictClasses, pods: []*corev1.Pod{pod(func(p *corev1.Pod) {
			p.Spec.Containers[0].SecurityContext = nil
		})}},
		{name: "firstAvailable subrequest of the strict class", claim: firstAvailable, classes: strictClasses, pods: []*corev1.Pod{pod(func(p *corev1.Pod) {
			p.Spec.Containers[0].SecurityContext.Privileged = ptr.To(true)
		})}, want: []string{`securityContext.privileged must be false for a share of class hard-shared-gpu.tangram.dev`}},
		{name: "firstAvailable chose another class", claim: firstAvailableWhole, classes: strictClasses, pods: []*corev1.Pod{pod(func(p *corev1.Pod) {
			p.Spec.Containers[0].SecurityContext.Privileged = ptr.To(true)
		})}},
		{name: "unallocated claim", claim: &resourceapi.ResourceClaim{}, classes: strictClasses, pods: []*corev1.Pod{pod(func(p *corev1.Pod) {
			p.Spec.Containers[0].SecurityContext = nil
		})}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := Check(tc.claim, tc.pods, driver, tc.classes)
			if len(tc.want) == 0 {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			var refused *RefusedError
			if !errors.As(err, &refused) {
				t.Fatalf("got %v, want a *RefusedError", err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
			if !strings.Contains(err.Error(), "recreate it") {
				t.Errorf("error %q does not say what to do", err)
			}
		})
	}
}

// TestViolationsListsEveryField: a bare root container fails on exactly the
// two fields that have insecure defaults, no more.
func TestViolationsListsEveryField(t *testing.T) {
	got := Violations(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "n", Name: "p"},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c"}}}}, strict)
	want := []string{
		`pod n/p container "c": securityContext.runAsNonRoot must be true (on the container or the pod) for a share of class hard-shared-gpu.tangram.dev`,
		`pod n/p container "c": securityContext.allowPrivilegeEscalation must be false for a share of class hard-shared-gpu.tangram.dev`,
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("got\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
