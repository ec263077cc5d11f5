//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/utils/ptr"

	tangramv1alpha1 "github.com/tangram-gpu/tangram/api/tangram/v1alpha1"
	"github.com/tangram-gpu/tangram/pkg/device"
)

// The GpuGang scenario needs the dra-controller (the Helm chart with
// controller.enabled, as hack/local-cluster/chart.sh installs it).
var _ = Describe("GpuGang", func() {
	It("places 3 members × 2 NVLink cards and reports each member's node and devices", func(ctx SpecContext) {
		scenario("GpuGang: 3 members × 2 whole cards in one NVLink domain reach Running; status lists every member's node and devices")
		ns := newNamespace(ctx)
		Expect(len(nodeDevices(ctx, gpuNode))).To(BeNumerically(">=", 6), "node %s needs at least six GPUs", gpuNode)
		gangs := gangClient().Namespace(ns)
		createNVLinkGang(ctx, ns, "train", 3, 2)

		By("the controller creates the claim template, Workload and PodGroup")
		var status tangramv1alpha1.GpuGangStatus
		Eventually(func(g Gomega) {
			status = getGangStatus(ctx, g, ns, "train")
			g.Expect(status.ResourceClaimTemplateName).NotTo(BeEmpty(), "gang status has no claim template yet (is the dra-controller running?): %+v", status)
			g.Expect(status.PodGroupName).NotTo(BeEmpty(), "gang status has no PodGroup yet: %+v", status)
		}).WithContext(ctx).WithTimeout(time.Minute).WithPolling(pollEvery).Should(Succeed())
		GinkgoWriter.Printf("  gang objects: PodGroup %s, ResourceClaimTemplate %s\n", status.PodGroupName, status.ResourceClaimTemplateName)
		_, err := clientset.ResourceV1().ResourceClaimTemplates(ns).Get(ctx, status.ResourceClaimTemplateName, metav1.GetOptions{})
		Expect(err).NotTo(HaveOccurred(), "claim template %s named in the gang's status", status.ResourceClaimTemplateName)
		_, err = clientset.SchedulingV1beta1().Workloads(ns).Get(ctx, "train", metav1.GetOptions{})
		Expect(err).NotTo(HaveOccurred(), "Workload train the gang owns")

		members := []string{"train-0", "train-1", "train-2"}
		for _, m := range members {
			pod := gpuPod(ns, m, status.ResourceClaimTemplateName)
			pod.Spec.SchedulingGroup = &corev1.PodSchedulingGroup{PodGroupName: ptr.To(status.PodGroupName)}
			createPod(ctx, pod)
		}
		for _, m := range members {
			waitRunning(ctx, ns, m)
		}

		By("the gang reaches Running with every member placed")
		Eventually(func(g Gomega) {
			status = getGangStatus(ctx, g, ns, "train")
			g.Expect(status.Phase).To(Equal(tangramv1alpha1.GangRunning), "gang phase; diagnosis %q", status.Diagnosis)
			g.Expect(status.Placed).To(BeEquivalentTo(3))
			g.Expect(status.Running).To(BeEquivalentTo(3))
			g.Expect(status.Members).To(HaveLen(3))
			for _, ms := range status.Members {
				g.Expect(ms.Devices).To(HaveLen(2), "member %s devices", ms.Pod)
			}
		}).WithContext(ctx).WithTimeout(time.Minute).WithPolling(pollEvery).Should(Succeed())

		devices := nodeDevices(ctx, gpuNode)
		owner := map[string]string{}
		for _, ms := range status.Members {
			GinkgoWriter.Printf("  member %s: node %s, phase %s, claim %s, devices %v\n", ms.Pod, ms.Node, ms.PodPhase, ms.Claim, ms.Devices)
			Expect(members).To(ContainElement(ms.Pod))
			Expect(ms.Node).To(Equal(gpuNode), "member %s node", ms.Pod)
			Expect(ms.PodPhase).To(Equal(string(corev1.PodRunning)), "member %s pod phase", ms.Pod)
			// The status must say what the scheduler really allocated.
			claim := allocatedClaim(ctx, ns, ms.Pod)
			Expect(ms.Claim).To(Equal(claim.Name), "member %s claim", ms.Pod)
			var allocated []string
			for _, r := range results(claim) {
				allocated = append(allocated, r.Pool+"/"+r.Device)
			}
			Expect(ms.Devices).To(ConsistOf(allocated), "member %s devices in status vs its claim's allocation", ms.Pod)
			domains := map[string]bool{}
			for _, d := range ms.Devices {
				Expect(owner).NotTo(HaveKey(d), "members %s and %s share %s", owner[d], ms.Pod, d)
				owner[d] = ms.Pod
				name := d[strings.LastIndex(d, "/")+1:]
				Expect(devices).To(HaveKey(name), "device %s of member %s is not on %s", d, ms.Pod, gpuNode)
				domains[stringAttr(devices[name], device.AttrNVLinkDomain)] = true
			}
			Expect(domains).NotTo(HaveKey(""), "member %s got a card without an NVLink domain", ms.Pod)
			Expect(domains).To(HaveLen(1), "member %s got cards of different NVLink domains: %v", ms.Pod, domains)
		}
		Expect(owner).To(HaveLen(6))

		By("deleting the gang removes the Workload and the claim template it created")
		Expect(gangs.Delete(ctx, "train", metav1.DeleteOptions{})).To(Succeed())
		Eventually(func(g Gomega) {
			_, err := clientset.SchedulingV1beta1().Workloads(ns).Get(ctx, "train", metav1.GetOptions{})
			g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "Workload train still exists (err %v)", err)
			_, err = clientset.ResourceV1().ResourceClaimTemplates(ns).Get(ctx, status.ResourceClaimTemplateName, metav1.GetOptions{})
			g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "template %s still exists (err %v)", status.ResourceClaimTemplateName, err)
		}).WithContext(ctx).WithTimeout(time.Minute).WithPolling(pollEvery).Should(Succeed())
	}, SpecTimeout(8*time.Minute))
})

