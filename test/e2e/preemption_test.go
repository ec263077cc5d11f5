//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"slices"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	schedulingv1beta1 "k8s.io/api/scheduling/v1beta1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

var _ = Describe("GPU preemption with tangram-scheduler", func() {
	It("evicts one low-priority pod for a high-priority whole card and one for a 40Gi share, where the stock scheduler leaves both pending", func(ctx SpecContext) {
		scenario("preemption: every card of " + gpuNode + " held by a low-priority pod; a high-priority whole card, then a 40Gi share, stock kube-scheduler vs " + *tangramScheduler)
		ns := newNamespace(ctx)
		low := createPriorityClass(ctx, ns+"-low", 100)
		high := createPriorityClass(ctx, ns+"-high", 1000000)
		createTemplate(ctx, ns, "whole-gpu", wholeGPUs(1))
		createTemplate(ctx, ns, "share-40gi", memoryShare("40Gi"))
		cards := len(nodeDevices(ctx, gpuNode))

		// Fill the node: one low-priority pod per card.
		lowPods := make([]string, cards)
		for i := range lowPods {
			lowPods[i] = fmt.Sprintf("low-%d", i)
			createPod(ctx, priorityPod(ns, lowPods[i], "whole-gpu", low, ""))
		}
		cardOf, claimOf := map[string]string{}, map[string]string{}
		for _, name := range lowPods {
			waitRunning(ctx, ns, name)
			claim := allocatedClaim(ctx, ns, name)
			cardOf[name], claimOf[name] = results(claim)[0].Device, claim.Name
		}
		GinkgoWriter.Printf("  %d low-priority pods (PriorityClass %s) hold all %d cards\n", cards, low, cards)

		// The stock scheduler: no preemption for DRA devices in 1.37.
		for _, p := range []*corev1.Pod{
			priorityPod(ns, "stock-whole", "whole-gpu", high, ""),
			priorityPod(ns, "stock-share", "share-40gi", high, ""),
		} {
			createPod(ctx, p)
			msg := waitEvent(ctx, ns, p.Name, "FailedScheduling", "cannot allocate all claims")
			GinkgoWriter.Printf("  default-scheduler leaves %s Pending: %s\n", p.Name, msg)
		}
		Expect(runningOf(ctx, ns, lowPods)).To(HaveLen(cards), "the stock scheduler must not evict anyone")
		for _, name := range []string{"stock-whole", "stock-share"} {
			Expect(getPod(ctx, ns, name).Spec.NodeName).To(BeEmpty(), "%s was bound by the stock scheduler", name)
			deletePodAndWait(ctx, ns, name)
		}

		// tangram-scheduler: a whole card, then a 40Gi share, each evicting
		// exactly one low-priority pod and running on its card.
		for _, tc := range []struct{ name, template string }{
			{"high-whole", "whole-gpu"},
			{"high-share", "share-40gi"},
		} {
			before := runningOf(ctx, ns, lowPods)
			start := time.Now()
			createPod(ctx, priorityPod(ns, tc.name, tc.template, high, *tangramScheduler))
			tl := watchPreemption(ctx, ns, tc.name, before, claimOf, start)
			after := runningOf(ctx, ns, lowPods)
			Expect(after).To(HaveLen(len(before)-1), "%s must evict exactly one low-priority pod; events:\n%s", tc.name, eventText(ctx, ns, tc.name))
			var victim string
			for _, name := range before {
				if !slices.Contains(after, name) {
					victim = name
				}
			}
			waitEvent(ctx, ns, victim, "Preempted")
			Expect(scheduledBy(ctx, ns, tc.name)).To(Equal(*tangramScheduler))
			device := results(allocatedClaim(ctx, ns, tc.name))[0].Device
			Expect(device).To(Equal(cardOf[victim]), "%s should run on the card its victim %s held", tc.name, victim)
			GinkgoWriter.Printf("  %s (%s): evicted %s, runs on %s/%s\n", tc.name, tc.template, victim, gpuNode, device)
			GinkgoWriter.Printf("    after creation: victim terminating %s, victim stopped %s, its claim gone %s, bound %s, Running %s\n",
				tl.evicted, tl.victimStopped, tl.claimGone, tl.bound, tl.running)
		}
	}, SpecTimeout(2*kubeRetryTimeout+5*time.Minute))

	It("runs a high-priority whole card and a 40Gi share created together, evicting exactly two low-priority pods", func(ctx SpecContext) {
		scenario("preemption under contention: every card of " + gpuNode + " held by a low-priority pod; a high-priority whole card and a 40Gi share created at once with " + *tangramScheduler)
		ns := newNamespace(ctx)
		low := createPriorityClass(ctx, ns+"-low", 100)
		high := createPriorityClass(ctx, ns+"-high", 1000000)
		createTemplate(ctx, ns, "whole-gpu", wholeGPUs(1))
		createTemplate(ctx, ns, "share-40gi", memoryShare("40Gi"))
		cards := len(nodeDevices(ctx, gpuNode))
		lowPods := make([]string, cards)
		for i := range lowPods {
			lowPods[i] = fmt.Sprintf("low-%d", i)
			createPod(ctx, priorityPod(ns, lowPods[i], "whole-gpu", low, ""))
		}
		for _, name := range lowPods {
			waitRunning(ctx, ns, name)
		}

		start := time.Now()
		highPods := map[string]string{"high-whole": "whole-gpu", "high-share": "share-40gi"}
		for name, template := range highPods {
			createPod(ctx, priorityPod(ns, name, template, high, *tangramScheduler))
		}
		// Both run (the issue: the share stayed Pending with no second
		// eviction). Running comes after the kubelet's prepare, which it
		// retries with backoff when the node authorizer refuses its fetch of
		// a claim of a pod its graph has not yet seen bound: waitKube, and
		// the time to bound and to Running is printed, not limited. That
		// tangram-scheduler evicted for each of them is what the Preempting
		// events below and the count of pods left check.
		bound, running := map[string]time.Duration{}, map[string]time.Duration{}
		waitKube(ctx, "high-whole and high-share Running", 200*time.Millisecond, func(g Gomega) {
			for name := range highPods {
				pod := getPod(ctx, ns, name)
				if _, ok := bound[name]; !ok && pod.Spec.NodeName != "" {
					bound[name] = time.Since(start).Round(100 * time.Millisecond)
				}
				g.Expect(pod.Status.Phase).To(Equal(corev1.PodRunning), "pod %s is %s; events:\n%s", name, pod.Status.Phase, eventText(ctx, ns, name))
				if _, ok := running[name]; !ok {
					running[name] = time.Since(start).Round(100 * time.Millisecond)
				}
			}
		})
		took := time.Since(start).Round(100 * time.Millisecond)
		left := runningOf(ctx, ns, lowPods)
		Expect(left).To(HaveLen(cards-2), "exactly two low-priority pods must be evicted")
		for name := range highPods {
			msg := waitEvent(ctx, ns, name, "Preempting", "lower-priority pod(s) on node "+gpuNode)
			GinkgoWriter.Printf("  %s (%s): %s\n", name, highPods[name], msg)
			GinkgoWriter.Printf("    after creation: bound %s, Running %s\n", bound[name], running[name])
		}
		GinkgoWriter.Printf("  both Running %s after creation; %d of %d low-priority pods left\n", took, len(left), cards)
	}, SpecTimeout(kubeRetryTimeout+5*time.Minute))

	It("evicts exactly four low-priority pods for a high-priority gang of two members with two NVLinked cards each, and both members run", func(ctx SpecContext) {
		scenario("gang preemption: every card of " + gpuNode + " held by a low-priority pod; a high-priority PodGroup of 2 members x 2 NVLinked cards with " + *tangramScheduler + " (GenericWorkload on)")
		ns := newNamespace(ctx)
		low := createPriorityClass(ctx, ns+"-low", 100)
		high := createPriorityClass(ctx, ns+"-high", 1000000)
		createTemplate(ctx, ns, "whole-gpu", wholeGPUs(1))
		createTemplate(ctx, ns, "nvlink-2", nvlinkGang(2))
		cards := len(nodeDevices(ctx, gpuNode))
		lowPods := make([]string, cards)
		for i := range lowPods {
			lowPods[i] = fmt.Sprintf("low-%d", i)
			createPod(ctx, priorityPod(ns, lowPods[i], "whole-gpu", low, ""))
		}
		for _, name := range lowPods {
			waitRunning(ctx, ns, name)
		}

		_, err := clientset.SchedulingV1beta1().PodGroups(ns).Create(ctx, &schedulingv1beta1.PodGroup{
			ObjectMeta: metav1.ObjectMeta{Name: "train"},
			Spec: schedulingv1beta1.PodGroupSpec{
				PriorityClassName: high,
				SchedulingPolicy:  schedulingv1beta1.PodGroupSchedulingPolicy{Gang: &schedulingv1beta1.GangSchedulingPolicy{MinCount: 2}},
			},
		}, metav1.CreateOptions{})
		Expect(err).NotTo(HaveOccurred(), "creating PodGroup train")
		start := time.Now()
		members := []string{"train-0", "train-1"}
		for _, name := range members {
			pod := priorityPod(ns, name, "nvlink-2", high, *tangramScheduler)
			pod.Spec.SchedulingGroup = &corev1.PodSchedulingGroup{PodGroupName: ptr.To("train")}
			createPod(ctx, pod)
		}
		// Running waits on the kubelet's prepares and their retries
		// (waitKube prints how long); the Preempting events and the count
		// of pods left below check what tangram-scheduler did.
		waitKube(ctx, "gang members train-0 and train-1 Running", 200*time.Millisecond, func(g Gomega) {
			for _, name := range members {
				pod := getPod(ctx, ns, name)
				g.Expect(pod.Status.Phase).To(Equal(corev1.PodRunning), "member %s is %s; events:\n%s", name, pod.Status.Phase, eventText(ctx, ns, name))
			}
		})
		took := time.Since(start).Round(100 * time.Millisecond)
		left := runningOf(ctx, ns, lowPods)
		Expect(left).To(HaveLen(cards-4), "exactly four low-priority pods (two NVLinked cards per member) must be evicted")
		for _, name := range members {
			msg := waitEvent(ctx, ns, name, "Preempting", "members of gang "+ns+"/train")
			GinkgoWriter.Printf("  %s: %s\n", name, msg)
		}
		GinkgoWriter.Printf("  both members Running %s after creation; %d of %d low-priority pods left\n", took, len(left), cards)
	}, SpecTimeout(kubeRetryTimeout+5*time.Minute))

	It("a gang not split by preemption: evicts a pod on its own rather than a member of a running gang, and the gang only as a whole", func(ctx SpecContext) {
		scenario("gang not split by preemption: " + gpuNode + " filled by low-priority pods on their own and, the newest, a running PodGroup of two members with disruptionMode All; high-priority pods for one card, then for all but two, with " + *tangramScheduler)
		ns := newNamespace(ctx)
		low := createPriorityClass(ctx, ns+"-low", 100)
		high := createPriorityClass(ctx, ns+"-high", 1000000)
		cards := len(nodeDevices(ctx, gpuNode))
		Expect(cards).To(BeNumerically(">=", 4), "node %s needs at least four GPUs", gpuNode)
		createTemplate(ctx, ns, "whole-gpu", wholeGPUs(1))
		createTemplate(ctx, ns, "all-but-two", wholeGPUs(int64(cards-2)))

		alone := make([]string, cards-2)
		for i := range alone {
			alone[i] = fmt.Sprintf("alone-%d", i)
			createPod(ctx, priorityPod(ns, alone[i], "whole-gpu", low, ""))
		}
		for _, name := range alone {
			waitRunning(ctx, ns, name)
		}
		// The gang's members start last: the newest pods of the lowest
		// priority, the first victims when chosen pod by pod.
		_, err := clientset.SchedulingV1beta1().PodGroups(ns).Create(ctx, &schedulingv1beta1.PodGroup{
			ObjectMeta: metav1.ObjectMeta{Name: "old"},
			Spec: schedulingv1beta1.PodGroupSpec{
				PriorityClassName: low,
				SchedulingPolicy:  schedulingv1beta1.PodGroupSchedulingPolicy{Gang: &schedulingv1beta1.GangSchedulingPolicy{MinCount: 2}},
				DisruptionMode:    &schedulingv1beta1.DisruptionMode{All: &schedulingv1beta1.AllDisruptionMode{}},
			},
		}, metav1.CreateOptions{})
		Expect(err).NotTo(HaveOccurred(), "creating PodGroup old")
		members := []string{"old-0", "old-1"}
		for _, name := range members {
			pod := priorityPod(ns, name, "whole-gpu", low, *tangramScheduler)
			pod.Spec.SchedulingGroup = &corev1.PodSchedulingGroup{PodGroupName: ptr.To("old")}
			createPod(ctx, pod)
		}
		for _, name := range members {
			waitRunning(ctx, ns, name)
		}
		GinkgoWriter.Printf("  %d pods on their own and the 2 members of gang %s/old (PriorityClass %s) hold all %d cards\n", len(alone), ns, low, cards)

		By("one card: a pod on its own goes, the gang keeps both members")
		createPod(ctx, priorityPod(ns, "urgent-one", "whole-gpu", high, *tangramScheduler))
		waitKube(ctx, "urgent-one Running", 200*time.Millisecond, func(g Gomega) {
			pod := getPod(ctx, ns, "urgent-one")
			g.Expect(pod.Status.Phase).To(Equal(corev1.PodRunning), "pod urgent-one is %s; events:\n%s", pod.Status.Phase, eventText(ctx, ns, "urgent-one"))
		})
		Expect(runningOf(ctx, ns, members)).To(Equal(members), "a gang member was evicted for one card while pods on their own could go; events:\n%s", eventText(ctx, ns, "urgent-one"))
		left := runningOf(ctx, ns, alone)
		Expect(left).To(HaveLen(len(alone)-1), "exactly one pod on its own must be evicted")
		GinkgoWriter.Printf("  urgent-one: %s\n", waitEvent(ctx, ns, "urgent-one", "Preempting"))

		By("all cards but two: the gang goes whole, with the pods on their own it needs besides")
		createPod(ctx, priorityPod(ns, "urgent-many", "all-but-two", high, *tangramScheduler))
		waitKube(ctx, "urgent-many Running", 200*time.Millisecond, func(g Gomega) {
			pod := getPod(ctx, ns, "urgent-many")
			g.Expect(pod.Status.Phase).To(Equal(corev1.PodRunning), "pod urgent-many is %s; events:\n%s", pod.Status.Phase, eventText(ctx, ns, "urgent-many"))
		})
		Expect(runningOf(ctx, ns, members)).To(BeEmpty(), "both gang members must go together; events:\n%s", eventText(ctx, ns, "urgent-many"))
		// cards-2 needed: urgent-one holds 1, the gang frees 2, so cards-4
		// of the pods on their own go and one stays.
		Expect(runningOf(ctx, ns, alone)).To(HaveLen(1), "the gang's two cards plus %d pods on their own make room; no more may go", cards-4)
		for _, name := range members {
			msg := waitEvent(ctx, ns, name, "Preempted", "with every member of gang "+ns+"/old")
			GinkgoWriter.Printf("  %s: %s\n", name, msg)
		}
		GinkgoWriter.Printf("  urgent-many: %s\n", waitEvent(ctx, ns, "urgent-many", "Preempting", "gang "+ns+"/old"))
	}, SpecTimeout(kubeRetryTimeout+6*time.Minute))
})

