//go:build e2e

package e2e

import (
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/tangram-gpu/tangram/pkg/device"
)

var _ = Describe("Bad input", func() {
	It("fails a claim with an invalid GpuConfig with an event naming the field, and prepares nothing", func(ctx SpecContext) {
		scenario("bad input: GpuConfig with sharing.mps.defaultActiveThreadPercentage: 150")
		ns := newNamespace(ctx)
		claim := memoryShare("10Gi")
		claim.Config = []resourceapi.DeviceClaimConfiguration{{
			Requests: []string{"share"},
			DeviceConfiguration: resourceapi.DeviceConfiguration{Opaque: &resourceapi.OpaqueDeviceConfiguration{
				Driver: device.DriverName,
				Parameters: runtime.RawExtension{Raw: []byte(`{"apiVersion":"gpu.tangram.dev/v1alpha1","kind":"GpuConfig",` +
					`"sharing":{"mps":{"defaultActiveThreadPercentage":150}}}`)},
			}},
		}}
		createTemplate(ctx, ns, "bad-config", claim)
		createPod(ctx, gpuPod(ns, "bad-config", "bad-config"))

		msg := waitEvent(ctx, ns, "bad-config", "FailedPrepareDynamicResources", "sharing.mps.defaultActiveThreadPercentage")
		GinkgoWriter.Printf("  pod bad-config event FailedPrepareDynamicResources: %s\n", msg)
		pod := getPod(ctx, ns, "bad-config")
		Expect(pod.Status.Phase).To(Equal(corev1.PodPending), "a pod whose claim cannot be prepared must not start")

		uid := string(podClaim(ctx, ns, "bad-config").UID)
		if *cdiDir != "" {
			Expect(cdiSpecsMentioning(uid)).To(BeEmpty(), "a failed prepare must leave no CDI spec for claim %s", uid)
			GinkgoWriter.Printf("  no CDI spec in %s mentions claim %s\n", *cdiDir, uid)
		}
		deletePodAndWait(ctx, ns, "bad-config")
		waitClaimGone(ctx, ns, uid)
		if *cdiDir != "" {
			Expect(cdiSpecsMentioning(uid)).To(BeEmpty())
		}
	}, SpecTimeout(5*time.Minute))
})
