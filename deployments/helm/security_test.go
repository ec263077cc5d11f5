//go:build helm

package helm

import (
	"slices"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/tangram-gpu/tangram/pkg/plugin/mps/daemon"
)

const mpsPolicyName = pluginName + "-mps-daemon-pods"

// TestMPSNamespace: the MPS daemon pods get a namespace of their own, the
// plugin is told about it, and nothing of the plugin's reaches the release
// namespace.
func TestMPSNamespace(t *testing.T) {
	for _, tc := range []struct {
		name          string
		sets          []string
		wantNamespace string
		wantCreated   bool
	}{
		{name: "default", wantNamespace: namespace + "-mps", wantCreated: true},
		{name: "named", sets: []string{"kubeletPlugin.mps.namespace.name=gpu-mps"}, wantNamespace: "gpu-mps", wantCreated: true},
		{name: "brought by the admin", sets: []string{"kubeletPlugin.mps.namespace.name=gpu-mps", "kubeletPlugin.mps.namespace.create=false"}, wantNamespace: "gpu-mps"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			objs := render(t, tc.sets...)
			_, c := daemonSet(t, objs)
			if got := flagValues(c.Args)["mps-daemon-namespace"]; got != tc.wantNamespace {
				t.Errorf("--mps-daemon-namespace=%q, want %q", got, tc.wantNamespace)
			}
			if got := objs.has("Namespace", tc.wantNamespace); got != tc.wantCreated {
				t.Fatalf("Namespace %s rendered = %v, want %v", tc.wantNamespace, got, tc.wantCreated)
			}
			if tc.wantCreated {
				ns := objs.get(t, "Namespace", tc.wantNamespace).(*corev1.Namespace)
				if ns.Labels["pod-security.kubernetes.io/enforce"] != "privileged" {
					t.Errorf("namespace labels %v: the daemon is privileged, Pod Security must allow it there", ns.Labels)
				}
			}
			for name, obj := range objs["RoleBinding"] {
				rb := obj.(*rbacv1.RoleBinding)
				for _, s := range rb.Subjects {
					if s.Name == pluginName && rb.Namespace != tc.wantNamespace {
						t.Errorf("RoleBinding %s/%s gives the plugin rights outside the MPS namespace", rb.Namespace, name)
					}
				}
			}
		})
	}
	if out, err := template(t, "kubeletPlugin.mps.namespace.name="+namespace); err == nil || !strings.Contains(err.Error(), "must not be the release namespace") {
		t.Errorf("the release namespace as MPS namespace: err %v, output %d bytes", err, len(out))
	}
	if objs := render(t, "kubeletPlugin.mps.daemon=process"); objs.has("Namespace", namespace+"-mps") || objs.has("ValidatingAdmissionPolicy", mpsPolicyName) {
		t.Error("the MPS namespace or pod policy is rendered although the daemon is a child process")
	}
}

