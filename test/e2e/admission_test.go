//go:build e2e

package e2e

import (
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"

	"github.com/tangram-gpu/tangram/pkg/device"
)

// webhookNamespaceLabel opts a namespace into the GpuConfig webhook as the
// local cluster installs the chart (controller.webhook.namespaceSelector in
// hack/local-cluster/chart.sh): the "Bad input" scenario needs a bad config
// to get past admission, so it is not cluster-wide there.
const webhookNamespaceLabel = "tangram.dev/gpuconfig-webhook"

var _ = Describe("Admission", func() {
	It("refuses a claim and a template with a bad GpuConfig at create time, naming the field", func(ctx SpecContext) {
		scenario("admission: a GpuConfig with defaultActiveThreadPercentage 150 is refused by the webhook when created; a good one is accepted")
		ns := newNamespace(ctx)
		patch := []byte(`{"metadata":{"labels":{"` + webhookNamespaceLabel + `":"enabled"}}}`)
		_, err := clientset.CoreV1().Namespaces().Patch(ctx, ns, types.MergePatchType, patch, metav1.PatchOptions{})
		Expect(err).NotTo(HaveOccurred(), "labelling namespace %s for the webhook", ns)

		// No sharing.backend here: a claim may not name one, and the
		// chart's policy refuses that before the webhook sees it (below).
		bad := `{"apiVersion":"gpu.tangram.dev/v1alpha1","kind":"GpuConfig","sharing":{"mps":{"defaultActiveThreadPercentage":150}}}`
		good := `{"apiVersion":"gpu.tangram.dev/v1alpha1","kind":"GpuConfig","sharing":{"mps":{"defaultActiveThreadPercentage":50}}}`

		// The API server matches namespaceSelector against its own namespace
		// cache, which sees the new label a moment later: wait (with dry-run
		// creates, which store nothing) until the webhook applies here.
		waitKube(ctx, "the webhook applies to namespace "+ns, 200*time.Millisecond, func(g Gomega) {
			_, err := clientset.ResourceV1().ResourceClaims(ns).Create(ctx, configuredClaim("label-probe", bad),
				metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
			g.Expect(err).To(HaveOccurred(), "the webhook never applied to namespace %s after labelling it %s=enabled", ns, webhookNamespaceLabel)
		})

		By("a ResourceClaim with defaultActiveThreadPercentage 150")
		_, err = clientset.ResourceV1().ResourceClaims(ns).Create(ctx, configuredClaim("bad-config", bad), metav1.CreateOptions{})
		expectRefused(err, "spec.devices.config[0].opaque.parameters")
		_, err = clientset.ResourceV1().ResourceClaims(ns).Get(ctx, "bad-config", metav1.GetOptions{})
		Expect(apierrors.IsNotFound(err)).To(BeTrue(), "the refused claim exists after all (err %v)", err)

		By("a ResourceClaimTemplate with the same config")
		_, err = clientset.ResourceV1().ResourceClaimTemplates(ns).Create(ctx, &resourceapi.ResourceClaimTemplate{
			ObjectMeta: metav1.ObjectMeta{Name: "bad-template"},
			Spec:       resourceapi.ResourceClaimTemplateSpec{Spec: configuredClaim("", bad).Spec},
		}, metav1.CreateOptions{})
		expectRefused(err, "spec.spec.devices.config[0].opaque.parameters")

		By("a valid GpuConfig passes")
		_, err = clientset.ResourceV1().ResourceClaims(ns).Create(ctx, configuredClaim("good-config", good), metav1.CreateOptions{})
		Expect(err).NotTo(HaveOccurred(), "a claim with sharing.mps.defaultActiveThreadPercentage 50 was refused")
	}, SpecTimeout(5*time.Minute))

	It("refuses a tenant's claim or template that names a sharing backend, with the chart's defaults", func(ctx SpecContext) {
		scenario("admission: a claim config with sharing.backend: none is refused at creation (the backend is the admin's), MPS tuning is accepted")
		// A namespace the webhook does not check: the chart's
		// ValidatingAdmissionPolicy (admissionPolicy.enabled, the default)
		// refuses it by itself.
		ns := newNamespace(ctx)
		tenant := `{"apiVersion":"gpu.tangram.dev/v1alpha1","kind":"GpuConfig","sharing":{"backend":"none"}}`
		_, err := clientset.ResourceV1().ResourceClaims(ns).Create(ctx, configuredClaim("tenant-none", tenant), metav1.CreateOptions{})
		GinkgoWriter.Printf("  refused: %v\n", err)
		Expect(err).To(HaveOccurred(), "a claim naming sharing.backend: none was admitted")
		Expect(err.Error()).To(ContainSubstring("names sharing.backend none"))
		Expect(err.Error()).To(ContainSubstring("the cluster admin's choice"))
		_, err = clientset.ResourceV1().ResourceClaimTemplates(ns).Create(ctx, &resourceapi.ResourceClaimTemplate{
			ObjectMeta: metav1.ObjectMeta{Name: "tenant-none"},
			Spec:       resourceapi.ResourceClaimTemplateSpec{Spec: configuredClaim("", tenant).Spec},
		}, metav1.CreateOptions{})
		Expect(err).To(HaveOccurred(), "a template naming sharing.backend: none was admitted")
		Expect(err.Error()).To(ContainSubstring("names sharing.backend none"))
		tune := `{"apiVersion":"gpu.tangram.dev/v1alpha1","kind":"GpuConfig","sharing":{"mps":{"defaultActiveThreadPercentage":50}}}`
		_, err = clientset.ResourceV1().ResourceClaims(ns).Create(ctx, configuredClaim("tenant-tuning", tune), metav1.CreateOptions{})
		Expect(err).NotTo(HaveOccurred(), "a claim tuning MPS (no backend) was refused")
	}, SpecTimeout(2*time.Minute))
})

// configuredClaim asks for one whole card with a gpu.tangram.dev opaque config.
func configuredClaim(name, parameters string) *resourceapi.ResourceClaim {
	return &resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{
			Requests: []resourceapi.DeviceRequest{{Name: "gpu", Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: device.DeviceClassName}}},
			Config: []resourceapi.DeviceClaimConfiguration{{DeviceConfiguration: resourceapi.DeviceConfiguration{
				Opaque: &resourceapi.OpaqueDeviceConfiguration{Driver: device.DriverName, Parameters: runtime.RawExtension{Raw: []byte(parameters)}},
			}}},
		}},
	}
}

// expectRefused checks that the webhook, not something else, refused the
// object, with the field path of the config entry and the bad field in it.
func expectRefused(err error, configPath string) {
	GinkgoWriter.Printf("  refused: %v\n", err)
	Expect(err).To(HaveOccurred(), "the object with defaultActiveThreadPercentage 150 was accepted (is the GpuConfig webhook registered?)")
	Expect(apierrors.IsInvalid(err)).To(BeTrue(), "refusal is not 422 Invalid: %v", err)
	Expect(err.Error()).To(ContainSubstring(`admission webhook "gpuconfig.tangram.dev" denied the request`))
	Expect(err.Error()).To(ContainSubstring(configPath))
	Expect(err.Error()).To(ContainSubstring(`sharing.mps.defaultActiveThreadPercentage: Invalid value: 150`))
}
