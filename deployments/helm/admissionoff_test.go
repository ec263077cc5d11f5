//go:build helm

package helm

import (
	"strings"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
)

// TestAdmissionPolicyOff: admissionPolicy.enabled=false drops protections
// that exist only at admission (the whole-card class refusing capacity
// requests, memory 0 only for admin access, the plugin's own-node slices,
// GPUs only through claims). Rendering used to drop them silently; now it
// fails with the reason unless admissionPolicy.acknowledgeUnprotected=true,
// and never renders the controller's update on its webhook configuration
// (or its Secret create) without the policy that holds it to the caBundle
// (and the certificate Secret).
func TestAdmissionPolicyOff(t *testing.T) {
	off := []string{"admissionPolicy.enabled=false", "kubeletPlugin.mps.daemon=process"}
	ack := append(append([]string{}, off...), "admissionPolicy.acknowledgeUnprotected=true")
	selfManaged := []string{"controller.enabled=true", "controller.webhook.enabled=true"}
	certManager := append(append([]string{}, selfManaged...), "controller.webhook.certManager.enabled=true")
	cat := func(parts ...[]string) []string {
		var out []string
		for _, p := range parts {
			out = append(out, p...)
		}
		return out
	}

	for _, tc := range []struct {
		name    string
		sets    []string
		wantErr []string
	}{
		{name: "off without acknowledging", sets: off, wantErr: []string{
			"admissionPolicy.enabled=false drops protections that exist only at admission",
			"whole-card class gpu.tangram.dev", "memory 0 only with adminAccess", "own node's ResourceSlices",
			"GPUs only through claims", "admissionPolicy.acknowledgeUnprotected=true"}},
		{name: "off without acknowledging, controller with cert-manager", sets: cat(off, certManager), wantErr: []string{"admissionPolicy.acknowledgeUnprotected=true"}},
		{name: "off, acknowledged, self-managed webhook certificate", sets: cat(ack, selfManaged), wantErr: []string{
			"self-managed webhook certificate", "update on its ValidatingWebhookConfiguration",
			"controller.webhook.certManager.enabled=true", "controller.webhook.enabled=false"}},
		// The daemon-pod reason comes first, acknowledged or not.
		{name: "off, acknowledged, MPS daemon pods", sets: []string{"admissionPolicy.enabled=false", "admissionPolicy.acknowledgeUnprotected=true"},
			wantErr: []string{"kubeletPlugin.mps.daemon=pod", "kubeletPlugin.mps.daemon=process"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, err := template(t, tc.sets...)
			if err == nil {
				t.Fatalf("helm template %v succeeded (%d bytes), want it refused", tc.sets, len(out))
			}
			for _, w := range tc.wantErr {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error does not mention %q: %s", w, err)
				}
			}
		})
	}

	// Whatever renders: the controller's write on its webhook configuration
	// comes with the caBundle-only policy, its Secret create with the
	// Secret-only policy.
	for _, sets := range [][]string{
		nil, selfManaged, certManager,
		ack, cat(ack, certManager), cat(ack, []string{"controller.enabled=true"}),
	} {
		objs := render(t, sets...)
		if objs.has("ClusterRole", "tangram-controller-gpugangs") {
			rules := objs.get(t, "ClusterRole", "tangram-controller-gpugangs").(*rbacv1.ClusterRole).Rules
			for _, verb := range []string{"update", "patch", "create", "delete"} {
				if allows(rules, "admissionregistration.k8s.io", "validatingwebhookconfigurations", "tangram-controller-gpuconfig", verb) &&
					!objs.has("ValidatingAdmissionPolicy", "tangram-controller-webhook-cabundle-only") {
					t.Errorf("%v: the controller may %s its webhook configuration with no caBundle-only policy", sets, verb)
				}
			}
		}
		if objs.has("Role", "tangram-controller-webhook-cert") && !objs.has("ValidatingAdmissionPolicy", "tangram-controller-webhook-secret-only") {
			t.Errorf("%v: the controller may create Secrets with no Secret-only policy", sets)
		}
		if policiesOff := len(sets) >= len(ack) && sets[0] == ack[0]; policiesOff && len(objs["ValidatingAdmissionPolicy"]) != 0 {
			t.Errorf("%v: policies rendered with admissionPolicy.enabled=false", sets)
		}
	}
}
