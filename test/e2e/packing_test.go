//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"

	"github.com/tangram-gpu/tangram/pkg/device"
)

// packingProfile is the fake profile of the API-only node the packing
// scenario adds next to the GPU node: the same cards, all free.
const packingProfile = "dgx-h100"

var _ = Describe("Packing across nodes with tangram-scheduler", func() {
	It("puts a share next to the used card where the stock scheduler breaks a fresh card", func(ctx SpecContext) {
		scenario("packing: one 20Gi share runs on " + gpuNode + "; where does the next 20Gi share go, stock kube-scheduler vs " + *tangramScheduler + "?")
		// An empty node with the same cards as the GPU node, and far more
		// CPU and memory: what the stock scheduler's LeastAllocated prefers.
		emptyNode := createSimNode(ctx, "tangram-sim-packing", packingProfile, true)
		DeferCleanup(deleteSimNode, emptyNode)
		GinkgoWriter.Printf("  API-only node %s: fake %s, shareable, 64 CPUs, 512Gi, nothing allocated\n", emptyNode, packingProfile)
		ns := newNamespace(ctx)
		DeferCleanup(forceDeletePodsOn, ns, emptyNode)
		createTemplate(ctx, ns, "share-20gi", memoryShare("20Gi"))
		devices := nodeDevices(ctx, gpuNode)

		// The first share also takes a tenth of the GPU node's CPU and
		// memory, so the stock scheduler's spreading scores (whole numbers
		// 0..100) tell the two nodes apart on a host of any size.
		first := sharePod(ns, "first-share")
		first.Spec.Containers[0].Resources.Requests = tenthOf(ctx, gpuNode)
		createPod(ctx, first)
		waitRunning(ctx, ns, first.Name)
		firstClaim := allocatedClaim(ctx, ns, first.Name)
		describeAllocation(first.Name, firstClaim)
		Expect(results(firstClaim)).To(HaveLen(1))
		usedCard := results(firstClaim)[0].Device
		GinkgoWriter.Printf("  %s/%s now holds one 20Gi share, 60Gi of it free\n", gpuNode, usedCard)

		// The same pod twice, each free to choose between the GPU node and
		// the empty one: first for the stock scheduler, then for Tangram's.
		stock := sharePod(ns, "next-share-stock")
		onAnyOf(stock, gpuNode, emptyNode)
		createPod(ctx, stock)
		stockNode := boundNode(ctx, ns, stock.Name)
		stockClaim := allocatedClaim(ctx, ns, stock.Name)
		describeAllocation(stock.Name, stockClaim)
		GinkgoWriter.Printf("  default-scheduler chose %s (scheduled by %s)\n", stockNode, scheduledBy(ctx, ns, stock.Name))
		Expect(stockNode).To(Equal(emptyNode),
			"the stock scheduler spreads by CPU/memory (NodeResourcesFit LeastAllocated), so it should pick the empty node; if it did not, this scenario shows nothing")

		// Remove it, and wait until its share is given back, so both
		// schedulers face the same cluster.
		forceDeletePodsOn(ctx, ns, emptyNode)
		waitClaimGone(ctx, ns, string(stockClaim.UID))

		packed := sharePod(ns, "next-share-tangram")
		onAnyOf(packed, gpuNode, emptyNode)
		packed.Spec.SchedulerName = *tangramScheduler
		createPod(ctx, packed)
		packedNode := boundNode(ctx, ns, packed.Name)
		Expect(packedNode).To(Equal(gpuNode), "%s should pack the share onto the node whose card is already in use; events:\n%s",
			*tangramScheduler, eventText(ctx, ns, packed.Name))
		Expect(scheduledBy(ctx, ns, packed.Name)).To(Equal(*tangramScheduler), "the pod's Scheduled event must come from %s", *tangramScheduler)
		report := waitRunning(ctx, ns, packed.Name)
		printPodOutput(ctx, ns, packed.Name)
		packedClaim := allocatedClaim(ctx, ns, packed.Name)
		describeAllocation(packed.Name, packedClaim)
		res := results(packedClaim)
		Expect(res).To(HaveLen(1))
		Expect(res[0].Device).To(Equal(usedCard), "the share should join %s, the card already in use", usedCard)
		uuid := stringAttr(devices[usedCard], device.AttrUUID)
		Expect(report).To(HaveKeyWithValue("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT", fmt.Sprintf("%s=%dM", uuid, 20*1024)))
		GinkgoWriter.Printf("  %s chose %s: both shares run on %s, and every card of %s stays whole\n",
			*tangramScheduler, packedNode, usedCard, emptyNode)
	}, SpecTimeout(8*time.Minute))
})

// sharePod is a gpu-info pod with a 20Gi share (template share-20gi) on the
// GPU node, asking for a little CPU and memory like any real workload.
func sharePod(ns, name string) *corev1.Pod {
	pod := gpuPod(ns, name, "share-20gi")
	pod.Spec.Containers[0].Resources.Requests = corev1.ResourceList{
		corev1.ResourceCPU:    resource.MustParse("50m"),
		corev1.ResourceMemory: resource.MustParse("64Mi"),
	}
	return pod
}

// tenthOf is a tenth of the node's allocatable CPU and memory.
func tenthOf(ctx context.Context, node string) corev1.ResourceList {
	n, err := clientset.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	Expect(err).NotTo(HaveOccurred(), "getting node %s", node)
	cpu, mem := n.Status.Allocatable[corev1.ResourceCPU], n.Status.Allocatable[corev1.ResourceMemory]
	return corev1.ResourceList{
		corev1.ResourceCPU:    *resource.NewMilliQuantity(cpu.MilliValue()/10, resource.DecimalSI),
		corev1.ResourceMemory: *resource.NewQuantity(mem.Value()/10, resource.BinarySI),
	}
}

// boundNode waits until the pod is bound and returns its node.
func boundNode(ctx context.Context, ns, name string) string {
	var node string
	Eventually(func(g Gomega) {
		node = getPod(ctx, ns, name).Spec.NodeName
		g.Expect(node).NotTo(BeEmpty(), "pod %s is not bound yet (schedulerName %q: is that scheduler running? the chart's scheduler.enabled, as hack/local-cluster/chart.sh installs it); events:\n%s",
			name, getPod(ctx, ns, name).Spec.SchedulerName, eventText(ctx, ns, name))
	}).WithContext(ctx).WithTimeout(2 * time.Minute).WithPolling(pollEvery).Should(Succeed())
	return node
}

// scheduledBy names the scheduler that reported the pod's Scheduled event.
func scheduledBy(ctx context.Context, ns, pod string) string {
	var by string
	Eventually(func(g Gomega) {
		list, err := clientset.CoreV1().Events(ns).List(ctx, metav1.ListOptions{
			FieldSelector: fields.AndSelectors(
				fields.OneTermEqualSelector("involvedObject.name", pod),
				fields.OneTermEqualSelector("reason", "Scheduled"),
			).String(),
		})
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(list.Items).NotTo(BeEmpty(), "pod %s has no Scheduled event yet", pod)
		e := list.Items[0]
		by = e.ReportingController
		if by == "" {
			by = e.Source.Component
		}
	}).WithContext(ctx).WithTimeout(time.Minute).WithPolling(pollEvery).Should(Succeed())
	return by
}
