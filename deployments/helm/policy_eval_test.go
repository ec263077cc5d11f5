//go:build helm

package helm

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apiserver/pkg/admission"
	plugincel "k8s.io/apiserver/pkg/admission/plugin/cel"
	"k8s.io/apiserver/pkg/admission/plugin/policy/validating"
	"k8s.io/apiserver/pkg/admission/plugin/webhook/matchconditions"
	celconfig "k8s.io/apiserver/pkg/apis/cel"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/cel/environment"
	"k8s.io/utils/ptr"

	"github.com/tangram-gpu/tangram/pkg/device"
	"github.com/tangram-gpu/tangram/pkg/dra"
	"github.com/tangram-gpu/tangram/pkg/gpu/fakegpu"
	"github.com/tangram-gpu/tangram/pkg/plugin/mps/daemon"
	tangramslices "github.com/tangram-gpu/tangram/pkg/resourceslices"
)

// compilePolicy compiles a rendered ValidatingAdmissionPolicy with the API
// server's own CEL environment and validator (k8s.io/apiserver), as its
// admission plugin does, so that the chart's policies are evaluated here on
// concrete requests without a cluster. The e2e privilege scenario runs the
// same policies in a real API server.
func compilePolicy(t *testing.T, vap *admissionv1.ValidatingAdmissionPolicy) validating.Validator {
	t.Helper()
	compiler, err := plugincel.NewCompositedCompiler(environment.MustBaseEnvSet(environment.DefaultCompatibilityVersion()))
	if err != nil {
		t.Fatal(err)
	}
	withAuthz := plugincel.OptionalVariableDeclarations{HasAuthorizer: true, HasParams: vap.Spec.ParamKind != nil}
	var variables []plugincel.NamedExpressionAccessor
	for _, v := range vap.Spec.Variables {
		variables = append(variables, &validating.Variable{Name: v.Name, Expression: v.Expression})
	}
	compiler.CompileAndStoreVariables(variables, withAuthz, environment.StoredExpressions)
	var conditions []plugincel.ExpressionAccessor
	for i := range vap.Spec.MatchConditions {
		conditions = append(conditions, (*matchconditions.MatchCondition)(&vap.Spec.MatchConditions[i]))
	}
	matcher := matchconditions.NewMatcher(compiler.CompileCondition(conditions, withAuthz, environment.StoredExpressions),
		vap.Spec.FailurePolicy, "policy", "validate", vap.Name)
	var validations, messages []plugincel.ExpressionAccessor
	for _, v := range vap.Spec.Validations {
		validations = append(validations, &validating.ValidationCondition{Expression: v.Expression, Message: v.Message, Reason: v.Reason})
		if v.MessageExpression != "" {
			messages = append(messages, &validating.MessageExpressionCondition{MessageExpression: v.MessageExpression})
		} else {
			messages = append(messages, nil)
		}
	}
	return validating.NewValidator(
		compiler.CompileCondition(validations, withAuthz, environment.StoredExpressions),
		matcher,
		compiler.CompileCondition(nil, withAuthz, environment.StoredExpressions),
		compiler.CompileCondition(messages, plugincel.OptionalVariableDeclarations{HasParams: vap.Spec.ParamKind != nil}, environment.StoredExpressions),
		vap.Spec.FailurePolicy, nil)
}

// request is one API request as admission sees it.
type request struct {
	user        user.Info
	op          admission.Operation
	namespace   string
	subresource string
	object, old runtime.Object
	gvk         schema.GroupVersionKind
	gvr         schema.GroupVersionResource
}

// denied evaluates the policy on req and returns the denial's message, or
// "" when the request is admitted. An evaluation error counts as a denial
// (failurePolicy Fail) and carries its message.
func denied(t *testing.T, v validating.Validator, req request) string {
	t.Helper()
	return deniedWithParams(t, v, req, nil)
}

// deniedWithParams is denied for a policy with a paramKind, evaluated
// against one parameter object as a binding's paramRef would select it.
func deniedWithParams(t *testing.T, v validating.Validator, req request, params runtime.Object) string {
	t.Helper()
	name := ""
	for _, o := range []runtime.Object{req.object, req.old} {
		if m, ok := o.(metav1.Object); ok && o != nil && m.GetName() != "" {
			name = m.GetName()
		}
	}
	attrs := admission.NewAttributesRecord(req.object, req.old, req.gvk, req.namespace, name, req.gvr, req.subresource, req.op, nil, false, req.user)
	versioned := &admission.VersionedAttributes{Attributes: attrs, VersionedKind: req.gvk, VersionedObject: admission.NewLazyObject(req.object), VersionedOldObject: admission.NewLazyObject(req.old)}
	result := v.Validate(context.Background(), req.gvr, versioned, params, nil, celconfig.RuntimeCELCostBudget, nil)
	var msgs []string
	for _, d := range result.Decisions {
		if d.Action == validating.ActionDeny {
			msgs = append(msgs, d.Message)
		}
	}
	return strings.Join(msgs, "; ")
}

func pluginUser(node string) user.Info {
	info := &user.DefaultInfo{Name: "system:serviceaccount:" + namespace + ":" + pluginName}
	if node != "" {
		info.Extra = map[string][]string{"authentication.kubernetes.io/node-name": {node}}
	}
	return info
}

var (
	podGVK   = corev1.SchemeGroupVersion.WithKind("Pod")
	podGVR   = corev1.SchemeGroupVersion.WithResource("pods")
	sliceGVK = resourceapi.SchemeGroupVersion.WithKind("ResourceSlice")
	sliceGVR = resourceapi.SchemeGroupVersion.WithResource("resourceslices")
)

