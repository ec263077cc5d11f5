//go:build realcluster

// A run of the whole controller against a real API server (no kubelet,
// scheduler or controller-manager needed):
//
//	TANGRAM_KUBECONFIG=/path/to/admin.kubeconfig go test -tags realcluster -count=1 -v ./pkg/controller/app/
//
// It installs the GpuGang CRD, runs the controller in-process with the
// webhook on 127.0.0.1, registers the webhook by URL, and checks what the
// API server accepts: the CRD's validation, the Workload/PodGroup the
// controller writes (and how it treats the topology constraint), the
// webhook's matchCondition, and the refusal of a bad GpuConfig.
package app

import (
	"context"
	"fmt"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	admissionregv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	tangramv1 "github.com/tangram-gpu/tangram/api/tangram/v1alpha1"
	"github.com/tangram-gpu/tangram/pkg/controller/gang"
)

func TestRealCluster(t *testing.T) {
	kubeconfig := os.Getenv("TANGRAM_KUBECONFIG")
	if kubeconfig == "" {
		t.Fatal("set TANGRAM_KUBECONFIG to the kubeconfig of a cluster this test may write to")
	}
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	kube := kubernetes.NewForConfigOrDie(cfg)
	dyn := dynamic.NewForConfigOrDie(cfg)
	ns := fmt.Sprintf("tangram-ctl-%d", time.Now().Unix())
	if _, err := kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = kube.CoreV1().Namespaces().Delete(context.Background(), ns, metav1.DeleteOptions{})
	}()

	installCRD(ctx, t, dyn)

	// CRD validation: minCount above count is refused by the API server.
	bad := gpuGang(ns, "too-small", 2, 1)
	bad.Spec.Members.MinCount = ptr.To[int32](3)
	if err := createGang(ctx, dyn, bad); err == nil || !strings.Contains(err.Error(), "minCount must not exceed count") {
		t.Errorf("invalid gang: err = %v", err)
	}

	port := freePort(t)
	webhookName := ns + "-gpuconfig"
	opts := Options{
		Kubeconfig: kubeconfig, HealthzAddress: "127.0.0.1:0", GpuGangs: true, Workers: 1, PendingResync: time.Second,
		WebhookAddress: fmt.Sprintf("127.0.0.1:%d", port), WebhookNamespace: ns, WebhookSecret: "webhook-tls",
		WebhookService: "webhook", WebhookConfigName: webhookName,
	}
	if _, err := kube.AdmissionregistrationV1().ValidatingWebhookConfigurations().Create(ctx, webhookConfig(webhookName, ns, port), metav1.CreateOptions{}); err != nil {
		t.Fatalf("the API server refuses the webhook configuration (matchConditions?): %v", err)
	}
	defer func() {
		_ = kube.AdmissionregistrationV1().ValidatingWebhookConfigurations().Delete(context.Background(), webhookName, metav1.DeleteOptions{})
	}()
	done := make(chan error, 1)
	go func() { done <- Run(ctx, opts) }()

	g := gpuGang(ns, "train", 3, 2)
	g.Spec.TopologyKey = "example.com/ib-zone"
	if err := createGang(ctx, dyn, g); err != nil {
		t.Fatal(err)
	}
	var got *tangramv1.GpuGang
	poll(ctx, t, "the gang's status", func() bool {
		u, err := dyn.Resource(tangramv1.GroupVersionResource).Namespace(ns).Get(ctx, "train", metav1.GetOptions{})
		if err != nil {
			return false
		}
		got, err = gang.FromObject(u)
		return err == nil && got.Status.Phase != ""
	})
	t.Logf("status: phase %s, diagnosis %q, conditions %+v", got.Status.Phase, got.Status.Diagnosis, got.Status.Conditions)
	if !meta.IsStatusConditionTrue(got.Status.Conditions, tangramv1.ConditionObjectsReady) {
		t.Fatalf("objects not ready: %+v", got.Status.Conditions)
	}
	pg, err := kube.SchedulingV1beta1().PodGroups(ns).Get(ctx, "train", metav1.GetOptions{})
	if err != nil || pg.Spec.SchedulingPolicy.Gang == nil || pg.Spec.SchedulingPolicy.Gang.MinCount != 3 {
		t.Fatalf("podgroup %+v, %v", pg, err)
	}
	topo := meta.FindStatusCondition(got.Status.Conditions, tangramv1.ConditionTopologyEnforced)
	t.Logf("topology constraint on the PodGroup: %+v; condition %+v", pg.Spec.SchedulingConstraints, topo)
	if topo == nil || (topo.Status == metav1.ConditionTrue) != (pg.Spec.SchedulingConstraints != nil) {
		t.Errorf("the TopologyEnforced condition %+v does not match the PodGroup's constraints %+v", topo, pg.Spec.SchedulingConstraints)
	}
	if _, err := kube.ResourceV1().ResourceClaimTemplates(ns).Get(ctx, "train-gpus", metav1.GetOptions{}); err != nil {
		t.Errorf("template: %v", err)
	}

	// The webhook: a bad GpuConfig is refused naming the field, once the
	// controller has set the caBundle.
	claim := &resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "bad-config"},
		Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{
			Requests: []resourceapi.DeviceRequest{{Name: "gpu", Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: "gpu.tangram.dev"}}},
			Config: []resourceapi.DeviceClaimConfiguration{{DeviceConfiguration: resourceapi.DeviceConfiguration{Opaque: &resourceapi.OpaqueDeviceConfiguration{
				Driver: "gpu.tangram.dev", Parameters: runtime.RawExtension{Raw: []byte(`{"apiVersion":"gpu.tangram.dev/v1alpha1","kind":"GpuConfig","sharing":{"backend":"foo"}}`)},
			}}}},
		}},
	}
	want := `spec.devices.config[0].opaque.parameters: invalid gpu.tangram.dev config from the claim (all requests): sharing.backend: Unsupported value: "foo": supported values: "mps", "none"`
	poll(ctx, t, "the webhook to refuse a bad GpuConfig", func() bool {
		_, err := kube.ResourceV1().ResourceClaims(ns).Create(ctx, claim, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		if err != nil {
			t.Logf("create: %v", err)
		}
		return err != nil && strings.Contains(err.Error(), want)
	})
	// A claim of another driver is not sent to the webhook at all.
	other := claim.DeepCopy()
	other.Spec.Devices.Config[0].Opaque.Driver = "other.example.com"
	if _, err := kube.ResourceV1().ResourceClaims(ns).Create(ctx, other, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}); err != nil {
		t.Errorf("other driver's claim: %v", err)
	}

	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run: %v", err)
	}
}