var _ = Describe("GpuGang that does not fit", func() {
	It("keeps every member pending and says in its status how much room the cluster has", func(ctx SpecContext) {
		scenario("GpuGang: 3 members × 4 cards in one NVLink domain, room for only 2: no member binds, the status says why")
		ns := newNamespace(ctx)
		// dgx-h100: 8 cards in one NVLink domain, so room for exactly two
		// members of 4; the API-only pcie-a100-pairs node has NVLink pairs
		// only and room for none.
		Expect(nodeDevices(ctx, gpuNode)).To(HaveLen(8), "node %s must publish exactly 8 GPUs (fake profile dgx-h100)", gpuNode)
		createNVLinkGang(ctx, ns, "big", 3, 4)
		var status tangramv1alpha1.GpuGangStatus
		Eventually(func(g Gomega) {
			status = getGangStatus(ctx, g, ns, "big")
			g.Expect(status.PodGroupName).NotTo(BeEmpty(), "gang status has no PodGroup yet (is the dra-controller running?): %+v", status)
		}).WithContext(ctx).WithTimeout(time.Minute).WithPolling(pollEvery).Should(Succeed())
		members := []string{"big-0", "big-1", "big-2"}
		for _, m := range members {
			pod := gpuPod(ns, m, status.ResourceClaimTemplateName)
			pod.Spec.SchedulingGroup = &corev1.PodSchedulingGroup{PodGroupName: ptr.To(status.PodGroupName)}
			createPod(ctx, pod)
		}

		By("the status explains, in plain words, that the cluster has room for 2 of the 3 members")
		Eventually(func(g Gomega) {
			status = getGangStatus(ctx, g, ns, "big")
			g.Expect(status.Phase).To(Equal(tangramv1alpha1.GangPending))
			g.Expect(status.Diagnosis).To(And(
				ContainSubstring("needs 3 members, each 4 whole cards in one NVLink domain"),
				ContainSubstring("room for 2 members (1 node)"),
				// Once the controller has seen all three member pods.
				Not(ContainSubstring("member pods the gang needs exist")),
			), "gang diagnosis")
		}).WithContext(ctx).WithTimeout(time.Minute).WithPolling(pollEvery).Should(Succeed())
		GinkgoWriter.Printf("  gang big: phase %s, placed %d; diagnosis: %s\n", status.Phase, status.Placed, status.Diagnosis)

		By("all or nothing: no member binds and no claim is allocated")
		Consistently(func(g Gomega) {
			for _, m := range members {
				g.Expect(getPod(ctx, ns, m).Spec.NodeName).To(BeEmpty(), "member %s was bound although the gang cannot be placed", m)
			}
			list, err := clientset.ResourceV1().ResourceClaims(ns).List(ctx, metav1.ListOptions{})
			g.Expect(err).NotTo(HaveOccurred())
			for _, c := range list.Items {
				g.Expect(c.Status.Allocation).To(BeNil(), "claim %s is allocated", c.Name)
			}
			g.Expect(getGangStatus(ctx, g, ns, "big").Placed).To(BeZero())
		}).WithContext(ctx).WithTimeout(15 * time.Second).WithPolling(time.Second).Should(Succeed())
		GinkgoWriter.Printf("  after 15 s: no member bound, no claim allocated\n")
	}, SpecTimeout(5*time.Minute))
})