// TestMPSDaemonPodPolicyDecisions evaluates the rendered pod policy on the
// daemon pod the plugin builds (admitted) and on each escalation (denied).
func TestMPSDaemonPodPolicyDecisions(t *testing.T) {
	for _, variant := range []struct {
		name string
		sets []string
		fake bool
		// multiUser: the values of PodSpec.MultiUser the plugin
		// may build with the chart's flags (pkg/plugin: v3 runs
		// multi-user; auto picks v3 or classic by the driver); refused:
		// the pods built with the other value.
		multiUser, refused []bool
	}{
		// kubeletPlugin.mps.multiUser defaults to true: classic daemons
		// run with -M, as MPS v3 ones always do.
		{name: "real GPUs", sets: []string{"driverRoot=/run/nvidia/driver"}, multiUser: []bool{true}, refused: []bool{false}},
		{name: "real GPUs, classic", sets: []string{"driverRoot=/run/nvidia/driver", "kubeletPlugin.mps.mode=classic"},
			multiUser: []bool{true}, refused: []bool{false}},
		{name: "real GPUs, classic, single-user", sets: []string{"driverRoot=/run/nvidia/driver", "kubeletPlugin.mps.mode=classic", "kubeletPlugin.mps.multiUser=false"},
			multiUser: []bool{false}, refused: []bool{true}},
		{name: "real GPUs, auto, single-user classic", sets: []string{"driverRoot=/run/nvidia/driver", "kubeletPlugin.mps.multiUser=false"},
			multiUser: []bool{false, true}},
		{name: "real GPUs, v3", sets: []string{"driverRoot=/run/nvidia/driver", "kubeletPlugin.mps.mode=v3"},
			multiUser: []bool{true}, refused: []bool{false}},
		{name: "real GPUs, v3, single-user classic (v3 runs multi-user anyway)", sets: []string{"driverRoot=/run/nvidia/driver", "kubeletPlugin.mps.mode=v3", "kubeletPlugin.mps.multiUser=false"},
			multiUser: []bool{true}, refused: []bool{false}},
		{name: "real GPUs, classic, single-user and a control binary by extraArgs", sets: []string{"driverRoot=/run/nvidia/driver", "kubeletPlugin.mps.mode=classic",
			"kubeletPlugin.extraArgs={--mps-control-binary=/opt/mps/nvidia-cuda-mps-control,--mps-multi-user=false}"},
			multiUser: []bool{false}, refused: []bool{true}},
		{name: "real GPUs, classic, multi-user by extraArgs over the value", sets: []string{"driverRoot=/run/nvidia/driver", "kubeletPlugin.mps.mode=classic",
			"kubeletPlugin.mps.multiUser=false", "kubeletPlugin.extraArgs={--mps-multi-user}"},
			multiUser: []bool{true}, refused: []bool{false}},
		{name: "fake GPUs", sets: []string{"fakeGPU.profile=dgx-h100"}, fake: true, multiUser: []bool{false, true}},
	} {
		t.Run(variant.name, func(t *testing.T) {
			objs := render(t, variant.sets...)
			_, c := daemonSet(t, objs)
			flags := flagValues(c.Args)
			policy := compilePolicy(t, objs.get(t, "ValidatingAdmissionPolicy", mpsPolicyName).(*admissionv1.ValidatingAdmissionPolicy))
			mpsNS := flags["mps-daemon-namespace"]
			// The pod exactly as the plugin builds it from the chart's flags.
			build := func(node string, multiUser bool) *corev1.Pod {
				cfg := daemon.PodSpec{
					Prefix: flags["mps-daemon-pod-prefix"], Namespace: mpsNS, NodeName: node, NodeUID: "uid-" + node,
					PodImage: daemon.PodImage{Image: flags["mps-daemon-image"], ImagePullPolicy: corev1.PullPolicy(flags["mps-daemon-image-pull-policy"])},
					Command:  daemon.PodCommand, Layout: daemon.Layout{Root: flags["mps-root"]},
					VisibleDevices: []string{"GPU-0"}, Simulate: variant.fake, PriorityClassName: flags["mps-daemon-priority-class"],
					DriverRoot: flags["mps-daemon-driver-root"], MultiUser: multiUser,
					// As pkg/plugin passes --mps-control-binary on.
					ControlBinary: flags["mps-control-binary"],
				}
				pod, err := daemon.BuildPod(cfg)
				if err != nil {
					t.Fatal(err)
				}
				// What the API server's defaulting and the ServiceAccount
				// admission plugin add before validating admission.
				pod.Spec.ServiceAccountName = "default"
				return pod
			}
			daemon := func(node string) *corev1.Pod { return build(node, variant.multiUser[0]) }
			changed := func(change func(*corev1.Pod)) *corev1.Pod {
				pod := daemon("node-a")
				change(pod)
				return pod
			}
			create := func(pod *corev1.Pod) request {
				return request{user: pluginUser("node-a"), op: admission.Create, namespace: pod.Namespace, object: pod, gvk: podGVK, gvr: podGVR}
			}
			for _, tc := range []struct {
				name string
				req  request
				// want is part of the denial message; "" means admitted.
				want string
			}{
				{name: "its own daemon pod", req: create(daemon("node-a"))},
				{name: "deleting its own daemon pod", req: request{user: pluginUser("node-a"), op: admission.Delete, namespace: mpsNS, old: daemon("node-a"), gvk: podGVK, gvr: podGVR}},
				{name: "another user is not this policy's business", req: request{user: &user.DefaultInfo{Name: "alice"}, op: admission.Create, namespace: namespace,
					object: changed(func(p *corev1.Pod) { p.Spec.NodeName = "control-plane" }), gvk: podGVK, gvr: podGVR}},
				{name: "no node in the token", req: request{user: pluginUser(""), op: admission.Create, namespace: mpsNS, object: daemon("node-a"), gvk: podGVK, gvr: podGVR},
					want: "no node name in the service account token"},
				{name: "on another node", req: create(daemon("control-plane")), want: "may only run its MPS daemon pod on its own node, not on 'control-plane'"},
				{name: "in the release namespace", req: create(changed(func(p *corev1.Pod) { p.Namespace = namespace })),
					want: "may only create and delete MPS daemon pods in namespace " + mpsNS},
				{name: "another name", req: create(changed(func(p *corev1.Pod) { p.Name = "miner" })), want: "may only manage pods named"},
				{name: "another image", req: create(changed(func(p *corev1.Pod) { p.Spec.Containers[0].Image = "evil:latest" })),
					want: "runs `/dra-kubelet-plugin mps-daemon` from the plugin's image"},
				{name: "a shell", req: create(changed(func(p *corev1.Pod) { p.Spec.Containers[0].Command = []string{"sh", "-c", "nsenter -t 1 sh"} })),
					want: "runs `/dra-kubelet-plugin mps-daemon`"},
				{name: "extra arguments", req: create(changed(func(p *corev1.Pod) { p.Spec.Containers[0].Args = []string{"--evil"} })),
					want: "runs `/dra-kubelet-plugin mps-daemon`"},
				// The command is pinned exactly: no word may be added.
				{name: "an extra command word", req: create(changed(func(p *corev1.Pod) {
					p.Spec.Containers[0].Command = append(p.Spec.Containers[0].Command, "--mps-control-binary=/tmp/evil")
				})), want: "with exactly the command"},
				{name: "only the first two words", req: create(changed(func(p *corev1.Pod) {
					p.Spec.Containers[0].Command = append(p.Spec.Containers[0].Command[:2:2], "--log-file=/etc/cron.d/x")
				})), want: "with exactly the command"},
				{name: "a second container", req: create(changed(func(p *corev1.Pod) {
					p.Spec.Containers = append(p.Spec.Containers, corev1.Container{Name: "x", Image: "evil"})
				})), want: "exactly one container"},
				{name: "an init container", req: create(changed(func(p *corev1.Pod) {
					p.Spec.InitContainers = []corev1.Container{{Name: "x", Image: "evil"}}
				})), want: "exactly one container"},
				{name: "the controller's service account", req: create(changed(func(p *corev1.Pod) {
					p.Spec.ServiceAccountName = "tangram-controller"
				})), want: "default service account with no token mounted"},
				{name: "a mounted token", req: create(changed(func(p *corev1.Pod) { p.Spec.AutomountServiceAccountToken = nil })),
					want: "default service account with no token mounted"},
				{name: "the webhook key", req: create(changed(func(p *corev1.Pod) {
					p.Spec.Volumes = append(p.Spec.Volumes, corev1.Volume{Name: "key", VolumeSource: corev1.VolumeSource{
						Secret: &corev1.SecretVolumeSource{SecretName: "tangram-controller-webhook-tls"}}})
				})), want: "may mount only the host paths"},
				{name: "the host's root as another volume", req: create(changed(func(p *corev1.Pod) {
					p.Spec.Volumes = append(p.Spec.Volumes, corev1.Volume{Name: "host", VolumeSource: corev1.VolumeSource{
						HostPath: &corev1.HostPathVolumeSource{Path: "/"}}})
				})), want: "may mount only the host paths"},
				{name: "a secret in the environment", req: create(changed(func(p *corev1.Pod) {
					p.Spec.Containers[0].Env = append(p.Spec.Containers[0].Env, corev1.EnvVar{Name: "K", ValueFrom: &corev1.EnvVarSource{
						SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "s"}, Key: "k"}}})
				})), want: "takes nothing from secrets"},
				{name: "the node's network", req: create(changed(func(p *corev1.Pod) { p.Spec.HostNetwork = true })), want: "not its network or IPC namespace"},
				{name: "the node's IPC", req: create(changed(func(p *corev1.Pod) { p.Spec.HostIPC = true })), want: "not its network or IPC namespace"},
				// The daemon registers its clients only in the host's PID
				// namespace: a daemon pod without it is refused.
				{name: "its own PID namespace", req: create(changed(func(p *corev1.Pod) { p.Spec.HostPID = false })), want: "shares the node's PID namespace"},
				{name: "another priority class", req: create(changed(func(p *corev1.Pod) { p.Spec.PriorityClassName = "system-cluster-critical" })),
					want: "only the chart's image pull secrets and priority class"},
				{name: "owned by something else", req: create(changed(func(p *corev1.Pod) {
					p.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: "control-plane", UID: "x"}}
				})), want: "owned only by its own Node"},
				{name: "an update", req: request{user: pluginUser("node-a"), op: admission.Update, namespace: mpsNS, object: daemon("node-a"), old: daemon("node-a"), gvk: podGVK, gvr: podGVR},
					want: "may only create and delete MPS daemon pods"},
				{name: "exec", req: request{user: pluginUser("node-a"), op: admission.Connect, namespace: mpsNS, subresource: "exec",
					object: &corev1.PodExecOptions{Command: []string{"sh"}}, gvk: corev1.SchemeGroupVersion.WithKind("PodExecOptions"), gvr: podGVR},
					want: "may only create and delete MPS daemon pods"},
				{name: "deleting another node's daemon pod", req: request{user: pluginUser("node-a"), op: admission.Delete, namespace: mpsNS, old: daemon("node-b"), gvk: podGVK, gvr: podGVR},
					want: "on its own node, not on 'node-b'"},
			} {
				t.Run(tc.name, func(t *testing.T) {
					got := denied(t, policy, tc.req)
					switch {
					case tc.want == "" && got != "":
						t.Errorf("denied: %s", got)
					case tc.want != "" && !strings.Contains(got, tc.want):
						t.Errorf("denial %q, want one containing %q", got, tc.want)
					}
				})
			}
			// Every command the plugin builds with the chart's flags is
			// admitted; a multi-user flag where the mode never gives one
			// is refused.
			for _, multiUser := range variant.multiUser {
				if got := denied(t, policy, create(build("node-a", multiUser))); got != "" {
					t.Errorf("the daemon pod built with MultiUser=%v: denied: %s", multiUser, got)
				}
			}
			for _, multiUser := range variant.refused {
				if got := denied(t, policy, create(build("node-a", multiUser))); !strings.Contains(got, "with exactly the command") {
					t.Errorf("the daemon pod built with MultiUser=%v: denial %q, want the command refused", multiUser, got)
				}
			}
			if !variant.fake {
				// The driver root may only be the read-only volume driver-root.
				writable := changed(func(p *corev1.Pod) {
					for i := range p.Spec.Containers[0].VolumeMounts {
						p.Spec.Containers[0].VolumeMounts[i].ReadOnly = false
					}
				})
				if got := denied(t, policy, create(writable)); !strings.Contains(got, "mounts the driver root read-only") {
					t.Errorf("a writable driver root: denial %q", got)
				}
			}
		})
	}
}