// createPriorityClass creates a PriorityClass that never becomes the
// default and is deleted after the spec.
func createPriorityClass(ctx context.Context, name string, value int32) string {
	_, err := clientset.SchedulingV1().PriorityClasses().Create(ctx, &schedulingv1.PriorityClass{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Value:      value,
	}, metav1.CreateOptions{})
	Expect(err).NotTo(HaveOccurred(), "creating PriorityClass %s", name)
	DeferCleanup(func(ctx SpecContext) {
		Expect(clientset.SchedulingV1().PriorityClasses().Delete(ctx, name, metav1.DeleteOptions{})).To(Succeed())
	})
	return name
}

// priorityPod is a gpu-info pod of the PriorityClass that is killed a
// second after it is evicted; an empty schedulerName means the default
// scheduler. Not 0: with no grace period the API server deletes an evicted
// pod before the kubelet has stopped it and released its devices, so its
// claim is freed and the preemptor bound while the card is still prepared
// for the victim (the kubelet plugin then refuses the preemptor's claim until
// the kubelet has unprepared the victim's, and the kubelet retries with
// backoff; the first run of this scenario measured 80 s to Running that way,
// against about a second with a grace period).
func priorityPod(ns, name, template, class, schedulerName string) *corev1.Pod {
	pod := gpuPod(ns, name, template)
	pod.Spec.PriorityClassName = class
	pod.Spec.SchedulerName = schedulerName
	grace := int64(1)
	pod.Spec.TerminationGracePeriodSeconds = &grace
	return pod
}