var _ = Describe("GpuGang in one topology domain", func() {
	It("keeps a gang that fits only across two zones pending, and places it across them without topologyKey", func(ctx SpecContext) {
		scenario("GpuGang: 5 members × 2 NVLink cards; zone-a (" + gpuNode + ") and zone-b (" + simNode + ") have room for 4 each")
		const zoneKey = "e2e.tangram.dev/zone"
		// Two zones with room for four members each: the GPU node (8 cards
		// in one NVLink domain) and the API-only node (4 NVLink pairs).
		labelZone(ctx, gpuNode, zoneKey, "zone-a")
		labelZone(ctx, simNode, zoneKey, "zone-b")
		ns := newNamespace(ctx)
		members := []string{"wide-0", "wide-1", "wide-2", "wide-3", "wide-4"}
		createMembers := func(gang string) {
			for _, m := range members {
				pod := gpuPod(ns, m, gang+"-gpus")
				pod.Spec.NodeSelector = nil
				pod.Spec.Tolerations = []corev1.Toleration{{Operator: corev1.TolerationOpExists}}
				pod.Spec.SchedulingGroup = &corev1.PodSchedulingGroup{PodGroupName: ptr.To(gang)}
				createPod(ctx, pod)
			}
		}

		By("with topologyKey: no zone has room for five, so none binds")
		createNVLinkGangIn(ctx, ns, "wide", 5, 2, zoneKey)
		var status tangramv1alpha1.GpuGangStatus
		Eventually(func(g Gomega) {
			status = getGangStatus(ctx, g, ns, "wide")
			g.Expect(meta.IsStatusConditionTrue(status.Conditions, tangramv1alpha1.ConditionTopologyEnforced)).To(BeTrue(),
				"the PodGroup must carry the topology constraint (TopologyAwareWorkloadScheduling on): %+v", status.Conditions)
		}).WithContext(ctx).WithTimeout(time.Minute).WithPolling(pollEvery).Should(Succeed())
		createMembers("wide")
		Eventually(func(g Gomega) {
			status = getGangStatus(ctx, g, ns, "wide")
			g.Expect(status.Diagnosis).To(And(ContainSubstring("zone-a has room for 4 members"), ContainSubstring("zone-b for 4"),
				Not(ContainSubstring("member pods the gang needs exist"))), "gang diagnosis once the controller has seen all five members")
		}).WithContext(ctx).WithTimeout(time.Minute).WithPolling(pollEvery).Should(Succeed())
		GinkgoWriter.Printf("  gang wide: TopologyEnforced, phase %s; diagnosis: %s\n", status.Phase, status.Diagnosis)
		Consistently(func(g Gomega) {
			for _, m := range members {
				g.Expect(getPod(ctx, ns, m).Spec.NodeName).To(BeEmpty(), "member %s was bound although no zone has room for the gang", m)
			}
		}).WithContext(ctx).WithTimeout(20 * time.Second).WithPolling(time.Second).Should(Succeed())
		GinkgoWriter.Printf("  after 20 s: no member bound\n")

		By("the same gang without topologyKey spans both zones")
		Expect(gangClient().Namespace(ns).Delete(ctx, "wide", metav1.DeleteOptions{})).To(Succeed())
		for _, m := range members {
			Expect(clientset.CoreV1().Pods(ns).Delete(ctx, m, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)})).To(Succeed())
		}
		Eventually(func(g Gomega) {
			list, err := clientset.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(list.Items).To(BeEmpty())
			_, err = clientset.SchedulingV1beta1().PodGroups(ns).Get(ctx, "wide", metav1.GetOptions{})
			g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "PodGroup wide still exists")
		}).WithContext(ctx).WithTimeout(2 * time.Minute).WithPolling(pollEvery).Should(Succeed())
		createNVLinkGangIn(ctx, ns, "wide", 5, 2, "")
		Eventually(func(g Gomega) {
			status = getGangStatus(ctx, g, ns, "wide")
			g.Expect(status.PodGroupName).NotTo(BeEmpty())
		}).WithContext(ctx).WithTimeout(time.Minute).WithPolling(pollEvery).Should(Succeed())
		createMembers("wide")
		nodes := map[string]int{}
		Eventually(func(g Gomega) {
			nodes = map[string]int{}
			for _, m := range members {
				node := getPod(ctx, ns, m).Spec.NodeName
				g.Expect(node).NotTo(BeEmpty(), "member %s is not bound yet", m)
				nodes[node]++
			}
		}).WithContext(ctx).WithTimeout(2 * time.Minute).WithPolling(pollEvery).Should(Succeed())
		GinkgoWriter.Printf("  without topologyKey all five bind: %v\n", nodes)
		Expect(nodes).To(HaveLen(2), "five members of two cards need both zones")
	}, SpecTimeout(8*time.Minute))
})