// TestMPSDaemonPodPolicyEvictions: with kubeletPlugin.usage.overShare=evict
// the plugin may evict pods (the pods of a share over its memory, in any
// namespace); otherwise an eviction is refused like any other pod write
// outside the MPS namespace. Its daemon pod rules stay as they are.
func TestMPSDaemonPodPolicyEvictions(t *testing.T) {
	eviction := request{user: pluginUser("node-a"), op: admission.Create, namespace: "team", subresource: "eviction",
		object: &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Name: "trainer", Namespace: "team"}},
		gvk:    policyv1.SchemeGroupVersion.WithKind("Eviction"), gvr: podGVR}
	deletion := request{user: pluginUser("node-a"), op: admission.Delete, namespace: "team",
		old: &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "trainer", Namespace: "team"}, Spec: corev1.PodSpec{NodeName: "node-a"}}, gvk: podGVK, gvr: podGVR}
	for _, tc := range []struct {
		name       string
		sets       []string
		wantEvicts bool
	}{
		{name: "report (default)"},
		{name: "evict", sets: []string{"kubeletPlugin.usage.overShare=evict"}, wantEvicts: true},
		{name: "unaccounted evict", sets: []string{"kubeletPlugin.usage.unaccounted=evict"}, wantEvicts: true},
		{name: "evict with usage off", sets: []string{"kubeletPlugin.usage.overShare=evict", "kubeletPlugin.usage.enabled=false"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			objs := render(t, tc.sets...)
			policy := compilePolicy(t, objs.get(t, "ValidatingAdmissionPolicy", mpsPolicyName).(*admissionv1.ValidatingAdmissionPolicy))
			got := denied(t, policy, eviction)
			if tc.wantEvicts != (got == "") {
				t.Errorf("an eviction of team/trainer: denial %q, want admitted %t", got, tc.wantEvicts)
			}
			if got := denied(t, policy, deletion); !strings.Contains(got, "may only create and delete MPS daemon pods") {
				t.Errorf("deleting team/trainer: denial %q, want it refused", got)
			}
		})
	}
}

// TestSlicePolicyDecisions evaluates the rendered ResourceSlice policy.
func TestSlicePolicyDecisions(t *testing.T) {
	objs := render(t)
	policy := compilePolicy(t, objs.get(t, "ValidatingAdmissionPolicy", pluginName+"-own-node-slices").(*admissionv1.ValidatingAdmissionPolicy))
	slice := func(node, driver, pool string) *resourceapi.ResourceSlice {
		return &resourceapi.ResourceSlice{
			ObjectMeta: metav1.ObjectMeta{Name: "s-" + node},
			Spec:       resourceapi.ResourceSliceSpec{Driver: driver, Pool: resourceapi.ResourcePool{Name: pool, ResourceSliceCount: 1}, NodeName: ptr.To(node)},
		}
	}
	own := slice("node-a", "gpu.tangram.dev", "node-a")
	req := func(op admission.Operation, obj, old *resourceapi.ResourceSlice) request {
		r := request{user: pluginUser("node-a"), op: op, gvk: sliceGVK, gvr: sliceGVR}
		if obj != nil {
			r.object = obj
		}
		if old != nil {
			r.old = old
		}
		return r
	}
	for _, tc := range []struct {
		name string
		req  request
		want string
	}{
		{name: "its own slice", req: req(admission.Create, own, nil)},
		{name: "updating its own slice", req: req(admission.Update, own, own)},
		{name: "deleting its own slice", req: req(admission.Delete, nil, own)},
		{name: "another node's", req: req(admission.Create, slice("node-b", "gpu.tangram.dev", "node-b"), nil), want: "may only write ResourceSlices of its own node"},
		{name: "another driver's", req: req(admission.Create, slice("node-a", "gpu.nvidia.com", "node-a"), nil), want: "may only write ResourceSlices of driver gpu.tangram.dev"},
		{name: "another pool", req: req(admission.Create, slice("node-a", "gpu.tangram.dev", "cluster-pool"), nil), want: "of the pool named after its node"},
		{name: "taking over another node's slice", req: req(admission.Update, own, slice("node-b", "gpu.tangram.dev", "node-b")), want: "may not take over the ResourceSlice of node 'node-b'"},
		{name: "deleting another node's", req: req(admission.Delete, nil, slice("node-b", "gpu.tangram.dev", "node-b")), want: "of its own node"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := denied(t, policy, tc.req)
			switch {
			case tc.want == "" && got != "":
				t.Errorf("denied: %s", got)
			case tc.want != "" && !strings.Contains(got, tc.want):
				t.Errorf("denial %q, want one containing %q", got, tc.want)
			}
		})
	}
}

// TestControllerSecretPolicyDecisions: the controller may create only its
// webhook certificate Secret, which RBAC cannot say.
func TestControllerSecretPolicyDecisions(t *testing.T) {
	const name = "tangram-controller-webhook-secret-only"
	objs := render(t, "controller.enabled=true", "controller.webhook.enabled=true")
	policy := compilePolicy(t, objs.get(t, "ValidatingAdmissionPolicy", name).(*admissionv1.ValidatingAdmissionPolicy))
	controller := &user.DefaultInfo{Name: "system:serviceaccount:" + namespace + ":tangram-controller"}
	secret := func(ns, name string) request {
		return request{user: controller, op: admission.Create, namespace: ns, gvk: corev1.SchemeGroupVersion.WithKind("Secret"),
			gvr: corev1.SchemeGroupVersion.WithResource("secrets"), object: &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}}
	}
	for _, tc := range []struct {
		name string
		req  request
		want string
	}{
		{name: "its certificate Secret", req: secret(namespace, "tangram-controller-webhook-tls")},
		{name: "another Secret", req: secret(namespace, "registry-credentials"), want: "may create only its webhook certificate Secret"},
		{name: "in another namespace", req: secret("kube-system", "tangram-controller-webhook-tls"), want: "may create only its webhook certificate Secret"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := denied(t, policy, tc.req)
			switch {
			case tc.want == "" && got != "":
				t.Errorf("denied: %s", got)
			case tc.want != "" && !strings.Contains(got, tc.want):
				t.Errorf("denial %q, want one containing %q", got, tc.want)
			}
		})
	}
	for _, sets := range [][]string{{"controller.enabled=true"}, {"controller.enabled=true", "controller.webhook.enabled=true", "controller.webhook.certManager.enabled=true"}} {
		if render(t, sets...).has("ValidatingAdmissionPolicy", name) {
			t.Errorf("%v: the Secret policy is rendered although the controller creates no Secret", sets)
		}
	}
}

