//go:build e2e

package e2e

import (
	"bufio"
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	admissionv1 "k8s.io/api/admissionregistration/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/rand"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"github.com/tangram-gpu/tangram/pkg/device"
	"github.com/tangram-gpu/tangram/pkg/plugin/mps/daemon"
)

// The chart's security objects are rendered with these values: fake GPUs
// (no driver root in the daemon pod), the images of the local cluster.
const (
	privilegeMPSRoot = "/run/tangram/mps"
	privilegeImage   = "localhost/tangram/dra-kubelet-plugin:dev"
)

// A compromised GPU node holds the kubelet plugin's service account token,
// bound to the plugin's pod and so to its node. This scenario installs the
// chart's RBAC and admission policies for a release of its own, takes such
// a token (a TokenRequest bound to a pod of the plugin's service account on
// the GPU node), and tries each escalation of issue 14 with it: every one
// must be refused, while what the plugin really does (its own node's daemon
// pod and slices) must still be allowed. Creates are dry runs: admission
// runs in full, nothing is stored.
var _ = Describe("Privilege of the kubelet plugin's token", func() {
	It("creates only its own node's MPS daemon pod and slices, and reaches nothing in the release namespace", func(ctx SpecContext) {
		scenario("privilege: the plugin's token tries to escalate from its node; every attempt is refused")
		release := "sec" + rand.String(5)
		fullname := release + "-tangram"
		pluginSA := fullname + "-kubelet-plugin"
		releaseNS := newNamespace(ctx)
		mpsNS := releaseNS + "-mps"

		By("installing the chart's plugin RBAC, MPS namespace and admission policies for release " + release)
		installChartObjects(ctx, release, releaseNS, "templates/rbac-kubeletplugin.yaml",
			"templates/admission-policy.yaml", "templates/admission-policy-mps-daemon.yaml")
		// What the escalations aim at, as the chart would put them in the
		// release namespace: the controller's and the scheduler's service
		// accounts and the webhook's key.
		for _, sa := range []string{fullname + "-controller", fullname + "-scheduler"} {
			_, err := clientset.CoreV1().ServiceAccounts(releaseNS).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: sa}}, metav1.CreateOptions{})
			Expect(err).NotTo(HaveOccurred(), "creating service account %s", sa)
		}
		webhookSecret := fullname + "-controller-webhook-tls"
		_, err := clientset.CoreV1().Secrets(releaseNS).Create(ctx, &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Name: webhookSecret},
			StringData: map[string]string{"tls.key": "the webhook's private key"},
		}, metav1.CreateOptions{})
		Expect(err).NotTo(HaveOccurred())

		By("taking the token of the plugin's service account, bound to a pod on " + gpuNode)
		plugin := pluginClient(ctx, releaseNS, pluginSA)

		node, err := clientset.CoreV1().Nodes().Get(ctx, gpuNode, metav1.GetOptions{})
		Expect(err).NotTo(HaveOccurred())
		daemonPod := func(nodeName string) *corev1.Pod {
			pod, err := daemon.BuildPod(daemon.PodSpec{
				Prefix: fullname, Namespace: mpsNS, NodeName: nodeName, NodeUID: string(node.UID),
				PodImage: daemon.PodImage{Image: privilegeImage, ImagePullPolicy: corev1.PullIfNotPresent},
				Command:  []string{"/dra-kubelet-plugin", "mps-daemon"}, Layout: daemon.Layout{Root: privilegeMPSRoot},
				Simulate: true, PriorityClassName: "system-node-critical",
			})
			Expect(err).NotTo(HaveOccurred())
			if nodeName != gpuNode {
				pod.OwnerReferences = nil
			}
			return pod
		}
		dryRun := metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}
		createPod := func(pod *corev1.Pod) error {
			_, err := plugin.CoreV1().Pods(pod.Namespace).Create(ctx, pod, dryRun)
			return err
		}

		// The API server loads new policies a moment after they are
		// created; until then RBAC alone would let this through.
		Eventually(func() error {
			return createPod(daemonPod(simNode))
		}).WithContext(ctx).WithTimeout(time.Minute).WithPolling(time.Second).Should(
			MatchError(ContainSubstring("may only run its MPS daemon pod on its own node")),
			"the MPS daemon pod policy never took effect")

		By("allowed: the daemon pod of its own node, exactly as the plugin builds it")
		Expect(createPod(daemonPod(gpuNode))).To(Succeed(), "the plugin's own MPS daemon pod must pass the policy")

		By("allowed: a ResourceSlice of its own node, driver and pool")
		slice := func(nodeName, driver, pool string) *resourceapi.ResourceSlice {
			return &resourceapi.ResourceSlice{
				ObjectMeta: metav1.ObjectMeta{Name: "probe-" + rand.String(5)},
				Spec: resourceapi.ResourceSliceSpec{
					Driver:   driver,
					Pool:     resourceapi.ResourcePool{Name: pool, ResourceSliceCount: 1},
					NodeName: ptr.To(nodeName),
					Devices:  []resourceapi.Device{{Name: "gpu-0"}},
				},
			}
		}
		_, err = plugin.ResourceV1().ResourceSlices().Create(ctx, slice(gpuNode, device.DriverName, gpuNode), dryRun)
		Expect(err).NotTo(HaveOccurred(), "the plugin's own ResourceSlice must pass the policy")

		privileged := func(ns, nodeName string) *corev1.Pod {
			return &corev1.Pod{
				ObjectMeta: metav1.ObjectMeta{Name: fullname + "-mps-" + nodeName, Namespace: ns},
				Spec: corev1.PodSpec{
					NodeName:    nodeName,
					HostPID:     true,
					Tolerations: []corev1.Toleration{{Operator: corev1.TolerationOpExists}},
					Containers: []corev1.Container{{
						Name: "root", Image: *workloadImage, Command: []string{"sh", "-c", "nsenter -t 1 -m -u -i -n sh"},
						SecurityContext: &corev1.SecurityContext{Privileged: ptr.To(true)},
					}},
				},
			}
		}
		controlPlane := "tangram-e2e-control-plane"
		for _, tc := range []struct {
			what string
			try  func() error
			// want is part of the refusal: a policy's message, or
			// "forbidden" for RBAC.
			want string
		}{
			{what: "a privileged pod on another node (the API-only node " + simNode + ")", want: "may only run its MPS daemon pod on its own node",
				try: func() error { return createPod(privileged(mpsNS, simNode)) }},
			{what: "a privileged pod on a control-plane node", want: "may only run its MPS daemon pod on its own node",
				try: func() error { return createPod(privileged(mpsNS, controlPlane)) }},
			{what: "a privileged host-PID pod of its own on its own node", want: "runs `/dra-kubelet-plugin mps-daemon` from the plugin's image",
				try: func() error { return createPod(privileged(mpsNS, gpuNode)) }},
			{what: "any pod in the release namespace", want: "forbidden",
				try: func() error { return createPod(privileged(releaseNS, gpuNode)) }},
			{what: "the daemon pod in the release namespace as the controller's service account", want: "forbidden",
				try: func() error {
					pod := daemonPod(gpuNode)
					pod.Namespace, pod.Spec.ServiceAccountName, pod.Spec.AutomountServiceAccountToken = releaseNS, fullname+"-controller", nil
					return createPod(pod)
				}},
			{what: "the daemon pod running as another service account with its token mounted", want: "default service account with no token mounted",
				try: func() error {
					pod := daemonPod(gpuNode)
					pod.Spec.ServiceAccountName, pod.Spec.AutomountServiceAccountToken = "default", ptr.To(true)
					return createPod(pod)
				}},
			{what: "the daemon pod mounting the webhook key's Secret", want: "may mount only the host paths",
				try: func() error {
					pod := daemonPod(gpuNode)
					pod.Spec.Volumes = append(pod.Spec.Volumes, corev1.Volume{Name: "key", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: webhookSecret}}})
					return createPod(pod)
				}},
			{what: "the daemon pod on the host's network", want: "not its network or IPC namespace",
				try: func() error {
					pod := daemonPod(gpuNode)
					pod.Spec.HostNetwork = true
					return createPod(pod)
				}},
			{what: "the daemon pod mounting the host's root file system", want: "may mount only the host paths",
				try: func() error {
					pod := daemonPod(gpuNode)
					pod.Spec.Volumes = append(pod.Spec.Volumes, corev1.Volume{Name: "host", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/"}}})
					return createPod(pod)
				}},
			{what: "reading the webhook key", want: "forbidden",
				try: func() error {
					_, err := plugin.CoreV1().Secrets(releaseNS).Get(ctx, webhookSecret, metav1.GetOptions{})
					return err
				}},
			{what: "listing secrets of the MPS namespace", want: "forbidden",
				try: func() error {
					_, err := plugin.CoreV1().Secrets(mpsNS).List(ctx, metav1.ListOptions{})
					return err
				}},
			{what: "a token for the controller's service account", want: "forbidden",
				try: func() error {
					_, err := plugin.CoreV1().ServiceAccounts(releaseNS).CreateToken(ctx, fullname+"-controller", &authenticationv1.TokenRequest{}, dryRun)
					return err
				}},
			{what: "deleting a pod of the release namespace", want: "forbidden",
				try: func() error {
					return plugin.CoreV1().Pods(releaseNS).Delete(ctx, "anything", metav1.DeleteOptions{DryRun: []string{metav1.DryRunAll}})
				}},
			{what: "deleting another node's MPS daemon pod", want: "may only run its MPS daemon pod on its own node",
				try: func() error {
					other := daemonPod(simNode)
					_, err := clientset.CoreV1().Pods(mpsNS).Create(ctx, other, metav1.CreateOptions{})
					Expect(err).NotTo(HaveOccurred(), "creating another node's daemon pod as the admin")
					// No kubelet runs on the API-only node to finish a
					// graceful delete.
					DeferCleanup(func(ctx SpecContext) {
						_ = clientset.CoreV1().Pods(mpsNS).Delete(ctx, other.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)})
					})
					return plugin.CoreV1().Pods(mpsNS).Delete(ctx, other.Name, metav1.DeleteOptions{DryRun: []string{metav1.DryRunAll}})
				}},
			{what: "a ResourceSlice of another node", want: "may only write ResourceSlices of its own node",
				try: func() error {
					_, err := plugin.ResourceV1().ResourceSlices().Create(ctx, slice(simNode, device.DriverName, simNode), dryRun)
					return err
				}},
			{what: "a ResourceSlice of another driver", want: "may only write ResourceSlices of driver " + device.DriverName,
				try: func() error {
					_, err := plugin.ResourceV1().ResourceSlices().Create(ctx, slice(gpuNode, "gpu.nvidia.com", gpuNode), dryRun)
					return err
				}},
			{what: "a ResourceSlice in another pool", want: "of the pool named after its node",
				try: func() error {
					_, err := plugin.ResourceV1().ResourceSlices().Create(ctx, slice(gpuNode, device.DriverName, "shared-pool"), dryRun)
					return err
				}},
		} {
			By("refused: " + tc.what)
			err := tc.try()
			Expect(err).To(HaveOccurred(), "the plugin's token was allowed: %s", tc.what)
			if tc.want == "forbidden" {
				Expect(apierrors.IsForbidden(err)).To(BeTrue(), "%s: want an RBAC refusal, got %v", tc.what, err)
			} else {
				Expect(err.Error()).To(ContainSubstring(tc.want), "%s: refused for the wrong reason", tc.what)
			}
			GinkgoWriter.Printf("    refused: %s\n      %v\n", tc.what, err)
		}
	})
})