// labelZone sets a node label for the spec and removes it afterwards.
func labelZone(ctx context.Context, node, key, value string) {
	patch := func(v string) []byte {
		if v == "" {
			return []byte(`{"metadata":{"labels":{"` + key + `":null}}}`)
		}
		return []byte(`{"metadata":{"labels":{"` + key + `":"` + v + `"}}}`)
	}
	_, err := clientset.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, patch(value), metav1.PatchOptions{})
	Expect(err).NotTo(HaveOccurred(), "labelling node %s %s=%s", node, key, value)
	DeferCleanup(func(ctx SpecContext) {
		_, err := clientset.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, patch(""), metav1.PatchOptions{})
		Expect(err).NotTo(HaveOccurred(), "removing label %s of node %s", key, node)
	})
}

// createNVLinkGang creates a GpuGang of members pods (all needed at once),
// each with cards whole cards in one NVLink domain.
func createNVLinkGang(ctx context.Context, ns, name string, members, cards int32) {
	createNVLinkGangIn(ctx, ns, name, members, cards, "")
}

// createNVLinkGangIn is createNVLinkGang with all members on nodes that
// share the value of the node label topologyKey ("" for none).
func createNVLinkGangIn(ctx context.Context, ns, name string, members, cards int32, topologyKey string) {
	gang := &tangramv1alpha1.GpuGang{
		TypeMeta:   metav1.TypeMeta{APIVersion: tangramv1alpha1.SchemeGroupVersion.String(), Kind: tangramv1alpha1.Kind},
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: tangramv1alpha1.GpuGangSpec{
			Members:     tangramv1alpha1.GangMembers{Count: members, MinCount: ptr.To(members)},
			GPUs:        tangramv1alpha1.MemberGPUs{Whole: &tangramv1alpha1.WholeGPUs{Count: cards, SameNVLinkDomain: true}},
			TopologyKey: topologyKey,
		},
	}
	obj, err := runtime.DefaultUnstructuredConverter.ToUnstructured(gang)
	Expect(err).NotTo(HaveOccurred())
	_, err = gangClient().Namespace(ns).Create(ctx, &unstructured.Unstructured{Object: obj}, metav1.CreateOptions{})
	Expect(err).NotTo(HaveOccurred(), "creating GpuGang %s/%s (is the GpuGang CRD installed?)", ns, name)
}

// gangClient is a dynamic client for GpuGangs: the controller has no
// generated clientset for its one CRD.
func gangClient() dynamic.NamespaceableResourceInterface {
	client, err := dynamic.NewForConfig(restConfig)
	Expect(err).NotTo(HaveOccurred())
	return client.Resource(tangramv1alpha1.GroupVersionResource)
}

func getGangStatus(ctx context.Context, g Gomega, ns, name string) tangramv1alpha1.GpuGangStatus {
	u, err := gangClient().Namespace(ns).Get(ctx, name, metav1.GetOptions{})
	g.Expect(err).NotTo(HaveOccurred(), "getting GpuGang %s/%s", ns, name)
	var gang tangramv1alpha1.GpuGang
	g.Expect(runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &gang)).To(Succeed(), fmt.Sprintf("decoding GpuGang %s/%s", ns, name))
	return gang.Status
}