// TestSharedGPUNonRootPolicyDecisions: a pod that uses a template or claim
// asking for a share of a strict class (hard-shared-gpu.tangram.dev, and
// shared-gpu.tangram.dev with sharing.requireHardEnforcement) must be locked
// down: runAsNonRoot, allowPrivilegeEscalation false, no added
// capabilities, not privileged, on every container; the denial names the
// container and the field. A root pod of the default class passes.
func TestSharedGPUNonRootPolicyDecisions(t *testing.T) {
	const strict, shared = "hard-shared-gpu.tangram.dev", "shared-gpu.tangram.dev"
	memory := map[resourceapi.QualifiedName]resource.Quantity{"memory": resource.MustParse("20Gi")}
	share := func(class string) resourceapi.DeviceClaim {
		return resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{{Name: "gpu", Exactly: &resourceapi.ExactDeviceRequest{
			DeviceClassName: class, Capacity: &resourceapi.CapacityRequirements{Requests: memory}}}}}
	}
	strictSubrequest := resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{{Name: "gpu", FirstAvailable: []resourceapi.DeviceSubRequest{
		{Name: "whole", DeviceClassName: "gpu.tangram.dev"},
		{Name: "share", DeviceClassName: strict, Capacity: &resourceapi.CapacityRequirements{Requests: memory}}}}}}
	whole := resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{{Name: "gpu", Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: "gpu.tangram.dev"}}}}
	template := func(name string, devices resourceapi.DeviceClaim) *resourceapi.ResourceClaimTemplate {
		return &resourceapi.ResourceClaimTemplate{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "team"},
			Spec: resourceapi.ResourceClaimTemplateSpec{Spec: resourceapi.ResourceClaimSpec{Devices: devices}}}
	}
	claim := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: "mine", Namespace: "team"}, Spec: resourceapi.ResourceClaimSpec{Devices: share(strict)}}
	locked := func() *corev1.SecurityContext {
		return &corev1.SecurityContext{AllowPrivilegeEscalation: ptr.To(false), Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}}
	}
	fromTemplate := corev1.PodResourceClaim{Name: "gpu", ResourceClaimTemplateName: ptr.To("share")}
	fromClaim := corev1.PodResourceClaim{Name: "gpu", ResourceClaimName: ptr.To("mine")}
	// pod is locked down, then changed by mutate.
	pod := func(claim corev1.PodResourceClaim, mutate func(*corev1.Pod)) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "team"}, Spec: corev1.PodSpec{
			SecurityContext: &corev1.PodSecurityContext{RunAsNonRoot: ptr.To(true), RunAsUser: ptr.To[int64](1000)},
			ResourceClaims:  []corev1.PodResourceClaim{claim},
			Containers:      []corev1.Container{{Name: "app", Image: "x", SecurityContext: locked()}, {Name: "sidecar", Image: "y", SecurityContext: locked()}}}}
		if mutate != nil {
			mutate(p)
		}
		return p
	}
	root := func(p *corev1.Pod) {
		p.Spec.SecurityContext = nil
		for i := range p.Spec.Containers {
			p.Spec.Containers[i].SecurityContext = nil
		}
	}
	create := func(p *corev1.Pod) request {
		return request{user: &user.DefaultInfo{Name: "alice"}, op: admission.Create, namespace: "team", object: p, gvk: podGVK, gvr: podGVR}
	}
	debug := func(p *corev1.Pod) request {
		withDebug := p.DeepCopy()
		withDebug.Spec.EphemeralContainers = []corev1.EphemeralContainer{{EphemeralContainerCommon: corev1.EphemeralContainerCommon{Name: "debug", Image: "busybox"}}}
		return request{user: &user.DefaultInfo{Name: "alice"}, op: admission.Update, namespace: "team", subresource: "ephemeralcontainers",
			object: withDebug, old: p, gvk: podGVK, gvr: podGVR}
	}
	const tail = ": the isolation of a strict share relies on its MPS clients being unprivileged"

	for _, requireHard := range []bool{false, true} {
		objs := render(t, fmt.Sprintf("sharing.requireHardEnforcement=%t", requireHard))
		byTemplate := compilePolicy(t, objs.get(t, "ValidatingAdmissionPolicy", "tangram-shared-gpu-non-root-resourceclaimtemplate").(*admissionv1.ValidatingAdmissionPolicy))
		byClaim := compilePolicy(t, objs.get(t, "ValidatingAdmissionPolicy", "tangram-shared-gpu-non-root-resourceclaim").(*admissionv1.ValidatingAdmissionPolicy))
		binding := objs.get(t, "ValidatingAdmissionPolicyBinding", "tangram-shared-gpu-non-root-resourceclaimtemplate").(*admissionv1.ValidatingAdmissionPolicyBinding)
		if binding.Spec.ParamRef == nil || binding.Spec.ParamRef.Selector == nil || binding.Spec.ParamRef.ParameterNotFoundAction == nil ||
			*binding.Spec.ParamRef.ParameterNotFoundAction != admissionv1.AllowAction {
			t.Errorf("the binding must select every template of the pod's namespace and allow when there is none: %+v", binding.Spec.ParamRef)
		}
		defaultRoot := ""
		if requireHard {
			defaultRoot = `pod team/p container "app", container "sidecar": securityContext.runAsNonRoot must be true (on the container or the pod) for a share of class shared-gpu.tangram.dev (ResourceClaimTemplate share)`
		}
		for _, tc := range []struct {
			name   string
			policy validating.Validator
			req    request
			params runtime.Object
			want   []string
		}{
			{name: "locked-down pod, strict template", policy: byTemplate, req: create(pod(fromTemplate, nil)), params: template("share", share(strict))},
			{name: "root pod, strict template", policy: byTemplate, req: create(pod(fromTemplate, root)), params: template("share", share(strict)), want: []string{
				`pod team/p container "app", container "sidecar": securityContext.runAsNonRoot must be true (on the container or the pod) for a share of class hard-shared-gpu.tangram.dev (ResourceClaimTemplate share)` + tail + "; the default class shared-gpu.tangram.dev takes root pods",
				`pod team/p container "app", container "sidecar": securityContext.allowPrivilegeEscalation must be false for a share of class hard-shared-gpu.tangram.dev`}},
			{name: "runAsNonRoot on every container", policy: byTemplate, req: create(pod(fromTemplate, func(p *corev1.Pod) {
				p.Spec.SecurityContext = nil
				for i := range p.Spec.Containers {
					p.Spec.Containers[i].SecurityContext.RunAsNonRoot = ptr.To(true)
				}
			})), params: template("share", share(strict))},
			{name: "a container overrides the pod back to root", policy: byTemplate, req: create(pod(fromTemplate, func(p *corev1.Pod) {
				p.Spec.Containers[1].SecurityContext.RunAsNonRoot = ptr.To(false)
			})), params: template("share", share(strict)), want: []string{`pod team/p container "sidecar": securityContext.runAsNonRoot must be true`}},
			{name: "escalation allowed", policy: byTemplate, req: create(pod(fromTemplate, func(p *corev1.Pod) {
				p.Spec.Containers[0].SecurityContext.AllowPrivilegeEscalation = ptr.To(true)
			})), params: template("share", share(strict)), want: []string{`pod team/p container "app": securityContext.allowPrivilegeEscalation must be false for a share of class hard-shared-gpu.tangram.dev`}},
			{name: "escalation not set", policy: byTemplate, req: create(pod(fromTemplate, func(p *corev1.Pod) {
				p.Spec.Containers[1].SecurityContext.AllowPrivilegeEscalation = nil
			})), params: template("share", share(strict)), want: []string{`pod team/p container "sidecar": securityContext.allowPrivilegeEscalation must be false`}},
			{name: "capabilities added", policy: byTemplate, req: create(pod(fromTemplate, func(p *corev1.Pod) {
				p.Spec.Containers[0].SecurityContext.Capabilities.Add = []corev1.Capability{"SYS_ADMIN"}
			})), params: template("share", share(strict)), want: []string{`pod team/p container "app": securityContext.capabilities.add must be empty for a share of class hard-shared-gpu.tangram.dev`}},
			{name: "privileged", policy: byTemplate, req: create(pod(fromTemplate, func(p *corev1.Pod) {
				p.Spec.Containers[0].SecurityContext.Privileged = ptr.To(true)
			})), params: template("share", share(strict)), want: []string{`pod team/p container "app": securityContext.privileged must be false`}},
			{name: "root init container", policy: byTemplate, req: create(pod(fromTemplate, func(p *corev1.Pod) {
				p.Spec.InitContainers = []corev1.Container{{Name: "setup", Image: "z", SecurityContext: &corev1.SecurityContext{RunAsNonRoot: ptr.To(false), AllowPrivilegeEscalation: ptr.To(false)}}}
			})), params: template("share", share(strict)), want: []string{`pod team/p init container "setup": securityContext.runAsNonRoot must be true`}},
			{name: "root ephemeral container added", policy: byTemplate, req: debug(pod(fromTemplate, nil)), params: template("share", share(strict)),
				want: []string{`pod team/p ephemeral container "debug": securityContext.allowPrivilegeEscalation must be false`}},
			{name: "firstAvailable subrequest of the strict class", policy: byTemplate, req: create(pod(fromTemplate, root)), params: template("share", strictSubrequest),
				want: []string{`securityContext.runAsNonRoot must be true (on the container or the pod) for a share of class hard-shared-gpu.tangram.dev`}},
			{name: "root pod, default class", policy: byTemplate, req: create(pod(fromTemplate, root)), params: template("share", share(shared)), want: []string{defaultRoot}},
			{name: "root pod, whole-card template", policy: byTemplate, req: create(pod(fromTemplate, root)), params: template("share", whole)},
			{name: "another template of the namespace", policy: byTemplate, req: create(pod(fromTemplate, root)), params: template("other", share(strict))},
			{name: "root pod, strict claim", policy: byClaim, req: create(pod(fromClaim, root)), params: claim,
				want: []string{`for a share of class hard-shared-gpu.tangram.dev (ResourceClaim mine)`}},
			{name: "locked-down pod, strict claim", policy: byClaim, req: create(pod(fromClaim, nil)), params: claim},
			{name: "root ephemeral container on the claim generated from a template", policy: byClaim, req: debug(pod(fromTemplate, func(p *corev1.Pod) {
				p.Status.ResourceClaimStatuses = []corev1.PodResourceClaimStatus{{Name: "gpu", ResourceClaimName: ptr.To("mine")}}
			})), params: claim, want: []string{`pod team/p ephemeral container "debug": securityContext.allowPrivilegeEscalation must be false for a share of class hard-shared-gpu.tangram.dev (ResourceClaim mine)`}},
			{name: "pod without claims", policy: byTemplate, req: create(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "team"},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "x"}}}}), params: template("share", share(strict))},
		} {
			t.Run(fmt.Sprintf("requireHardEnforcement=%t/%s", requireHard, tc.name), func(t *testing.T) {
				got := deniedWithParams(t, tc.policy, tc.req, tc.params)
				want := slices.DeleteFunc(slices.Clone(tc.want), func(s string) bool { return s == "" })
				if len(want) == 0 && got != "" {
					t.Errorf("denied: %s", got)
				}
				for _, w := range want {
					if !strings.Contains(got, w) {
						t.Errorf("denial %q, want one containing %q", got, w)
					}
				}
			})
		}
	}
	off := render(t, "admissionPolicy.sharedGPURunAsNonRoot.enabled=false")
	if off.has("ValidatingAdmissionPolicy", "tangram-shared-gpu-non-root-resourceclaimtemplate") || off.has("ValidatingAdmissionPolicyBinding", "tangram-shared-gpu-non-root-resourceclaim") {
		t.Error("admissionPolicy.sharedGPURunAsNonRoot.enabled=false must drop the policies and bindings")
	}
}

