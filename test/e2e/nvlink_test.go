//go:build e2e

package e2e

import (
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"

	"github.com/tangram-gpu/tangram/pkg/device"
)

var _ = Describe("NVLink gang in one claim", func() {
	It("allocates a bridged pair for count 2 and leaves count 4 pending with the scheduler's reason", func(ctx SpecContext) {
		scenario("NVLink gang: count 2 + matchAttribute nvlinkDomain on " + *simProfile + " (API-only node " + simNode + ")")
		ns := newNamespace(ctx)
		createTemplate(ctx, ns, "nvlink-2", nvlinkGang(2))
		createTemplate(ctx, ns, "nvlink-4", nvlinkGang(4))
		devices := nodeDevices(ctx, simNode)

		pair := gpuPod(ns, "nvlink-pair", "nvlink-2")
		onSimNode(pair)
		createPod(ctx, pair)
		claim := allocatedClaim(ctx, ns, pair.Name)
		describeAllocation(pair.Name, claim)
		res := results(claim)
		Expect(res).To(HaveLen(2), "count 2 allocates two cards")
		Expect(res[0].Device).NotTo(Equal(res[1].Device))
		d0, d1 := stringAttr(devices[res[0].Device], device.AttrNVLinkDomain), stringAttr(devices[res[1].Device], device.AttrNVLinkDomain)
		GinkgoWriter.Printf("  nvlinkDomain of %s: %q, of %s: %q\n", res[0].Device, d0, res[1].Device, d1)
		Expect(d0).NotTo(BeEmpty(), "a bridged card has an nvlinkDomain")
		Expect(d0).To(Equal(d1), "the two cards must be NVLink peers")
		Eventually(func() string { return getPod(ctx, ns, pair.Name).Spec.NodeName }).
			WithContext(ctx).WithTimeout(time.Minute).Should(Equal(simNode))
		GinkgoWriter.Printf("  pod %s is bound to %s (API-only: it schedules, it does not run)\n", pair.Name, simNode)

		quad := gpuPod(ns, "nvlink-quad", "nvlink-4")
		onSimNode(quad)
		createPod(ctx, quad)
		msg := waitEvent(ctx, ns, quad.Name, "FailedScheduling", "cannot allocate all claims")
		GinkgoWriter.Printf("  pod %s event FailedScheduling: %s\n", quad.Name, msg)
		p := getPod(ctx, ns, quad.Name)
		Expect(p.Spec.NodeName).To(BeEmpty(), "no node has four cards in one NVLink domain")
		Expect(p.Status.Phase).To(Equal(corev1.PodPending))
		Expect(podClaim(ctx, ns, quad.Name).Status.Allocation).To(BeNil(), "the count-4 claim must stay unallocated")
		// Pending must be stable, not a slow allocation.
		Consistently(func() string { return getPod(ctx, ns, quad.Name).Spec.NodeName }).
			WithContext(ctx).WithTimeout(10 * time.Second).WithPolling(time.Second).Should(BeEmpty())
	}, SpecTimeout(5*time.Minute))
})