// installChartObjects renders the chart's templates for release into
// namespace with helm and creates what they hold; cluster-scoped objects
// and the MPS namespace are deleted again after the spec.
func installChartObjects(ctx context.Context, release, namespace string, templates ...string) {
	chart := filepath.Join(repoRoot(), "deployments", "helm", "tangram")
	args := []string{"template", release, chart, "--namespace", namespace, "--set", "fakeGPU.profile=dgx-h100",
		"--set", "kubeletPlugin.hostPaths.mpsRoot=" + privilegeMPSRoot}
	for _, t := range templates {
		args = append(args, "--show-only", t)
	}
	out, err := exec.CommandContext(ctx, *helmBinary, args...).CombinedOutput()
	Expect(err).NotTo(HaveOccurred(), "helm %s:\n%s", strings.Join(args, " "), out)

	decode := scheme.Codecs.UniversalDeserializer().Decode
	reader := utilyaml.NewYAMLReader(bufio.NewReader(strings.NewReader(string(out))))
	for {
		doc, err := reader.Read()
		if err != nil {
			break
		}
		if strings.TrimSpace(strings.ReplaceAll(string(doc), "---", "")) == "" {
			continue
		}
		obj, _, err := decode(doc, nil, nil)
		if err != nil && strings.Contains(err.Error(), "Object 'Kind' is missing") {
			continue // only comments
		}
		Expect(err).NotTo(HaveOccurred(), "decoding a rendered object:\n%s", doc)
		createChartObject(ctx, obj)
	}
}