// TestControllerWebhookConfigPolicyDecisions: the controller may change only
// the caBundle of its own ValidatingWebhookConfiguration (RBAC grants update
// of the whole object); its rules, target, failure policy and selectors stay
// as the chart wrote them, so a compromised controller cannot intercept or
// block writes cluster-wide.
func TestControllerWebhookConfigPolicyDecisions(t *testing.T) {
	const name = "tangram-controller-webhook-cabundle-only"
	objs := render(t, "controller.enabled=true", "controller.webhook.enabled=true")
	policy := compilePolicy(t, objs.get(t, "ValidatingAdmissionPolicy", name).(*admissionv1.ValidatingAdmissionPolicy))
	binding := objs.get(t, "ValidatingAdmissionPolicyBinding", name).(*admissionv1.ValidatingAdmissionPolicyBinding)
	if binding.Spec.PolicyName != name || len(binding.Spec.ValidationActions) != 1 || binding.Spec.ValidationActions[0] != admissionv1.Deny {
		t.Errorf("binding %+v, want Deny for %s", binding.Spec, name)
	}
	rendered := objs.get(t, "ValidatingWebhookConfiguration", "tangram-controller-gpuconfig").(*admissionv1.ValidatingWebhookConfiguration)
	controller := &user.DefaultInfo{Name: "system:serviceaccount:" + namespace + ":tangram-controller"}
	gvk := admissionv1.SchemeGroupVersion.WithKind("ValidatingWebhookConfiguration")
	gvr := admissionv1.SchemeGroupVersion.WithResource("validatingwebhookconfigurations")
	// update is the controller's update from the rendered configuration
	// (with an older caBundle) to one changed by change.
	update := func(who user.Info, change func(*admissionv1.ValidatingWebhookConfiguration)) request {
		old := rendered.DeepCopy()
		old.Webhooks[0].ClientConfig.CABundle = []byte("old CA")
		obj := old.DeepCopy()
		obj.Webhooks[0].ClientConfig.CABundle = []byte("new CA")
		change(obj)
		return request{user: who, op: admission.Update, object: obj, old: old, gvk: gvk, gvr: gvr}
	}
	for _, tc := range []struct {
		name string
		req  request
		want string
	}{
		{name: "the caBundle", req: update(controller, func(*admissionv1.ValidatingWebhookConfiguration) {})},
		{name: "an admin may change anything", req: update(&user.DefaultInfo{Name: "admin"}, func(c *admissionv1.ValidatingWebhookConfiguration) {
			c.Webhooks[0].FailurePolicy = ptr.To(admissionv1.Ignore)
		})},
		{name: "rules", req: update(controller, func(c *admissionv1.ValidatingWebhookConfiguration) {
			c.Webhooks[0].Rules[0].Resources = []string{"*"}
		}), want: "may change only the caBundle"},
		{name: "the target service", req: update(controller, func(c *admissionv1.ValidatingWebhookConfiguration) {
			c.Webhooks[0].ClientConfig.Service.Namespace = "evil"
		}), want: "may change only the caBundle"},
		{name: "a URL", req: update(controller, func(c *admissionv1.ValidatingWebhookConfiguration) {
			c.Webhooks[0].ClientConfig.Service = nil
			c.Webhooks[0].ClientConfig.URL = ptr.To("https://evil.example/validate")
		}), want: "may change only the caBundle"},
		{name: "the failure policy", req: update(controller, func(c *admissionv1.ValidatingWebhookConfiguration) {
			c.Webhooks[0].FailurePolicy = ptr.To(admissionv1.Ignore)
		}), want: "may change only the caBundle"},
		{name: "a namespace selector", req: update(controller, func(c *admissionv1.ValidatingWebhookConfiguration) {
			c.Webhooks[0].NamespaceSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"x": "y"}}
		}), want: "may change only the caBundle"},
		{name: "an object selector", req: update(controller, func(c *admissionv1.ValidatingWebhookConfiguration) {
			c.Webhooks[0].ObjectSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"x": "y"}}
		}), want: "may change only the caBundle"},
		{name: "side effects", req: update(controller, func(c *admissionv1.ValidatingWebhookConfiguration) {
			c.Webhooks[0].SideEffects = ptr.To(admissionv1.SideEffectClassNoneOnDryRun)
		}), want: "may change only the caBundle"},
		{name: "match policy", req: update(controller, func(c *admissionv1.ValidatingWebhookConfiguration) {
			c.Webhooks[0].MatchPolicy = ptr.To(admissionv1.Exact)
		}), want: "may change only the caBundle"},
		{name: "match conditions", req: update(controller, func(c *admissionv1.ValidatingWebhookConfiguration) {
			c.Webhooks[0].MatchConditions = nil
		}), want: "may change only the caBundle"},
		{name: "the timeout", req: update(controller, func(c *admissionv1.ValidatingWebhookConfiguration) {
			c.Webhooks[0].TimeoutSeconds = ptr.To[int32](30)
		}), want: "may change only the caBundle"},
		{name: "a webhook added", req: update(controller, func(c *admissionv1.ValidatingWebhookConfiguration) {
			extra := c.Webhooks[0].DeepCopy()
			extra.Name = "pods.evil.dev"
			extra.Rules[0].Resources = []string{"pods"}
			c.Webhooks = append(c.Webhooks, *extra)
		}), want: "may change only the caBundle"},
		{name: "the webhook removed", req: update(controller, func(c *admissionv1.ValidatingWebhookConfiguration) {
			c.Webhooks = nil
		}), want: "may change only the caBundle"},
		{name: "the webhook renamed", req: update(controller, func(c *admissionv1.ValidatingWebhookConfiguration) {
			c.Webhooks[0].Name = "other.tangram.dev"
		}), want: "may change only the caBundle"},
		{name: "labels", req: update(controller, func(c *admissionv1.ValidatingWebhookConfiguration) {
			c.Labels = map[string]string{"x": "y"}
		}), want: "may change only the caBundle"},
		{name: "annotations", req: update(controller, func(c *admissionv1.ValidatingWebhookConfiguration) {
			c.Annotations = map[string]string{"cert-manager.io/inject-ca-from": "kube-system/x"}
		}), want: "may change only the caBundle"},
		{name: "another configuration", req: func() request {
			r := update(controller, func(*admissionv1.ValidatingWebhookConfiguration) {})
			o, old := r.object.(*admissionv1.ValidatingWebhookConfiguration), r.old.(*admissionv1.ValidatingWebhookConfiguration)
			o.Name, old.Name = "other", "other"
			return r
		}(), want: "may change only the caBundle of ValidatingWebhookConfiguration tangram-controller-gpuconfig"},
		{name: "creating one", req: request{user: controller, op: admission.Create, object: rendered.DeepCopy(), gvk: gvk, gvr: gvr},
			want: "may change only the caBundle"},
		{name: "deleting it", req: request{user: controller, op: admission.Delete, old: rendered.DeepCopy(), gvk: gvk, gvr: gvr},
			want: "may change only the caBundle"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := denied(t, policy, tc.req)
			switch {
			case tc.want == "" && got != "":
				t.Errorf("denied: %s", got)
			case tc.want != "" && !strings.Contains(got, tc.want):
				t.Errorf("denial %q, want one containing %q", got, tc.want)
			}
		})
	}
	// With cert-manager the CA injector writes the caBundle: the controller
	// gets no write on webhook configurations at all, so no policy either.
	cm := render(t, "controller.enabled=true", "controller.webhook.enabled=true", "controller.webhook.certManager.enabled=true")
	if cm.has("ValidatingAdmissionPolicy", name) {
		t.Error("the caBundle policy is rendered although cert-manager writes the caBundle")
	}
	for _, obj := range cm["ClusterRole"] {
		for _, rule := range obj.(*rbacv1.ClusterRole).Rules {
			if slices.Contains(rule.Resources, "validatingwebhookconfigurations") && obj.(*rbacv1.ClusterRole).Name == "tangram-controller-gpugangs" {
				t.Errorf("with cert-manager the controller may still %v webhook configurations", rule.Verbs)
			}
		}
	}
}