func gpuGang(ns, name string, members, cards int32) *tangramv1.GpuGang {
	return &tangramv1.GpuGang{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: tangramv1.GpuGangSpec{
			Members: tangramv1.GangMembers{Count: members},
			GPUs:    tangramv1.MemberGPUs{Whole: &tangramv1.WholeGPUs{Count: cards, SameNVLinkDomain: true}},
		},
	}
}

func createGang(ctx context.Context, dyn dynamic.Interface, g *tangramv1.GpuGang) error {
	u, err := gang.ToUnstructured(g)
	if err != nil {
		return err
	}
	_, err = dyn.Resource(tangramv1.GroupVersionResource).Namespace(g.Namespace).Create(ctx, u, metav1.CreateOptions{})
	return err
}

func installCRD(ctx context.Context, t *testing.T, dyn dynamic.Interface) {
	t.Helper()
	raw, err := os.ReadFile("../../../deployments/helm/tangram/crds/tangram.dev_gpugangs.yaml")
	if err != nil {
		t.Fatal(err)
	}
	obj := &unstructured.Unstructured{}
	if err := yaml.Unmarshal(raw, &obj.Object); err != nil {
		t.Fatal(err)
	}
	crds := dyn.Resource(schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"})
	if _, err := crds.Create(ctx, obj, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatalf("the API server refuses the CRD: %v", err)
	}
	poll(ctx, t, "the CRD to be served", func() bool {
		_, err := dyn.Resource(tangramv1.GroupVersionResource).List(ctx, metav1.ListOptions{})
		return err == nil
	})
}

func webhookConfig(name, ns string, port int) *admissionregv1.ValidatingWebhookConfiguration {
	has := "exists(c, c.?opaque.?driver.orValue('') == 'gpu.tangram.dev')"
	return &admissionregv1.ValidatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Webhooks: []admissionregv1.ValidatingWebhook{{
			Name:                    "gpuconfig.tangram.dev",
			AdmissionReviewVersions: []string{"v1"},
			SideEffects:             ptr.To(admissionregv1.SideEffectClassNone),
			FailurePolicy:           ptr.To(admissionregv1.Fail),
			MatchPolicy:             ptr.To(admissionregv1.Equivalent),
			ClientConfig:            admissionregv1.WebhookClientConfig{URL: ptr.To(fmt.Sprintf("https://127.0.0.1:%d/validate", port))},
			NamespaceSelector:       &metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/metadata.name": ns}},
			Rules: []admissionregv1.RuleWithOperations{{
				Operations: []admissionregv1.OperationType{admissionregv1.Create, admissionregv1.Update},
				Rule: admissionregv1.Rule{APIGroups: []string{"resource.k8s.io"}, APIVersions: []string{"*"},
					Resources: []string{"resourceclaims", "resourceclaimtemplates", "deviceclasses"}},
			}},
			// The chart's expressions, verbatim (release "tangram").
			MatchConditions: []admissionregv1.MatchCondition{
				{Name: "not-this-release-deviceclass", Expression: "!(request.resource.resource == 'deviceclasses' && " +
					"object.metadata.?labels[?'app.kubernetes.io/instance'].orValue('') == \"tangram\" && " +
					"object.metadata.?labels[?'app.kubernetes.io/name'].orValue('') == \"tangram\")"},
				{Name: "has-gpu-tangram-dev-config", Expression: "request.resource.resource == 'deviceclasses' ? " +
					"object.spec.?config.orValue([])." + has + " : request.resource.resource == 'resourceclaimtemplates' ? " +
					"object.spec.spec.?devices.?config.orValue([])." + has + " : object.spec.?devices.?config.orValue([])." + has},
			},
		}},
	}
}

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