// TestMPSDaemonPodPolicy checks the policy that pins what the plugin may
// create against what the plugin builds (pkg/plugin/mps) and the chart's
// values; the e2e privilege scenario runs it on a real API server.
func TestMPSDaemonPodPolicy(t *testing.T) {
	for _, tc := range []struct {
		name            string
		sets            []string
		wantHostPaths   []string
		wantDriverRoot  string
		wantPullSecrets string
	}{
		{name: "real GPUs", wantDriverRoot: `"/run/nvidia/driver"`, wantPullSecrets: `["regcred"]`,
			sets: []string{"driverRoot=/run/nvidia/driver", "imagePullSecrets[0].name=regcred", "kubeletPlugin.hostPaths.mpsRoot=/run/x/mps/"}},
		{name: "fake GPUs: no driver root", wantDriverRoot: `""`, wantPullSecrets: `[]`, sets: []string{"fakeGPU.profile=dgx-h100"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			objs := render(t, tc.sets...)
			_, c := daemonSet(t, objs)
			flags := flagValues(c.Args)
			vap := objs.get(t, "ValidatingAdmissionPolicy", mpsPolicyName).(*admissionv1.ValidatingAdmissionPolicy)
			wantUser := `request.userInfo.username == "system:serviceaccount:` + namespace + `:` + pluginName + `"`
			if len(vap.Spec.MatchConditions) != 1 || vap.Spec.MatchConditions[0].Expression != wantUser {
				t.Errorf("match conditions = %+v, want only %s", vap.Spec.MatchConditions, wantUser)
			}
			if vap.Spec.FailurePolicy == nil || *vap.Spec.FailurePolicy != admissionv1.Fail {
				t.Errorf("failure policy = %v, want Fail", vap.Spec.FailurePolicy)
			}
			rules := vap.Spec.MatchConstraints.ResourceRules
			if len(rules) != 1 || !slices.Equal(rules[0].Resources, []string{"pods", "pods/*"}) || len(rules[0].Operations) != 4 {
				t.Errorf("resource rules = %+v, want every write to pods and their subresources", rules)
			}
			vars := map[string]string{}
			for _, v := range vap.Spec.Variables {
				vars[v.Name] = v.Expression
			}
			// The host paths are exactly the daemon's: pkg/plugin/mps's layout
			// under the plugin's --mps-root.
			layout := daemon.Layout{Root: strings.TrimSuffix(flags["mps-root"], "/")}
			wantPaths := `["` + layout.PipeDir() + `","` + layout.LogDir() + `","` + layout.ShmDir() + `"]`
			if vars["hostPaths"] != wantPaths {
				t.Errorf("hostPaths = %s, want %s", vars["hostPaths"], wantPaths)
			}
			if vars["driverRoot"] != tc.wantDriverRoot || vars["pullSecrets"] != tc.wantPullSecrets {
				t.Errorf("driverRoot = %s, pullSecrets = %s; want %s, %s", vars["driverRoot"], vars["pullSecrets"], tc.wantDriverRoot, tc.wantPullSecrets)
			}
			all := ""
			for _, v := range vap.Spec.Validations {
				all += v.Expression + "\n"
			}
			for _, want := range []string{
				`request.namespace == "` + flags["mps-daemon-namespace"] + `"`,
				`startsWith("` + flags["mps-daemon-pod-prefix"] + `-mps-")`,
				`c.image == "` + flags["mps-daemon-image"] + `"`,
				"variables.pod.spec.?nodeName.orValue('') == variables.node",
				"object.spec.?automountServiceAccountToken.orValue(true) == false",
				"!has(e.valueFrom)",
				"!object.spec.?hostNetwork.orValue(false)",
				"o.kind == 'Node'",
			} {
				if !strings.Contains(all, want) {
					t.Errorf("no validation checks %s", want)
				}
			}
			binding := objs.get(t, "ValidatingAdmissionPolicyBinding", mpsPolicyName).(*admissionv1.ValidatingAdmissionPolicyBinding)
			if binding.Spec.PolicyName != mpsPolicyName || !slices.Equal(binding.Spec.ValidationActions, []admissionv1.ValidationAction{admissionv1.Deny}) {
				t.Errorf("binding = %+v, want Deny for policy %s", binding.Spec, mpsPolicyName)
			}
		})
	}
}