// TestClaimRequestPolicyDecisions: the whole-card class yields whole cards
// only, and memory 0 is for admin access only, refused when the claim or
// template is created (not at prepare, where the pod would wait in
// ContainerCreating for ever). The 1.37 allocator cannot tell a class
// selector what a request asks for, so the policy is what holds this: every
// claim it admits on gpu.tangram.dev is allocated by the real allocator
// (pkg/dra) a whole card on a node whose shares are only advisory.
func TestClaimRequestPolicyDecisions(t *testing.T) {
	objs := render(t)
	policy := compilePolicy(t, objs.get(t, "ValidatingAdmissionPolicy", "tangram-claim-requests").(*admissionv1.ValidatingAdmissionPolicy))
	binding := objs.get(t, "ValidatingAdmissionPolicyBinding", "tangram-claim-requests").(*admissionv1.ValidatingAdmissionPolicyBinding)
	if binding.Spec.PolicyName != "tangram-claim-requests" || len(binding.Spec.ValidationActions) != 1 || binding.Spec.ValidationActions[0] != admissionv1.Deny {
		t.Errorf("binding %+v, want Deny", binding.Spec)
	}
	capacity := func(kv ...string) *resourceapi.CapacityRequirements {
		c := &resourceapi.CapacityRequirements{Requests: map[resourceapi.QualifiedName]resource.Quantity{}}
		for i := 0; i < len(kv); i += 2 {
			c.Requests[resourceapi.QualifiedName(kv[i])] = resource.MustParse(kv[i+1])
		}
		return c
	}
	exact := func(class string, admin bool, c *resourceapi.CapacityRequirements) resourceapi.DeviceRequest {
		r := resourceapi.DeviceRequest{Name: "gpu", Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: class, Capacity: c,
			AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: 1}}
		if admin {
			r.Exactly.AdminAccess = ptr.To(true)
		}
		return r
	}
	firstAvailable := func(class string, c *resourceapi.CapacityRequirements) resourceapi.DeviceRequest {
		return resourceapi.DeviceRequest{Name: "gpu", FirstAvailable: []resourceapi.DeviceSubRequest{
			{Name: "share", DeviceClassName: class, Capacity: c, AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: 1}}}
	}
	const whole, shared = "gpu.tangram.dev", "shared-gpu.tangram.dev"
	const wantWhole = "asks class gpu.tangram.dev, which gives whole cards, for a capacity"
	const wantZero = "asks for memory 0 without adminAccess"
	claimGVK, claimGVR := resourceapi.SchemeGroupVersion.WithKind("ResourceClaim"), resourceapi.SchemeGroupVersion.WithResource("resourceclaims")
	templateGVK, templateGVR := resourceapi.SchemeGroupVersion.WithKind("ResourceClaimTemplate"), resourceapi.SchemeGroupVersion.WithResource("resourceclaimtemplates")
	claimOf := func(name string, r resourceapi.DeviceRequest) *resourceapi.ResourceClaim {
		return &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "team", UID: types.UID(name)},
			Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{r}}}}
	}
	alice := &user.DefaultInfo{Name: "alice"}
	cases := []struct {
		name string
		req  resourceapi.DeviceRequest
		want string
	}{
		{name: "a whole card", req: exact(whole, false, nil)},
		{name: "a share of the shared class", req: exact(shared, false, capacity("memory", "20Gi"))},
		{name: "memory on the whole-card class", req: exact(whole, false, capacity("memory", "20Gi")), want: wantWhole},
		{name: "compute on the whole-card class", req: exact(whole, false, capacity("compute", "50")), want: wantWhole},
		{name: "memory on the whole-card class as an alternative", req: firstAvailable(whole, capacity("memory", "20Gi")), want: wantWhole},
		{name: "monitoring: admin access with memory 0", req: exact(whole, true, capacity("memory", "0"))},
		{name: "admin access with memory on the whole-card class", req: exact(whole, true, capacity("memory", "20Gi")), want: wantWhole},
		{name: "memory 0 on the shared class", req: exact(shared, false, capacity("memory", "0")), want: wantZero},
		{name: "memory 0Gi on the shared class", req: exact(shared, false, capacity("memory", "0Gi")), want: wantZero},
		{name: "memory 0 on the whole-card class", req: exact(whole, false, capacity("memory", "0")), want: wantZero},
		{name: "memory 0 as an alternative", req: firstAvailable(shared, capacity("memory", "0")), want: wantZero},
		{name: "admin access with memory 0 on the shared class", req: exact(shared, true, capacity("memory", "0"))},
		{name: "memory 0 on another driver's class", req: exact("gpu.nvidia.com", false, capacity("memory", "0"))},
	}
	// A node whose shares are only advisory: the shared class with
	// sharing.requireHardEnforcement has no card there.
	p, err := fakegpu.BuiltinProfile("dgx-h100")
	if err != nil {
		t.Fatal(err)
	}
	gpus, err := fakegpu.NewFakeSource("node-a", p).GPUs(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	res, err := tangramslices.DriverResources(gpus, tangramslices.Options{NodeName: "node-a", Sharing: true, ShareEnforcement: "advisory"})
	if err != nil {
		t.Fatal(err)
	}
	published := tangramslices.ResourceSlices("node-a", res)
	cardMemory := map[string]resource.Quantity{}
	for _, s := range published {
		for _, d := range s.Spec.Devices {
			cardMemory[d.Name] = *d.Capacity["memory"].RequestPolicy.Default
		}
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			claim := claimOf("c", tc.req)
			template := &resourceapi.ResourceClaimTemplate{ObjectMeta: metav1.ObjectMeta{Name: "t", Namespace: "team"},
				Spec: resourceapi.ResourceClaimTemplateSpec{Spec: claim.Spec}}
			for _, req := range []request{
				{user: alice, op: admission.Create, namespace: "team", object: claim, gvk: claimGVK, gvr: claimGVR},
				{user: alice, op: admission.Create, namespace: "team", object: template, gvk: templateGVK, gvr: templateGVR},
			} {
				got := denied(t, policy, req)
				switch {
				case tc.want == "" && got != "":
					t.Errorf("%s denied: %s", req.gvk.Kind, got)
				case tc.want != "" && !strings.Contains(got, tc.want):
					t.Errorf("%s: denial %q, want one containing %q", req.gvk.Kind, got, tc.want)
				}
				if tc.want == "" && got != "" || tc.want != "" && got == "" {
					return
				}
			}
			if tc.want != "" || tc.req.Exactly == nil || tc.req.Exactly.DeviceClassName != whole || ptr.Deref(tc.req.Exactly.AdminAccess, false) {
				return
			}
			// Admitted on the whole-card class: the allocator must give a
			// whole card.
			node := &dra.Node{Name: "node-a", Slices: published, Classes: device.StrictDeviceClasses()}
			allocated, err := node.Allocate(context.Background(), claim)
			if err != nil {
				t.Fatalf("allocating an admitted whole-card claim: %v", err)
			}
			for _, r := range allocated.Status.Allocation.Devices.Results {
				if got, want := r.ConsumedCapacity["memory"], cardMemory[r.Device]; got.Cmp(want) != 0 {
					t.Errorf("class %s gave %s of %s's %s: a share, not a whole card", whole, got.String(), r.Device, want.String())
				}
			}
		})
	}
	// What the policy refuses on the whole-card class is a partial card to
	// the allocator, past the shared class's hard-enforcement requirement.
	node := &dra.Node{Name: "node-a", Slices: published, Classes: device.StrictDeviceClasses()}
	if _, err := node.Allocate(context.Background(), claimOf("s", exact(shared, false, capacity("memory", "20Gi")))); err == nil {
		t.Error("a share of the strict shared class was allocated on an advisory node although the class requires hard enforcement")
	}
	allocated, err := node.Allocate(context.Background(), claimOf("w", exact(whole, false, capacity("memory", "20Gi"))))
	if err != nil {
		t.Fatalf("the allocator alone: %v", err)
	}
	if r := allocated.Status.Allocation.Devices.Results[0]; ptr.To(r.ConsumedCapacity["memory"]).Cmp(cardMemory[r.Device]) >= 0 {
		t.Errorf("the allocator gave a whole card for a memory request on %s: the policy may no longer be needed (docs/enforcement.md)", whole)
	}
	if render(t, "admissionPolicy.enabled=false", "admissionPolicy.acknowledgeUnprotected=true", "kubeletPlugin.mps.daemon=process").has("ValidatingAdmissionPolicy", "tangram-claim-requests") {
		t.Error("admissionPolicy.enabled=false must drop the claim-request policy")
	}

	// A claim's config may not name a sharing backend (the admin's, per
	// node and class); MPS tuning and other drivers' configs pass.
	const wantBackend = "names sharing.backend"
	opaque := func(driver, params string) resourceapi.DeviceClaimConfiguration {
		return resourceapi.DeviceClaimConfiguration{DeviceConfiguration: resourceapi.DeviceConfiguration{Opaque: &resourceapi.OpaqueDeviceConfiguration{
			Driver: driver, Parameters: runtime.RawExtension{Raw: []byte(params)}}}}
	}
	for _, tc := range []struct {
		name   string
		config resourceapi.DeviceClaimConfiguration
		want   string
	}{
		{name: "backend none", config: opaque("gpu.tangram.dev", `{"apiVersion":"gpu.tangram.dev/v1alpha1","kind":"GpuConfig","sharing":{"backend":"none"}}`), want: wantBackend + " none"},
		{name: "backend mps", config: opaque("gpu.tangram.dev", `{"apiVersion":"gpu.tangram.dev/v1alpha1","kind":"GpuConfig","sharing":{"backend":"mps"}}`), want: wantBackend + " mps"},
		{name: "MPS tuning", config: opaque("gpu.tangram.dev", `{"apiVersion":"gpu.tangram.dev/v1alpha1","kind":"GpuConfig","sharing":{"mps":{"defaultActiveThreadPercentage":30}}}`)},
		{name: "no sharing section", config: opaque("gpu.tangram.dev", `{"apiVersion":"gpu.tangram.dev/v1alpha1","kind":"GpuConfig"}`)},
		{name: "another driver's backend", config: opaque("gpu.example.com", `{"sharing":{"backend":"none"}}`)},
	} {
		t.Run("config: "+tc.name, func(t *testing.T) {
			claim := claimOf("c", exact(shared, false, capacity("memory", "20Gi")))
			claim.Spec.Devices.Config = []resourceapi.DeviceClaimConfiguration{tc.config}
			template := &resourceapi.ResourceClaimTemplate{ObjectMeta: metav1.ObjectMeta{Name: "t", Namespace: "team"},
				Spec: resourceapi.ResourceClaimTemplateSpec{Spec: claim.Spec}}
			for _, req := range []request{
				{user: alice, op: admission.Create, namespace: "team", object: claim, gvk: claimGVK, gvr: claimGVR},
				{user: alice, op: admission.Update, namespace: "team", object: template, old: template, gvk: templateGVK, gvr: templateGVR},
			} {
				got := denied(t, policy, req)
				switch {
				case tc.want == "" && got != "":
					t.Errorf("%s denied: %s", req.gvk.Kind, got)
				case tc.want != "" && !strings.Contains(got, tc.want):
					t.Errorf("%s: denial %q, want one containing %q", req.gvk.Kind, got, tc.want)
				}
			}
		})
	}
}

