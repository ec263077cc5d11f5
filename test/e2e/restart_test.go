//go:build e2e

package e2e

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

var _ = Describe("Plugin restart", func() {
	It("leaves running pods untouched when the plugin is killed and started again, and cleans up after them", func(ctx SpecContext) {
		scenario("restart: kill the kubelet plugin under running pods, start it again, then delete the pods")
		ns := newNamespace(ctx)
		createTemplate(ctx, ns, "one-gpu", wholeGPUs(1))
		createTemplate(ctx, ns, "share-10gi", memoryShare("10Gi"))
		pods := map[string]string{"steady-whole": "one-gpu", "steady-share": "share-10gi"}
		before := map[string]string{} // pod → container ID
		claims := map[string]string{} // pod → claim UID
		for p, tmpl := range pods {
			createPod(ctx, gpuPod(ns, p, tmpl))
		}
		for p := range pods {
			waitRunning(ctx, ns, p)
			printPodOutput(ctx, ns, p)
			before[p] = containerID(ctx, ns, p)
			claims[p] = string(allocatedClaim(ctx, ns, p).UID)
			if *cdiDir != "" {
				Expect(cdiSpecsMentioning(claims[p])).NotTo(BeEmpty(), "a running pod's claim %s has a CDI spec in %s", claims[p], *cdiDir)
			}
		}

		By("killing the plugin")
		runShell(ctx, "kill the plugin", *pluginKillCmd)
		expectUntouched(ctx, ns, before, 10*time.Second)

		By("starting the plugin again")
		runShell(ctx, "start the plugin", *pluginStartCmd)
		expectUntouched(ctx, ns, before, 10*time.Second)
		GinkgoWriter.Printf("  pods kept their containers and restart counts through the plugin restart\n")

		By("a new pod is prepared by the restarted plugin")
		createPod(ctx, gpuPod(ns, "after-restart", "one-gpu"))
		waitRunning(ctx, ns, "after-restart")
		printPodOutput(ctx, ns, "after-restart")
		claims["after-restart"] = string(allocatedClaim(ctx, ns, "after-restart").UID)

		By("deleting the pods unprepares their claims")
		for p, uid := range claims {
			deletePodAndWait(ctx, ns, p)
			waitClaimGone(ctx, ns, uid)
			if *cdiDir != "" {
				waitKube(ctx, "CDI spec of claim "+uid+" removed", time.Second, func(g Gomega) {
					g.Expect(cdiSpecsMentioning(uid)).To(BeEmpty(), "the CDI spec of claim %s must be removed once its pod is gone", uid)
				})
			}
			GinkgoWriter.Printf("  %s deleted: claim %s gone, no CDI spec left\n", p, uid)
		}
	}, SpecTimeout(15*time.Minute))
})

// containerID is the ID of the pod's only container; it changes if the
// container is restarted or recreated.
func containerID(ctx context.Context, ns, pod string) string {
	p := getPod(ctx, ns, pod)
	Expect(p.Status.ContainerStatuses).To(HaveLen(1))
	return p.Status.ContainerStatuses[0].ContainerID
}

// expectUntouched checks for a while that every pod keeps running the same
// container without restarts.
func expectUntouched(ctx context.Context, ns string, before map[string]string, d time.Duration) {
	Consistently(func(g Gomega) {
		for p, id := range before {
			pod := getPod(ctx, ns, p)
			g.Expect(pod.Status.Phase).To(Equal(corev1.PodRunning), "pod %s", p)
			g.Expect(pod.Status.ContainerStatuses).To(HaveLen(1))
			cs := pod.Status.ContainerStatuses[0]
			g.Expect(cs.ContainerID).To(Equal(id), "pod %s got a new container", p)
			g.Expect(cs.RestartCount).To(BeZero(), "pod %s restarted", p)
			g.Expect(cs.Ready).To(BeTrue(), "pod %s", p)
		}
	}).WithContext(ctx).WithTimeout(d).WithPolling(time.Second).Should(Succeed())
}

// waitClaimGone waits (waitKube) until the claim with this UID no longer
// exists (the resourceclaim controller deletes generated claims after their
// pod).
func waitClaimGone(ctx context.Context, ns, uid string) {
	waitKube(ctx, "claim "+uid+" gone", time.Second, func(g Gomega) {
		list, err := clientset.ResourceV1().ResourceClaims(ns).List(ctx, metav1.ListOptions{})
		if apierrors.IsNotFound(err) {
			return
		}
		g.Expect(err).NotTo(HaveOccurred())
		for _, c := range list.Items {
			g.Expect(string(c.UID)).NotTo(Equal(uid), "claim %s (%s) still exists; allocated: %v", c.Name, uid, c.Status.Allocation != nil)
		}
	})
}

// cdiSpecsMentioning lists the CDI spec files in --cdi-dir that name the
// claim UID (our device names start with it).
func cdiSpecsMentioning(uid string) []string {
	var found []string
	files, err := os.ReadDir(*cdiDir)
	Expect(err).NotTo(HaveOccurred(), "reading CDI directory %s", *cdiDir)
	for _, f := range files {
		if f.IsDir() {
			continue
		}
		data, err := os.ReadFile(filepath.Join(*cdiDir, f.Name()))
		if err != nil {
			continue // removed while we looked
		}
		if strings.Contains(string(data), uid) {
			found = append(found, f.Name())
		}
	}
	return found
}
