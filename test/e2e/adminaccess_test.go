//go:build e2e

package e2e

import (
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/tangram-gpu/tangram/pkg/device"
)

// Admin access as the Kubernetes docs write it (adminAccess: true, no
// capacity) would stay Pending beside any holder of a shared card with the
// 1.37 allocator (docs/resourceslices.md); the chart's claim-requests
// policy refuses it when the claim or template is created, naming the line
// to add. The form with that line reaching busy cards is the "admin access
// reads a card held whole ..." spec.
var _ = Describe("DRA API features: admin access policy", func() {
	It("refuses admin access naming no memory at creation with the line to add, and admits it with the line", func(ctx SpecContext) {
		scenario("admin access without capacity is refused by <release>-claim-requests")
		ns := newNamespace(ctx)
		nsObj, err := clientset.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
		Expect(err).NotTo(HaveOccurred())
		nsObj.Labels = map[string]string{"resource.kubernetes.io/admin-access": "true"}
		_, err = clientset.CoreV1().Namespaces().Update(ctx, nsObj, metav1.UpdateOptions{})
		Expect(err).NotTo(HaveOccurred())

		documented := resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{{
			Name: "gpu",
			Exactly: &resourceapi.ExactDeviceRequest{
				DeviceClassName: device.DeviceClassName,
				AllocationMode:  resourceapi.DeviceAllocationModeExactCount,
				Count:           1,
				AdminAccess:     ptr.To(true),
			},
		}}}
		const want = `request gpu has adminAccess: true but does not ask for memory 0`
		const line = `add capacity: {requests: {memory: "0"}} to the request`
		expectPolicyRefusal := func(err error) {
			GinkgoWriter.Printf("  refused: %v\n", err)
			Expect(err).To(HaveOccurred(), "admin access naming no capacity was admitted (is the chart's claim-requests policy installed?)")
			Expect(apierrors.IsInvalid(err)).To(BeTrue(), "refusal is not 422 Invalid: %v", err)
			Expect(err.Error()).To(ContainSubstring("claim-requests"), "refused by something other than the claim-requests policy")
			Expect(err.Error()).To(ContainSubstring(want))
			Expect(err.Error()).To(ContainSubstring(line))
		}
		_, err = clientset.ResourceV1().ResourceClaims(ns).Create(ctx, &resourceapi.ResourceClaim{
			ObjectMeta: metav1.ObjectMeta{Name: "monitor"},
			Spec:       resourceapi.ResourceClaimSpec{Devices: documented},
		}, metav1.CreateOptions{})
		expectPolicyRefusal(err)
		_, err = clientset.ResourceV1().ResourceClaimTemplates(ns).Create(ctx, &resourceapi.ResourceClaimTemplate{
			ObjectMeta: metav1.ObjectMeta{Name: "monitor"},
			Spec:       resourceapi.ResourceClaimTemplateSpec{Spec: resourceapi.ResourceClaimSpec{Devices: documented}},
		}, metav1.CreateOptions{})
		expectPolicyRefusal(err)

		fixed := documented.DeepCopy()
		fixed.Requests[0].Exactly.Capacity = &resourceapi.CapacityRequirements{Requests: map[resourceapi.QualifiedName]resource.Quantity{
			device.CapacityMemory: resource.MustParse("0"),
		}}
		_, err = clientset.ResourceV1().ResourceClaims(ns).Create(ctx, &resourceapi.ResourceClaim{
			ObjectMeta: metav1.ObjectMeta{Name: "monitor"},
			Spec:       resourceapi.ResourceClaimSpec{Devices: *fixed},
		}, metav1.CreateOptions{})
		Expect(err).NotTo(HaveOccurred(), "admin access with memory 0 was refused")
		createTemplate(ctx, ns, "monitor", *fixed)
	}, SpecTimeout(3*time.Minute))
})