// runningOf lists the pods of names that exist and are not terminating.
func runningOf(ctx context.Context, ns string, names []string) []string {
	var out []string
	for _, name := range names {
		p, err := clientset.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err == nil && p.DeletionTimestamp == nil {
			out = append(out, name)
		}
	}
	return out
}

// timeline is when, after the preemptor's creation, each step of a
// preemption was first seen (polling every 100 ms).
type timeline struct {
	evicted, victimStopped, claimGone, bound, running time.Duration
}

// watchPreemption polls until the preemptor runs and records when a pod of
// candidates started terminating, when it had stopped (a terminal phase, or
// gone), when its claim was gone and when the preemptor was bound and
// running. Each step waits on Kubernetes (the kubelet stopping the victim,
// the resourceclaim controller, the kubelet's prepare and its retries):
// waitKube, and the timeline is printed, not limited.
func watchPreemption(ctx context.Context, ns, name string, candidates []string, claimOf map[string]string, start time.Time) timeline {
	var tl timeline
	var victim string
	since := func(d *time.Duration) {
		if *d == 0 {
			*d = time.Since(start).Round(100 * time.Millisecond)
		}
	}
	waitKube(ctx, "preemptor "+name+" Running", 100*time.Millisecond, func(g Gomega) {
		for _, c := range candidates {
			if victim != "" && c != victim {
				continue
			}
			p, err := clientset.CoreV1().Pods(ns).Get(ctx, c, metav1.GetOptions{})
			switch {
			case apierrors.IsNotFound(err):
				victim = c
				since(&tl.evicted)
				since(&tl.victimStopped)
			case err == nil && p.DeletionTimestamp != nil:
				victim = c
				since(&tl.evicted)
				if p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
					since(&tl.victimStopped)
				}
			}
		}
		if victim != "" && tl.claimGone == 0 {
			c, err := clientset.ResourceV1().ResourceClaims(ns).Get(ctx, claimOf[victim], metav1.GetOptions{})
			if apierrors.IsNotFound(err) || (err == nil && c.Status.Allocation == nil) {
				since(&tl.claimGone)
			}
		}
		pod := getPod(ctx, ns, name)
		if pod.Spec.NodeName != "" {
			since(&tl.bound)
		}
		g.Expect(pod.Status.Phase).To(Equal(corev1.PodRunning), "pod %s is %s; events:\n%s", name, pod.Status.Phase, eventText(ctx, ns, name))
		since(&tl.running)
	})
	return tl
}
