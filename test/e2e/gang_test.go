//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	schedulingv1beta1 "k8s.io/api/scheduling/v1beta1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/tangram-gpu/tangram/pkg/device"
)

var _ = Describe("Pod gang", func() {
	It("binds all three members of a minCount-3 PodGroup or none", func(ctx SpecContext) {
		scenario("pod gang: PodGroup minCount 3, one claim per pod; room for two binds none, room for three binds all")
		ns := newNamespace(ctx)
		total := int64(len(nodeDevices(ctx, gpuNode)))
		Expect(total).To(BeNumerically(">=", 4), "node %s needs at least four GPUs", gpuNode)
		createTemplate(ctx, ns, "one-gpu", wholeGPUs(1))
		createTemplate(ctx, ns, "blocker-gpus", wholeGPUs(total-3))

		// Leave exactly two cards free: one blocker holds all but three,
		// a second holds one more.
		GinkgoWriter.Printf("  filling %s: blocker-big takes %d of %d cards, blocker-one takes 1 → 2 free\n", gpuNode, total-3, total)
		createPod(ctx, gpuPod(ns, "blocker-big", "blocker-gpus"))
		createPod(ctx, gpuPod(ns, "blocker-one", "one-gpu"))
		waitRunning(ctx, ns, "blocker-big")
		waitRunning(ctx, ns, "blocker-one")

		group := createGang(ctx, ns, "trainer", 3)
		workers := []string{"worker-0", "worker-1", "worker-2"}
		for _, w := range workers {
			pod := gpuPod(ns, w, "one-gpu")
			pod.Spec.SchedulingGroup = &corev1.PodSchedulingGroup{PodGroupName: ptr.To(group)}
			createPod(ctx, pod)
		}
		By("with room for two, no member binds")
		Consistently(func(g Gomega) {
			for _, w := range workers {
				g.Expect(getPod(ctx, ns, w).Spec.NodeName).To(BeEmpty(), "gang member %s was bound with room for only two", w)
			}
		}).WithContext(ctx).WithTimeout(30 * time.Second).WithPolling(time.Second).Should(Succeed())
		for _, w := range workers {
			Expect(podClaim(ctx, ns, w).Status.Allocation).To(BeNil(), "gang member %s holds an allocation although the gang did not bind", w)
			GinkgoWriter.Printf("  %s pending; events:\n%s", w, indent(eventText(ctx, ns, w)))
		}

		By("freeing one card, all three bind")
		deletePodAndWait(ctx, ns, "blocker-one")
		devices := nodeDevices(ctx, gpuNode)
		seen := map[string]string{}
		for _, w := range workers {
			report := waitRunning(ctx, ns, w)
			printPodOutput(ctx, ns, w)
			claim := allocatedClaim(ctx, ns, w)
			describeAllocation(w, claim)
			res := results(claim)
			Expect(res).To(HaveLen(1))
			uuid := stringAttr(devices[res[0].Device], device.AttrUUID)
			Expect(report).To(HaveKeyWithValue("NVIDIA_VISIBLE_DEVICES", uuid))
			Expect(seen).NotTo(HaveKey(uuid), "gang members %s and %s share a card", seen[uuid], w)
			seen[uuid] = w
		}
	}, SpecTimeout(8*time.Minute))
})

// createGang creates a Workload with one gang PodGroupTemplate and the
// PodGroup instance pods join through spec.schedulingGroup; it returns the
// PodGroup's name.
func createGang(ctx context.Context, ns, name string, minCount int32) string {
	policy := schedulingv1beta1.PodGroupSchedulingPolicy{Gang: &schedulingv1beta1.GangSchedulingPolicy{MinCount: minCount}}
	_, err := clientset.SchedulingV1beta1().Workloads(ns).Create(ctx, &schedulingv1beta1.Workload{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: schedulingv1beta1.WorkloadSpec{PodGroupTemplates: []schedulingv1beta1.PodGroupTemplate{{
			Name: "workers", SchedulingPolicy: policy,
		}}},
	}, metav1.CreateOptions{})
	Expect(err).NotTo(HaveOccurred(), "creating Workload %s/%s (is scheduling.k8s.io/v1beta1 served, GenericWorkload on?)", ns, name)
	group := name + "-workers"
	_, err = clientset.SchedulingV1beta1().PodGroups(ns).Create(ctx, &schedulingv1beta1.PodGroup{
		ObjectMeta: metav1.ObjectMeta{Name: group},
		Spec: schedulingv1beta1.PodGroupSpec{
			WorkloadRef:      &schedulingv1beta1.WorkloadReference{WorkloadName: name, TemplateName: "workers"},
			SchedulingPolicy: policy,
		},
	}, metav1.CreateOptions{})
	Expect(err).NotTo(HaveOccurred(), "creating PodGroup %s/%s", ns, group)
	GinkgoWriter.Printf("  Workload %s, PodGroup %s (gang, minCount %d)\n", name, group, minCount)
	return group
}

func indent(s string) string {
	if s == "" {
		return "    (none)\n"
	}
	out := ""
	for _, l := range splitLines(s) {
		out += fmt.Sprintf("    %s\n", l)
	}
	return out
}
