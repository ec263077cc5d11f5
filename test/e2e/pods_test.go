//go:build e2e

package e2e

import (
	"bufio"
	"context"
	"fmt"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/utils/ptr"
)

const (
	claimName    = "gpu" // the pod-level claim name every test pod uses
	pollEvery    = time.Second
	gpuInfoEnd   = "gpu-info: end"
	gpuInfoBegin = "gpu-info: begin"
)

// newNamespace creates a namespace for one scenario and deletes it after,
// waiting until its pods and claims are gone so the next scenario starts
// with free cards: a pod leaves the API server only after the kubelet
// unprepared its claims, and a claim only once it is deallocated. The
// namespace itself is not waited for: the namespace controller removes it
// seconds later, after a sweep of every other kind, which frees nothing the
// next scenario needs (it cost 6 to 13 s a spec, issue 43) and no scenario
// reuses a name (GenerateName).
func newNamespace(ctx context.Context) string {
	ns, err := clientset.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "tangram-e2e-"},
	}, metav1.CreateOptions{})
	Expect(err).NotTo(HaveOccurred(), "creating a namespace")
	name := ns.Name
	DeferCleanup(func(ctx SpecContext) {
		forceDeletePodsOn(ctx, name, simNode)
		Expect(clientset.CoreV1().Namespaces().Delete(ctx, name, metav1.DeleteOptions{})).To(Succeed())
		waitKube(ctx, "pods and claims of namespace "+name+" gone", pollEvery, func(g Gomega) {
			pods, err := clientset.CoreV1().Pods(name).List(ctx, metav1.ListOptions{})
			g.Expect(err).NotTo(HaveOccurred(), "listing the pods of namespace %s", name)
			g.Expect(pods.Items).To(BeEmpty(), "pods of namespace %s still exist", name)
			claims, err := clientset.ResourceV1().ResourceClaims(name).List(ctx, metav1.ListOptions{})
			g.Expect(err).NotTo(HaveOccurred(), "listing the claims of namespace %s", name)
			g.Expect(claims.Items).To(BeEmpty(), "claims of namespace %s still exist", name)
		})
	}, NodeTimeout(kubeRetryTimeout+time.Minute))
	// Pods are rejected until the service account controller made "default".
	waitKube(ctx, "service account default in "+name, 200*time.Millisecond, func(g Gomega) {
		_, err := clientset.CoreV1().ServiceAccounts(name).Get(ctx, "default", metav1.GetOptions{})
		g.Expect(err).NotTo(HaveOccurred(), "service account default in %s", name)
	})
	GinkgoWriter.Printf("  namespace %s\n", name)
	return name
}

// createTemplate creates a ResourceClaimTemplate with one request.
func createTemplate(ctx context.Context, ns, name string, spec resourceapi.DeviceClaim) {
	_, err := clientset.ResourceV1().ResourceClaimTemplates(ns).Create(ctx, &resourceapi.ResourceClaimTemplate{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       resourceapi.ResourceClaimTemplateSpec{Spec: resourceapi.ResourceClaimSpec{Devices: spec}},
	}, metav1.CreateOptions{})
	Expect(err).NotTo(HaveOccurred(), "creating ResourceClaimTemplate %s/%s", ns, name)
}

// gpuPod is a gpu-info pod whose container uses the claim made from
// template, on the GPU node.
func gpuPod(ns, name, template string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: corev1.PodSpec{
			NodeSelector:                 map[string]string{corev1.LabelHostname: gpuNode},
			AutomountServiceAccountToken: ptr.To(false),
			// Locked down, as the chart requires of a strict class's shares
			// (the realpath cluster's shared class is strict); the workload
			// needs no root anyway. rootPod undoes it.
			SecurityContext:               &corev1.PodSecurityContext{RunAsNonRoot: ptr.To(true), RunAsUser: ptr.To[int64](65534)},
			TerminationGracePeriodSeconds: ptr.To[int64](5),
			RestartPolicy:                 corev1.RestartPolicyNever,
			ResourceClaims:                []corev1.PodResourceClaim{{Name: claimName, ResourceClaimTemplateName: ptr.To(template)}},
			Containers: []corev1.Container{{
				Name:            "gpu-info",
				Image:           *workloadImage,
				ImagePullPolicy: corev1.PullIfNotPresent,
				Resources:       corev1.ResourceRequirements{Claims: []corev1.ResourceClaim{{Name: claimName}}},
				SecurityContext: &corev1.SecurityContext{AllowPrivilegeEscalation: ptr.To(false),
					Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}},
			}},
		},
	}
}

// rootPod is gpuPod as most CUDA images run it: as root, no security
// context at all.
func rootPod(ns, name, template string) *corev1.Pod {
	p := gpuPod(ns, name, template)
	p.Spec.SecurityContext = nil
	p.Spec.Containers[0].SecurityContext = nil
	return p
}

func createPod(ctx context.Context, pod *corev1.Pod) *corev1.Pod {
	created, err := clientset.CoreV1().Pods(pod.Namespace).Create(ctx, pod, metav1.CreateOptions{})
	Expect(err).NotTo(HaveOccurred(), "creating pod %s/%s", pod.Namespace, pod.Name)
	return created
}

func getPod(ctx context.Context, ns, name string) *corev1.Pod {
	pod, err := clientset.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
	Expect(err).NotTo(HaveOccurred(), "getting pod %s/%s", ns, name)
	return pod
}