// TestControllerLeastPrivilege: the controller's Lease rights name its
// Lease, it may create but not change or delete what users own, and it
// holds rights on Secrets and the webhook configuration only when it
// manages the webhook certificate itself.
func TestControllerLeastPrivilege(t *testing.T) {
	objs := render(t, "controller.enabled=true", "controller.replicas=2")
	dep := objs.get(t, "Deployment", "tangram-controller").(*appsv1.Deployment)
	flags := flagValues(dep.Spec.Template.Spec.Containers[0].Args)
	lease := objs.get(t, "Role", "tangram-controller-leader-election").(*rbacv1.Role)
	for _, r := range lease.Rules {
		for _, v := range r.Verbs {
			switch {
			case v == "create" && len(r.ResourceNames) == 0:
			case (v == "get" || v == "update") && slices.Equal(r.ResourceNames, []string{flags["leader-elect-name"]}):
			default:
				t.Errorf("leader election rule %+v: only create, and get/update of Lease %q", r, flags["leader-elect-name"])
			}
		}
	}
	role := objs.get(t, "ClusterRole", "tangram-controller").(*rbacv1.ClusterRole)
	for _, r := range role.Rules {
		for _, res := range r.Resources {
			if res != "resourceclaimtemplates" && res != "workloads" && res != "podgroups" {
				continue
			}
			if verbs := slices.Sorted(slices.Values(r.Verbs)); !slices.Equal(verbs, []string{"create", "get", "list", "watch"}) {
				t.Errorf("controller may %v on %s, want only get/list/watch/create", verbs, res)
			}
		}
	}
	// A GpuGang's spec.priorityClassName is read by name; nothing more.
	gangRules := objs.get(t, "ClusterRole", "tangram-controller-gpugangs").(*rbacv1.ClusterRole).Rules
	if !allows(gangRules, "scheduling.k8s.io", "priorityclasses", "high", "get") {
		t.Error("the controller may not get PriorityClasses, so a GpuGang with spec.priorityClassName never gets its PodGroup")
	}
	for _, verb := range []string{"list", "watch", "create", "update", "patch", "delete"} {
		if allows(gangRules, "scheduling.k8s.io", "priorityclasses", "high", verb) {
			t.Errorf("the controller may %s PriorityClasses; it only needs get", verb)
		}
	}
	if objs.has("Role", "tangram-controller-webhook-cert") {
		t.Error("the webhook certificate Role is rendered although the webhook is off")
	}
	if allows(objs.get(t, "ClusterRole", "tangram-controller-gpugangs").(*rbacv1.ClusterRole).Rules,
		"admissionregistration.k8s.io", "validatingwebhookconfigurations", "tangram-controller-gpuconfig", "update") {
		t.Error("the controller may update the webhook configuration although the webhook is off")
	}
	self := render(t, "controller.enabled=true", "controller.webhook.enabled=true", "controller.webhook.certValidity=720h")
	if got := flagValues(self.get(t, "Deployment", "tangram-controller").(*appsv1.Deployment).Spec.Template.Spec.Containers[0].Args)["webhook-cert-validity"]; got != "720h" {
		t.Errorf("--webhook-cert-validity=%q, want 720h", got)
	}
	if !allows(self.get(t, "Role", "tangram-controller-webhook-cert").(*rbacv1.Role).Rules, "", "secrets", "tangram-controller-webhook-tls", "update") {
		t.Error("a self-managing controller may not update its certificate Secret")
	}
}

// TestViewerRole: exactly what kubectl-tangram reads, no pod listing.
// TestViewerRole: the viewer may exactly what `kubectl tangram` reads:
// across the cluster (the ClusterRole) no listing of pods; in the release
// namespace (the Role, for top) the plugin's pods listed and their
// /metrics read through the pod proxy, nothing else.
func TestViewerRole(t *testing.T) {
	objs := render(t)
	viewer := objs.get(t, "ClusterRole", "tangram-viewer").(*rbacv1.ClusterRole)
	checkRules(t, "viewer ClusterRole", viewer.Rules, map[string][]string{
		"resource.k8s.io/resourceslices": {"get", "list"},
		"resource.k8s.io/resourceclaims": {"get", "list"},
		"resource.k8s.io/deviceclasses":  {"get", "list"},
		"/nodes":                         {"get", "list"},
		"/pods":                          {"get"},
		"tangram.dev/gpugangs":           {"get", "list"},
	})
	role := objs.get(t, "Role", "tangram-viewer").(*rbacv1.Role)
	if role.Namespace != namespace {
		t.Errorf("viewer Role in namespace %q, want the release's %q", role.Namespace, namespace)
	}
	checkRules(t, "viewer Role", role.Rules, map[string][]string{
		"/pods":       {"list"},
		"/pods/proxy": {"get"},
	})
	for _, r := range role.Rules {
		if len(r.ResourceNames) != 0 || len(r.NonResourceURLs) != 0 {
			t.Errorf("viewer Role rule %+v: want no resource names or URLs", r)
		}
	}
	off := render(t, "viewerRole.create=false")
	if off.has("ClusterRole", "tangram-viewer") || off.has("Role", "tangram-viewer") {
		t.Error("viewerRole.create=false still renders a viewer role")
	}
}

