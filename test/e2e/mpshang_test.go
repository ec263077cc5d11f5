//go:build e2e

package e2e

import (
	"os"
	"path/filepath"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"

	"github.com/tangram-gpu/tangram/pkg/plugin/mps"
	"github.com/tangram-gpu/tangram/pkg/plugin/mps/standin"
)

// A share's prepare must fail by the control command's own deadline (10 s)
// when the MPS control daemon never answers it. Without deadlines the
// prepare hung until the kubelet gave up on the call, and every other
// prepare of the node waited behind it. That the deadline fired is what the
// event's message says (only the deadline's errors name the control daemon
// and the command); how long the kubelet and the API server took to deliver
// it is printed, not limited (waitKube): it was a 60 s limit, which a
// loaded machine's kubelet can pass on its own.
// A hung control command fails only the prepares that need it: the
// stand-in's hang knob (standin-hang in the MPS log directory, re-read at
// every command) makes every "namespace create" hang; a share's prepare
// fails by its deadline with the command named, a whole card runs
// meanwhile, and the share runs once the daemon answers again.
var _ = Describe("Real GPU path: a hung MPS control command", Label(realPathLabel), Serial, func() {
	It("fails only the share that needs it, within its deadline, while a whole card runs", func(ctx SpecContext) {
		scenario("hung MPS control: 'namespace create' never answers; a share's prepare fails by its deadline, a whole card runs, the share runs once the daemon answers")
		layout := mps.Layout{Root: *mpsRoot}
		hangFile := filepath.Join(layout.LogDir(), standin.HangFile)
		Expect(os.MkdirAll(layout.LogDir(), 0o755)).To(Succeed())
		Expect(os.WriteFile(hangFile, []byte("namespace create\n"), 0o644)).To(Succeed())
		DeferCleanup(func() { _ = os.Remove(hangFile) })

		ns := newNamespace(ctx)
		createTemplate(ctx, ns, "share-20gi", memoryShare("20Gi"))
		createTemplate(ctx, ns, "whole", wholeGPUs(1))
		created := time.Now()
		createPod(ctx, gpuPod(ns, "hung-share", "share-20gi"))
		createPod(ctx, gpuPod(ns, "whole-card", "whole"))

		By("the whole card runs although the share's control command hangs")
		waitRunning(ctx, ns, "whole-card")
		wholeAfter := time.Since(created)

		By("the share's prepare fails by its deadline, naming the command")
		msg := waitEvent(ctx, ns, "hung-share", "FailedPrepareDynamicResources", "MPS control daemon", "namespace create")
		failedAfter := time.Since(created)
		Expect(getPod(ctx, ns, "hung-share").Status.Phase).NotTo(Equal(corev1.PodRunning))
		GinkgoWriter.Printf("  whole card running after %s; share's prepare failed after %s (the deadline is 10 s; the rest is the kubelet's and the API server's): %s\n",
			wholeAfter.Round(time.Second), failedAfter.Round(time.Second), msg)

		By("once the daemon answers again, the share runs")
		Expect(os.Remove(hangFile)).To(Succeed())
		waitRunning(ctx, ns, "hung-share")
		deletePodAndWait(ctx, ns, "hung-share")
		deletePodAndWait(ctx, ns, "whole-card")
	}, SpecTimeout(8*time.Minute))
})