// waitRunning waits until the pod runs and has printed its report, and
// returns the report. Running waits on the scheduler and the kubelet, and
// their retries: waitKube, which prints how long it took. On timeout the
// failure shows the pod's events.
func waitRunning(ctx context.Context, ns, name string) map[string]string {
	waitPodRunning(ctx, ns, name)
	var report map[string]string
	Eventually(func(g Gomega) {
		var complete bool
		report, complete = parseReport(podLog(ctx, ns, name))
		g.Expect(complete).To(BeTrue(), "pod %s has not printed its full report yet", name)
	}).WithContext(ctx).WithTimeout(time.Minute).WithPolling(pollEvery).Should(Succeed())
	return report
}

// waitPodRunning waits (waitKube) until the pod's phase is Running and
// returns how long that took.
func waitPodRunning(ctx context.Context, ns, name string) time.Duration {
	return waitKube(ctx, "pod "+name+" Running", pollEvery, func(g Gomega) {
		pod := getPod(ctx, ns, name)
		g.Expect(pod.Status.Phase).To(Equal(corev1.PodRunning), "pod %s is %s; events:\n%s", name, pod.Status.Phase, eventText(ctx, ns, name))
	})
}

func podLog(ctx context.Context, ns, name string) string { return podLogOf(ctx, ns, name, "") }

// podLogOf is the log of one container of the pod ("": its only one), or
// "" when it cannot be read.
func podLogOf(ctx context.Context, ns, name, container string) string {
	raw, err := clientset.CoreV1().Pods(ns).GetLogs(name, &corev1.PodLogOptions{Container: container}).DoRaw(ctx)
	if err != nil {
		return ""
	}
	return string(raw)
}

// parseReport reads gpu-info's KEY=VALUE lines; complete says the end
// marker was seen.
func parseReport(log string) (map[string]string, bool) {
	report := map[string]string{}
	in := false
	sc := bufio.NewScanner(strings.NewReader(log))
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == gpuInfoBegin:
			in = true
		case line == gpuInfoEnd:
			return report, in
		case in:
			if k, v, ok := strings.Cut(line, "="); ok {
				report[k] = v
			}
		}
	}
	return report, false
}

// printPodOutput shows what a pod printed, as the scenario's evidence.
func printPodOutput(ctx context.Context, ns, name string) {
	pod := getPod(ctx, ns, name)
	GinkgoWriter.Printf("  pod %s (node %s, %s) printed:\n", name, pod.Spec.NodeName, pod.Status.Phase)
	for _, l := range strings.Split(strings.TrimRight(podLog(ctx, ns, name), "\n"), "\n") {
		GinkgoWriter.Printf("    | %s\n", l)
	}
}

// eventText lists a pod's events, oldest first, one per line.
func eventText(ctx context.Context, ns, pod string) string {
	return objectEventText(ctx, ns, fields.Set{"involvedObject.kind": "Pod", "involvedObject.name": pod})
}

// objectEventText is the events in ns whose fields match, one per line.
func objectEventText(ctx context.Context, ns string, match fields.Set) string {
	list, err := clientset.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: fields.SelectorFromSet(match).String()})
	if err != nil {
		return fmt.Sprintf("(listing events failed: %v)", err)
	}
	var b strings.Builder
	for _, e := range list.Items {
		fmt.Fprintf(&b, "%s %s: %s\n", e.Type, e.Reason, e.Message)
	}
	return b.String()
}

// waitEvent waits for an event of the pod with the given reason whose
// message contains every one of the given substrings, and returns it.
func waitEvent(ctx context.Context, ns, pod, reason string, contains ...string) string {
	var found string
	waitKube(ctx, fmt.Sprintf("event %s of pod %s", reason, pod), pollEvery, func(g Gomega) {
		list, err := clientset.CoreV1().Events(ns).List(ctx, metav1.ListOptions{
			FieldSelector: fields.AndSelectors(
				fields.OneTermEqualSelector("involvedObject.kind", "Pod"),
				fields.OneTermEqualSelector("involvedObject.name", pod),
				fields.OneTermEqualSelector("reason", reason),
			).String(),
		})
		g.Expect(err).NotTo(HaveOccurred())
		for _, e := range list.Items {
			ok := true
			for _, c := range contains {
				ok = ok && strings.Contains(e.Message, c)
			}
			if ok {
				found = e.Message
				return
			}
		}
		g.Expect(found).NotTo(BeEmpty(), "no %s event of pod %s mentions %q; events so far:\n%s", reason, pod, contains, eventText(ctx, ns, pod))
	})
	return found
}

// deletePodAndWait deletes a pod and waits until the API no longer has it.
func deletePodAndWait(ctx context.Context, ns, name string) {
	err := clientset.CoreV1().Pods(ns).Delete(ctx, name, metav1.DeleteOptions{})
	Expect(err).NotTo(HaveOccurred(), "deleting pod %s/%s", ns, name)
	waitKube(ctx, "pod "+name+" deleted", pollEvery, func(g Gomega) {
		_, err := clientset.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "pod %s/%s is still there", ns, name)
	})
}

func splitLines(s string) []string {
	return strings.Split(strings.TrimRight(s, "\n"), "\n")
}

// boundNode waits until the pod is bound and returns its node.
func boundNode(ctx context.Context, ns, name string) string {
	var node string
	waitKube(ctx, "pod "+name+" bound", pollEvery, func(g Gomega) {
		node = getPod(ctx, ns, name).Spec.NodeName
		g.Expect(node).NotTo(BeEmpty(), "pod %s is not bound yet (schedulerName %q: is that scheduler running? the chart's scheduler.enabled, as hack/local-cluster/chart.sh installs it); events:\n%s",
			name, getPod(ctx, ns, name).Spec.SchedulerName, eventText(ctx, ns, name))
	})
	return node
}

// scheduledBy names the scheduler that reported the pod's Scheduled event.
func scheduledBy(ctx context.Context, ns, pod string) string {
	var by string
	waitKube(ctx, "Scheduled event of pod "+pod, pollEvery, func(g Gomega) {
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
	})
	return by
}