// checkRules holds rules to exactly want: group/resource → sorted verbs.
func checkRules(t *testing.T, what string, rules []rbacv1.PolicyRule, want map[string][]string) {
	t.Helper()
	got := map[string][]string{}
	for _, r := range rules {
		for _, g := range r.APIGroups {
			for _, res := range r.Resources {
				got[g+"/"+res] = slices.Sorted(slices.Values(r.Verbs))
			}
		}
	}
	if len(got) != len(want) {
		t.Errorf("%s may %v, want exactly %v", what, got, want)
	}
	for k, v := range want {
		if !slices.Equal(got[k], v) {
			t.Errorf("%s may %v on %s, want %v", what, got[k], k, v)
		}
	}
}

func TestNetworkPolicies(t *testing.T) {
	objs := render(t, "controller.enabled=true", "controller.webhook.enabled=true", "scheduler.enabled=true",
		`networkPolicy.metricsFrom@json=[{"namespaceSelector":{"matchLabels":{"kubernetes.io/metadata.name":"monitoring"}}}]`)
	ports := func(np *networkingv1.NetworkPolicy) map[int]bool {
		out := map[int]bool{}
		for _, r := range np.Spec.Ingress {
			for _, p := range r.Ports {
				out[p.Port.IntValue()] = len(r.From) > 0
			}
		}
		return out
	}
	for _, tc := range []struct {
		name string
		// want maps each allowed port to whether it is limited to metricsFrom.
		want map[int]bool
	}{
		{name: pluginName, want: map[int]bool{51515: false, 9400: true}},
		{name: "tangram-controller", want: map[int]bool{51516: false, 9443: false, 9400: true}},
		{name: "tangram-scheduler", want: map[int]bool{10259: false}},
	} {
		np := objs.get(t, "NetworkPolicy", tc.name).(*networkingv1.NetworkPolicy)
		if got := ports(np); !mapsEqual(got, tc.want) {
			t.Errorf("NetworkPolicy %s lets in %v, want %v", tc.name, got, tc.want)
		}
		if np.Namespace != namespace || !slices.Equal(np.Spec.PolicyTypes, []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}) {
			t.Errorf("NetworkPolicy %s in %s with types %v", tc.name, np.Namespace, np.Spec.PolicyTypes)
		}
	}
	mps := objs.get(t, "NetworkPolicy", "tangram-mps-daemon").(*networkingv1.NetworkPolicy)
	if mps.Namespace != namespace+"-mps" || len(mps.Spec.Ingress) != 0 || len(mps.Spec.Egress) != 0 || len(mps.Spec.PolicyTypes) != 2 {
		t.Errorf("MPS NetworkPolicy %+v, want all traffic in and out denied in %s-mps", mps.Spec, namespace)
	}
	if off := render(t, "networkPolicy.enabled=false"); len(off["NetworkPolicy"]) != 0 {
		t.Error("networkPolicy.enabled=false still renders policies")
	}
}

