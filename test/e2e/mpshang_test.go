//go:build e2e

package e2e

import (
	"os"
	"path/filepath"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"

	"github.com/tangram-gpu/tangram/pkg/plugin/mps/daemon"
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
// every command) makes every "namespace create" hang. Five shares are
// queued on the hung daemon before a whole card (issue 37: each share's
// commands used to wait their full deadline under the node's state lock, so
// five of them pushed the whole card's prepare past the kubelet's 45 s).
// Now the first share's prepare fails by its deadline with the command
// named, the others are refused at once naming it too, the whole card's
// prepare never fails (no FailedPrepareDynamicResources event: it was never
// cut off by the kubelet's deadline) and its time is printed, and every
// share runs once the daemon answers again.
var _ = Describe("Real GPU path: a hung MPS control command", Label(realPathLabel), Serial, func() {
	It("fails only the shares that need it, within its deadline, while a whole card queued behind five of them runs", func(ctx SpecContext) {
		scenario("hung MPS control: 'namespace create' never answers; five shares queued, then a whole card: the shares' prepares fail naming the command, the whole card runs, the shares run once the daemon answers")
		layout := daemon.Layout{Root: *mpsRoot}
		hangFile := filepath.Join(layout.LogDir(), standin.HangFile)
		Expect(os.MkdirAll(layout.LogDir(), 0o755)).To(Succeed())
		Expect(os.WriteFile(hangFile, []byte("namespace create\n"), 0o644)).To(Succeed())
		DeferCleanup(func() { _ = os.Remove(hangFile) })

		ns := newNamespace(ctx)
		createTemplate(ctx, ns, "share-10gi", memoryShare("10Gi"))
		createTemplate(ctx, ns, "whole", wholeGPUs(1))
		shares := []string{"hung-share-0", "hung-share-1", "hung-share-2", "hung-share-3", "hung-share-4"}
		created := time.Now()
		for _, name := range shares {
			createPod(ctx, gpuPod(ns, name, "share-10gi"))
		}
		// The whole card comes once the shares are bound, so that the
		// kubelet has their prepares under way or queued when it asks.
		waitKube(ctx, "the five shares bound", pollEvery, func(g Gomega) {
			for _, name := range shares {
				g.Expect(getPod(ctx, ns, name).Spec.NodeName).NotTo(BeEmpty(), "pod %s not bound yet", name)
			}
		})
		wholeCreated := time.Now()
		createPod(ctx, gpuPod(ns, "whole-card", "whole"))

		By("the whole card runs although five shares wait on the hung command")
		waitRunning(ctx, ns, "whole-card")
		wholeAfter := time.Since(wholeCreated)
		Expect(eventText(ctx, ns, "whole-card")).NotTo(ContainSubstring("FailedPrepareDynamicResources"),
			"the whole card's prepare failed (the kubelet's deadline, queued behind the shares?)")

		By("every share's prepare fails naming the command")
		var failedAfter time.Duration
		for _, name := range shares {
			msg := waitEvent(ctx, ns, name, "FailedPrepareDynamicResources", "MPS control daemon", "namespace create")
			failedAfter = max(failedAfter, time.Since(created))
			Expect(getPod(ctx, ns, name).Status.Phase).NotTo(Equal(corev1.PodRunning))
			GinkgoWriter.Printf("  %s: %s\n", name, msg)
		}
		GinkgoWriter.Printf("  whole card running %s after its creation; the five shares' prepares had all failed %s after theirs (the deadline is 10 s; the rest is the kubelet's and the API server's)\n",
			wholeAfter.Round(time.Second), failedAfter.Round(time.Second))

		By("once the daemon answers again, every share runs")
		Expect(os.Remove(hangFile)).To(Succeed())
		for _, name := range shares {
			waitRunning(ctx, ns, name)
		}
		for _, name := range append(shares, "whole-card") {
			deletePodAndWait(ctx, ns, name)
		}
	}, SpecTimeout(10*time.Minute))
})