// TestGPUOnlyThroughClaimsPolicyDecisions: a pod that would get GPUs from
// NVIDIA's container runtime without a claim (device-selection environment,
// the runtime's volume-mount device list, a CDI annotation, the host's
// device nodes through hostPath) is refused with the reason and what to do;
// void/none/empty values, CUDA_VISIBLE_DEVICES, other host paths, the
// chart's plugin pods and the plugin's MPS daemon pods pass.
func TestGPUOnlyThroughClaimsPolicyDecisions(t *testing.T) {
	objs := render(t, "kubeletPlugin.mps.daemon=pod")
	policy := compilePolicy(t, objs.get(t, "ValidatingAdmissionPolicy", "tangram-gpu-only-through-claims").(*admissionv1.ValidatingAdmissionPolicy))
	binding := objs.get(t, "ValidatingAdmissionPolicyBinding", "tangram-gpu-only-through-claims").(*admissionv1.ValidatingAdmissionPolicyBinding)
	if sel := binding.Spec.MatchResources.NamespaceSelector; sel == nil || len(sel.MatchExpressions) != 2 ||
		sel.MatchExpressions[0].Key != "gpu.tangram.dev/direct-gpu-access" || sel.MatchExpressions[0].Operator != metav1.LabelSelectorOpDoesNotExist ||
		sel.MatchExpressions[1].Key != "kubernetes.io/metadata.name" || !slices.Equal(sel.MatchExpressions[1].Values, []string{"kube-system"}) {
		t.Errorf("the binding must exempt kube-system and namespaces labelled gpu.tangram.dev/direct-gpu-access: %+v", sel)
	}
	ds, _ := daemonSet(t, objs)

	pod := func(mutate ...func(*corev1.Pod)) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "team"}, Spec: corev1.PodSpec{
			Containers: []corev1.Container{{Name: "app", Image: "cuda"}}}}
		for _, m := range mutate {
			m(p)
		}
		return p
	}
	env := func(name, value string) func(*corev1.Pod) {
		return func(p *corev1.Pod) {
			p.Spec.Containers[0].Env = append(p.Spec.Containers[0].Env, corev1.EnvVar{Name: name, Value: value})
		}
	}
	mount := func(path string) func(*corev1.Pod) {
		return func(p *corev1.Pod) {
			p.Spec.Containers[0].VolumeMounts = append(p.Spec.Containers[0].VolumeMounts, corev1.VolumeMount{Name: "v", MountPath: path})
		}
	}
	hostPath := func(path string) func(*corev1.Pod) {
		return func(p *corev1.Pod) {
			p.Spec.Volumes = append(p.Spec.Volumes, corev1.Volume{Name: "host", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: path}}})
		}
	}
	create := func(p *corev1.Pod) request {
		return request{user: &user.DefaultInfo{Name: "alice"}, op: admission.Create, namespace: p.Namespace, object: p, gvk: podGVK, gvr: podGVR}
	}
	// The chart's plugin pod, with a /dev mount added so that only the
	// exemption lets it through.
	pluginPod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "tangram-kubelet-plugin-x", Namespace: namespace, Labels: ds.Spec.Template.Labels},
		Spec: ds.Spec.Template.Spec}
	hostPath("/dev")(pluginPod)
	fakePluginPod := pluginPod.DeepCopy()
	fakePluginPod.Namespace = "team"
	daemon := pod(hostPath("/dev"))
	daemon.Namespace = "tangram-system-mps"
	daemonReq := create(daemon)
	daemonReq.user = pluginUser("gpu-node")
	withClaim := pod(env("NVIDIA_VISIBLE_DEVICES", "all"))
	withClaim.Spec.ResourceClaims = []corev1.PodResourceClaim{{Name: "gpu", ResourceClaimTemplateName: ptr.To("share")}}
	const what = "ask for a claim of gpu.tangram.dev (whole cards) or shared-gpu.tangram.dev (a share) instead"

	for _, tc := range []struct {
		name string
		req  request
		want []string
	}{
		{name: "NVIDIA_VISIBLE_DEVICES=all", req: create(pod(env("NVIDIA_VISIBLE_DEVICES", "all"))),
			want: []string{`pod team/p container "app" sets NVIDIA_VISIBLE_DEVICES or `, "NVIDIA's container runtime would give it GPUs outside any claim", what}},
		{name: "NVIDIA_VISIBLE_DEVICES=0,1", req: create(pod(env("NVIDIA_VISIBLE_DEVICES", "0,1"))), want: []string{`container "app" sets NVIDIA_VISIBLE_DEVICES`}},
		{name: "NVIDIA_VISIBLE_DEVICES from a config map", req: create(pod(func(p *corev1.Pod) {
			p.Spec.Containers[0].Env = []corev1.EnvVar{{Name: "NVIDIA_VISIBLE_DEVICES", ValueFrom: &corev1.EnvVarSource{
				ConfigMapKeyRef: &corev1.ConfigMapKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "gpus"}, Key: "all"}}}}
		})), want: []string{"takes it from a secret or config map"}},
		{name: "init container with a MIG variable", req: create(pod(func(p *corev1.Pod) {
			p.Spec.InitContainers = []corev1.Container{{Name: "setup", Image: "x", Env: []corev1.EnvVar{{Name: "NVIDIA_MIG_CONFIG_DEVICES", Value: "all"}}}}
		})), want: []string{`init container "setup" sets`}},
		{name: "with a claim too", req: create(withClaim), want: []string{`container "app" sets NVIDIA_VISIBLE_DEVICES`}},
		{name: "NVIDIA_VISIBLE_DEVICES=void", req: create(pod(env("NVIDIA_VISIBLE_DEVICES", "void")))},
		{name: "NVIDIA_VISIBLE_DEVICES=none", req: create(pod(env("NVIDIA_VISIBLE_DEVICES", " None")))},
		{name: "NVIDIA_VISIBLE_DEVICES empty", req: create(pod(env("NVIDIA_VISIBLE_DEVICES", "")))},
		{name: "CUDA_VISIBLE_DEVICES is the application's", req: create(pod(env("CUDA_VISIBLE_DEVICES", "0")))},
		{name: "NVIDIA_DRIVER_CAPABILITIES selects no device", req: create(pod(env("NVIDIA_DRIVER_CAPABILITIES", "all")))},
		{name: "the runtime's volume-mount device list", req: create(pod(func(p *corev1.Pod) {
			p.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "v", MountPath: "/var/run/nvidia-container-devices/all"}}
		})), want: []string{`pod team/p container "app" mounts a volume under /var/run/nvidia-container-devices`}},
		// The toolkit cleans a mount's destination (filepath.Clean) and
		// takes what follows /var/run/nvidia-container-devices as a plain
		// string prefix as the device: each of these names one.
		{name: "device list: .../nvidia-container-devicesall", req: create(pod(mount("/var/run/nvidia-container-devicesall"))),
			want: []string{`container "app" mounts a volume under /var/run/nvidia-container-devices`}},
		{name: "device list: .../nvidia-container-devices0", req: create(pod(mount("/var/run/nvidia-container-devices0"))), want: []string{`container "app" mounts`}},
		{name: "device list: a . segment", req: create(pod(mount("/var/./run/nvidia-container-devices/all"))), want: []string{`container "app" mounts`}},
		{name: "device list: a .. segment", req: create(pod(mount("/var/run/x/../nvidia-container-devices/0"))), want: []string{`container "app" mounts`}},
		{name: "device list: .. above the root", req: create(pod(mount("/../var/run/nvidia-container-devices/GPU-1"))), want: []string{`container "app" mounts`}},
		{name: "device list: .. with a trailing name", req: create(pod(mount("/var/run/nvidia-container-devices/../nvidia-container-devicesall"))), want: []string{`container "app" mounts`}},
		{name: "device list: // and a trailing slash", req: create(pod(mount("//var//run//nvidia-container-devices//all/"))), want: []string{`container "app" mounts`}},
		{name: "device list under /run", req: create(pod(mount("/run/nvidia-container-devices/all"))), want: []string{`container "app" mounts`}},
		{name: "device list in an init container", req: create(pod(func(p *corev1.Pod) {
			p.Spec.InitContainers = []corev1.Container{{Name: "setup", Image: "x", VolumeMounts: []corev1.VolumeMount{{Name: "v", MountPath: "/var/run/./nvidia-container-devices0"}}}}
		})), want: []string{`init container "setup" mounts`}},
		{name: "a mount beside the device list", req: create(pod(mount("/var/run/nvidia-container")))},
		{name: "a mount named like it elsewhere", req: create(pod(mount("/data/nvidia-container-devices/all")))},
		{name: "a .. mount elsewhere", req: create(pod(mount("/data/../cache")))},
		// A legacy CUDA image's env: CUDA_VERSION set, NVIDIA_REQUIRE_CUDA
		// empty or unset, no NVIDIA_VISIBLE_DEVICES: the toolkit gives it
		// every GPU.
		{name: "legacy image env: CUDA_VERSION alone", req: create(pod(env("CUDA_VERSION", "9.0"))),
			want: []string{`pod team/p container "app" sets CUDA_VERSION without NVIDIA_REQUIRE_CUDA`, "legacy CUDA image and gives it every GPU", "NVIDIA_VISIBLE_DEVICES=void", what}},
		{name: "legacy image env: NVIDIA_REQUIRE_CUDA empty", req: create(pod(env("CUDA_VERSION", "11.0"), env("NVIDIA_REQUIRE_CUDA", ""))), want: []string{`container "app" sets CUDA_VERSION`}},
		{name: "legacy image env: NVIDIA_REQUIRE_CUDA cleared over the image's CUDA_VERSION", req: create(pod(env("NVIDIA_REQUIRE_CUDA", ""))), want: []string{`container "app" sets CUDA_VERSION`}},
		{name: "legacy image env: CUDA_VERSION from a config map", req: create(pod(func(p *corev1.Pod) {
			p.Spec.Containers[0].Env = []corev1.EnvVar{{Name: "CUDA_VERSION", ValueFrom: &corev1.EnvVarSource{
				ConfigMapKeyRef: &corev1.ConfigMapKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "cuda"}, Key: "version"}}}}
		})), want: []string{`container "app" sets CUDA_VERSION`}},
		{name: "legacy image env in an init container", req: create(pod(func(p *corev1.Pod) {
			p.Spec.InitContainers = []corev1.Container{{Name: "setup", Image: "x", Env: []corev1.EnvVar{{Name: "CUDA_VERSION", Value: "10.2"}}}}
		})), want: []string{`init container "setup" sets CUDA_VERSION`}},
		{name: "CUDA_VERSION with NVIDIA_REQUIRE_CUDA", req: create(pod(env("CUDA_VERSION", "12.4"), env("NVIDIA_REQUIRE_CUDA", "cuda>=12.4")))},
		{name: "CUDA_VERSION with NVIDIA_VISIBLE_DEVICES=void", req: create(pod(env("CUDA_VERSION", "9.0"), env("NVIDIA_VISIBLE_DEVICES", "void")))},
		{name: "CUDA_VERSION empty", req: create(pod(env("CUDA_VERSION", "")))},
		{name: "hostPath /dev", req: create(pod(hostPath("/dev"))), want: []string{"pod team/p mounts the host's device nodes through hostPath volume host (/dev, /dev/nvidia* or /dev/char)"}},
		{name: "hostPath /dev/", req: create(pod(hostPath("/dev/"))), want: []string{"hostPath volume host"}},
		{name: "hostPath /dev/nvidia0", req: create(pod(hostPath("/dev/nvidia0"))), want: []string{"hostPath volume host"}},
		{name: "hostPath //dev/./nvidiactl", req: create(pod(hostPath("//dev/./nvidiactl"))), want: []string{"hostPath volume host"}},
		{name: "hostPath /dev/char/195:0", req: create(pod(hostPath("/dev/char/195:0"))), want: []string{"hostPath volume host"}},
		{name: "hostPath /dev/nvidia-caps", req: create(pod(hostPath("/dev/nvidia-caps/"))), want: []string{"hostPath volume host"}},
		{name: "hostPath / is Pod Security's", req: create(pod(hostPath("/")))},
		{name: "hostPath /dev/kmsg", req: create(pod(hostPath("/dev/kmsg")))},
		{name: "hostPath /proc/1/root/dev/nvidia0 is Pod Security's", req: create(pod(hostPath("/proc/1/root/dev/nvidia0")))},
		{name: "hostPath /var/log", req: create(pod(hostPath("/var/log")))},
		{name: "hostPath /devices", req: create(pod(hostPath("/devices")))},
		{name: "CDI annotation", req: create(pod(func(p *corev1.Pod) {
			p.Annotations = map[string]string{"cdi.k8s.io/gpus": "nvidia.com/gpu=all"}
		})), want: []string{"pod team/p has the CDI annotation cdi.k8s.io/gpus, which asks the container runtime for devices outside any claim"}},
		{name: "ephemeral container setting NVIDIA_VISIBLE_DEVICES", req: func() request {
			old := pod(func(*corev1.Pod) {})
			p := old.DeepCopy()
			p.Spec.EphemeralContainers = []corev1.EphemeralContainer{{EphemeralContainerCommon: corev1.EphemeralContainerCommon{
				Name: "debug", Image: "cuda", Env: []corev1.EnvVar{{Name: "NVIDIA_VISIBLE_DEVICES", Value: "all"}}}}}
			return request{user: &user.DefaultInfo{Name: "alice"}, op: admission.Update, namespace: "team", subresource: "ephemeralcontainers",
				object: p, old: old, gvk: podGVK, gvr: podGVR}
		}(), want: []string{`ephemeral container "debug" sets`}},
		{name: "a plain pod", req: create(pod(func(*corev1.Pod) {}))},
		{name: "the chart's plugin pod", req: create(pluginPod)},
		{name: "the plugin's labels outside the release namespace", req: create(fakePluginPod), want: []string{"hostPath volume"}},
		{name: "the plugin's MPS daemon pod", req: daemonReq},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := denied(t, policy, tc.req)
			if len(tc.want) == 0 && got != "" {
				t.Errorf("denied: %s", got)
			}
			for _, w := range tc.want {
				if !strings.Contains(got, w) {
					t.Errorf("denial %q, want one containing %q", got, w)
				}
			}
		})
	}
	for _, sets := range [][]string{{"admissionPolicy.gpuOnlyThroughClaims.enabled=false"}, {"admissionPolicy.enabled=false", "admissionPolicy.acknowledgeUnprotected=true", "kubeletPlugin.mps.daemon=process"}} {
		if render(t, sets...).has("ValidatingAdmissionPolicy", "tangram-gpu-only-through-claims") {
			t.Errorf("%v must drop the policy", sets)
		}
	}
}