func poll(ctx context.Context, t *testing.T, what string, cond func() bool) {
	t.Helper()
	if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		return cond(), nil
	}); err != nil {
		t.Fatalf("waiting for %s: %v", what, err)
	}
}

// TestRealClusterLeaderElection runs two replicas: one holds the Lease;
// when it stops, the other takes over.
func TestRealClusterLeaderElection(t *testing.T) {
	kubeconfig := os.Getenv("TANGRAM_KUBECONFIG")
	if kubeconfig == "" {
		t.Fatal("set TANGRAM_KUBECONFIG to the kubeconfig of a cluster this test may write to")
	}
	_, ctx := ktesting.NewTestContext(t)
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	kube := kubernetes.NewForConfigOrDie(cfg)
	ns := fmt.Sprintf("tangram-le-%d", time.Now().UnixNano())
	if _, err := kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = kube.CoreV1().Namespaces().Delete(context.Background(), ns, metav1.DeleteOptions{}) }()

	type replica struct {
		cancel context.CancelFunc
		done   chan error
	}
	start := func(identity string) replica {
		rctx, cancel := context.WithCancel(ctx)
		r := replica{cancel: cancel, done: make(chan error, 1)}
		o := Options{Kubeconfig: kubeconfig, LeaderElect: true, LeaderElectNamespace: ns, LeaderElectName: "tangram-controller",
			Identity: identity, LeaseDuration: 4 * time.Second, RenewDeadline: 3 * time.Second, RetryPeriod: 500 * time.Millisecond,
			GpuGangs: true, Workers: 1, PendingResync: time.Minute}
		if err := o.Validate(); err != nil {
			t.Fatal(err)
		}
		go func() { r.done <- Run(rctx, o) }()
		return r
	}
	holder := func() string {
		l, err := kube.CoordinationV1().Leases(ns).Get(ctx, "tangram-controller", metav1.GetOptions{})
		if err != nil || l.Spec.HolderIdentity == nil {
			return ""
		}
		return *l.Spec.HolderIdentity
	}
	replicas := map[string]replica{"ctl-a": start("ctl-a"), "ctl-b": start("ctl-b")}
	var first string
	poll(ctx, t, "a leader", func() bool { first = holder(); return first != "" })
	second := "ctl-a"
	if first == "ctl-a" {
		second = "ctl-b"
	}
	t.Logf("%s leads; stopping it", first)
	replicas[first].cancel()
	if err := <-replicas[first].done; err != nil {
		t.Errorf("the stopped leader's Run: %v", err)
	}
	poll(ctx, t, second+" to take over", func() bool { return holder() == second })
	replicas[second].cancel()
	if err := <-replicas[second].done; err != nil {
		t.Errorf("Run: %v", err)
	}
}