func mapsEqual(a, b map[int]bool) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// TestWebhookCertManager: with cert-manager, the controller reads the
// certificate cert-manager writes, cert-manager injects the caBundle, and
// the controller loses its rights on Secrets and the webhook configuration.
func TestWebhookCertManager(t *testing.T) {
	for _, tc := range []struct {
		name       string
		sets       []string
		wantIssuer string
		wantChain  bool
	}{
		{name: "chart's own CA", wantIssuer: "Issuer/tangram-controller-webhook-ca", wantChain: true},
		{name: "the admin's ClusterIssuer", sets: []string{"controller.webhook.certManager.issuerRef.name=corp-ca", "controller.webhook.certManager.issuerRef.kind=ClusterIssuer"},
			wantIssuer: "ClusterIssuer/corp-ca"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			objs := render(t, append([]string{"controller.enabled=true", "controller.webhook.enabled=true", "controller.webhook.certManager.enabled=true",
				"controller.webhook.certManager.duration=720h", "controller.webhook.certManager.renewBefore=240h"}, tc.sets...)...)
			cert := objs.get(t, "Certificate", "tangram-controller-webhook").(*unstructured.Unstructured)
			spec := cert.Object["spec"].(map[string]any)
			issuer := spec["issuerRef"].(map[string]any)
			if got := issuer["kind"].(string) + "/" + issuer["name"].(string); got != tc.wantIssuer {
				t.Errorf("issuer %s, want %s", got, tc.wantIssuer)
			}
			if spec["secretName"] != "tangram-controller-webhook-tls" || spec["duration"] != "720h" || spec["renewBefore"] != "240h" {
				t.Errorf("Certificate spec %v", spec)
			}
			var dnsNames []string
			for _, n := range spec["dnsNames"].([]any) {
				dnsNames = append(dnsNames, n.(string))
			}
			if !slices.Contains(dnsNames, "tangram-controller-webhook.tangram-system.svc") {
				t.Errorf("dnsNames %v lack the name the API server calls", dnsNames)
			}
			if got := objs.has("Certificate", "tangram-controller-webhook-ca") && objs.has("Issuer", "tangram-controller-webhook-ca"); got != tc.wantChain {
				t.Errorf("chart CA rendered = %v, want %v", got, tc.wantChain)
			}
			vwc := objs.get(t, "ValidatingWebhookConfiguration", "tangram-controller-gpuconfig").(*admissionv1.ValidatingWebhookConfiguration)
			if got := vwc.Annotations["cert-manager.io/inject-ca-from"]; got != "tangram-system/tangram-controller-webhook" {
				t.Errorf("inject-ca-from = %q", got)
			}
			dep := objs.get(t, "Deployment", "tangram-controller").(*appsv1.Deployment)
			pod := dep.Spec.Template.Spec
			flags := flagValues(pod.Containers[0].Args)
			if flags["webhook-cert-dir"] != "/etc/tangram/webhook-tls" || flags["webhook-config-name"] != "" || flags["webhook-secret"] != "" {
				t.Errorf("controller flags %v: want --webhook-cert-dir only", flags)
			}
			if len(pod.Volumes) != 1 || pod.Volumes[0].Secret == nil || pod.Volumes[0].Secret.SecretName != "tangram-controller-webhook-tls" ||
				len(pod.Containers[0].VolumeMounts) != 1 || pod.Containers[0].VolumeMounts[0].MountPath != "/etc/tangram/webhook-tls" {
				t.Errorf("volumes %+v mounts %+v: want the certificate Secret at the cert dir", pod.Volumes, pod.Containers[0].VolumeMounts)
			}
			if objs.has("Role", "tangram-controller-webhook-cert") {
				t.Error("the controller keeps rights on Secrets although cert-manager writes the certificate")
			}
			if allows(objs.get(t, "ClusterRole", "tangram-controller-gpugangs").(*rbacv1.ClusterRole).Rules,
				"admissionregistration.k8s.io", "validatingwebhookconfigurations", "tangram-controller-gpuconfig", "update") {
				t.Error("the controller may update the webhook configuration although cert-manager injects the caBundle")
			}
		})
	}
	if out, err := template(t, "controller.enabled=true", "controller.webhook.enabled=true", "controller.webhook.certManager.issuerRef.kind=Vault"); err == nil {
		t.Errorf("issuerRef.kind=Vault was accepted:\n%.300s", out)
	}
}