func createChartObject(ctx context.Context, obj any) {
	var err error
	var cleanup func(context.Context) error
	opts := metav1.CreateOptions{}
	del := metav1.DeleteOptions{}
	switch o := obj.(type) {
	case *corev1.Namespace:
		_, err = clientset.CoreV1().Namespaces().Create(ctx, o, opts)
		cleanup = func(ctx context.Context) error { return clientset.CoreV1().Namespaces().Delete(ctx, o.Name, del) }
	case *corev1.ServiceAccount:
		_, err = clientset.CoreV1().ServiceAccounts(o.Namespace).Create(ctx, o, opts)
	case *rbacv1.ClusterRole:
		_, err = clientset.RbacV1().ClusterRoles().Create(ctx, o, opts)
		cleanup = func(ctx context.Context) error { return clientset.RbacV1().ClusterRoles().Delete(ctx, o.Name, del) }
	case *rbacv1.ClusterRoleBinding:
		_, err = clientset.RbacV1().ClusterRoleBindings().Create(ctx, o, opts)
		cleanup = func(ctx context.Context) error {
			return clientset.RbacV1().ClusterRoleBindings().Delete(ctx, o.Name, del)
		}
	case *rbacv1.Role:
		_, err = clientset.RbacV1().Roles(o.Namespace).Create(ctx, o, opts)
	case *rbacv1.RoleBinding:
		_, err = clientset.RbacV1().RoleBindings(o.Namespace).Create(ctx, o, opts)
	case *admissionv1.ValidatingAdmissionPolicy:
		_, err = clientset.AdmissionregistrationV1().ValidatingAdmissionPolicies().Create(ctx, o, opts)
		cleanup = func(ctx context.Context) error {
			return clientset.AdmissionregistrationV1().ValidatingAdmissionPolicies().Delete(ctx, o.Name, del)
		}
	case *admissionv1.ValidatingAdmissionPolicyBinding:
		_, err = clientset.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings().Create(ctx, o, opts)
		cleanup = func(ctx context.Context) error {
			return clientset.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings().Delete(ctx, o.Name, del)
		}
	default:
		Fail(fmt.Sprintf("installChartObjects cannot create a %T", obj))
	}
	Expect(err).NotTo(HaveOccurred(), "creating %T", obj)
	if cleanup != nil {
		DeferCleanup(func(ctx SpecContext) {
			if err := cleanup(ctx); err != nil && !apierrors.IsNotFound(err) {
				Fail(fmt.Sprintf("deleting %T: %v", obj, err))
			}
		})
	}
}

