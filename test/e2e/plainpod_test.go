//go:build e2e

package e2e

import (
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
)

var _ = Describe("A pod without a claim", func() {
	It("runs on the GPU node and sees no GPU", func(ctx SpecContext) {
		scenario("plain pod: no claim, no GPU")
		ns := newNamespace(ctx)
		pod := gpuPod(ns, "plain", "")
		pod.Spec.ResourceClaims = nil
		pod.Spec.Containers[0].Resources.Claims = nil
		createPod(ctx, pod)
		report := waitRunning(ctx, ns, "plain")
		printPodOutput(ctx, ns, "plain")
		Expect(report).NotTo(HaveKey("NVIDIA_VISIBLE_DEVICES"), "a pod without a claim must not get a GPU")
		Expect(report).To(HaveKeyWithValue("DEVICE_NODES", ""))
	}, SpecTimeout(4*time.Minute))
})