// pluginClient returns a client that authenticates as the plugin does in
// its pod: with a token of its service account bound to a pod on the GPU
// node (the API server then puts the node's name into the token).
func pluginClient(ctx context.Context, namespace, serviceAccount string) kubernetes.Interface {
	pod, err := clientset.CoreV1().Pods(namespace).Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "plugin-token-holder"},
		Spec: corev1.PodSpec{
			NodeName:                     gpuNode,
			ServiceAccountName:           serviceAccount,
			AutomountServiceAccountToken: ptr.To(false),
			Tolerations:                  []corev1.Toleration{{Operator: corev1.TolerationOpExists}},
			Containers:                   []corev1.Container{{Name: "sleep", Image: *workloadImage, ImagePullPolicy: corev1.PullIfNotPresent}},
		},
	}, metav1.CreateOptions{})
	Expect(err).NotTo(HaveOccurred(), "creating a pod of service account %s", serviceAccount)
	token, err := clientset.CoreV1().ServiceAccounts(namespace).CreateToken(ctx, serviceAccount, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{
			ExpirationSeconds: ptr.To[int64](600),
			BoundObjectRef:    &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID},
		},
	}, metav1.CreateOptions{})
	Expect(err).NotTo(HaveOccurred(), "requesting a token of %s bound to pod %s", serviceAccount, pod.Name)

	cfg := rest.AnonymousClientConfig(restConfig)
	cfg.BearerToken = token.Status.Token
	client, err := kubernetes.NewForConfig(cfg)
	Expect(err).NotTo(HaveOccurred())
	review, err := client.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	Expect(err).NotTo(HaveOccurred(), "asking the API server who the plugin's token is")
	GinkgoWriter.Printf("    the token authenticates as %s, node %v\n", review.Status.UserInfo.Username,
		review.Status.UserInfo.Extra["authentication.kubernetes.io/node-name"])
	Expect(review.Status.UserInfo.Extra["authentication.kubernetes.io/node-name"]).To(ConsistOf(gpuNode),
		"the token carries no node name: the API server must bind service account tokens to nodes")
	return client
}
