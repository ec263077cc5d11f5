//go:build e2e

package e2e

import (
	"context"
	"flag"
	"fmt"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/utils/ptr"

	"github.com/tangram-gpu/tangram/internal/reporoot"
)

var helmRelease = flag.String("helm-release", "tangram", "upgrade spec: the Helm release (in --release-namespace) whose kubelet plugin it upgrades with `helm upgrade --reuse-values`")

// The upgrade runs where the chart is installed: the realpath stage
// (`make test-e2e-realpath`), which passes --helm.
var _ = Describe("Plugin upgrade", Label(realPathLabel, "upgrade"), func() {
	It("rolls the plugin with helm upgrade while a whole card and a share run: the new pod takes over, no running pod notices", func(ctx SpecContext) {
		scenario("helm upgrade of the kubelet plugin under a whole-card pod and a share")
		ns := newNamespace(ctx)
		createTemplate(ctx, ns, "one-gpu", wholeGPUs(1))
		createTemplate(ctx, ns, "share-10gi", memoryShare("10Gi"))
		createPod(ctx, gpuPod(ns, "whole", "one-gpu"))
		createPod(ctx, gpuPod(ns, "share", "share-10gi"))
		waitRunning(ctx, ns, "whole")
		waitRunning(ctx, ns, "share")
		before := map[string]string{"whole": containerID(ctx, ns, "whole"), "share": containerID(ctx, ns, "share")}
		wholeClaim := allocatedClaim(ctx, ns, "whole")
		daemon := mpsDaemonPod(ctx)
		old := pluginPod(ctx)

		By("helm upgrade with a changed pod annotation, watching the node's plugin pods")
		overlap := watchPluginOverlap(ctx, old.UID)
		started := time.Now()
		chart := filepath.Join(repoRoot(), "deployments", "helm", "tangram")
		args := []string{"upgrade", *helmRelease, chart,
			"--namespace", *releaseNamespace, "--reuse-values", "--wait", "--timeout", "3m",
			"--set-string", "kubeletPlugin.podAnnotations.e2e\\.tangram\\.dev/upgraded-at=" + strconv.FormatInt(started.UnixNano(), 10)}
		if *kubeconfig != "" {
			args = append(args, "--kubeconfig", *kubeconfig)
		}
		cmd := exec.CommandContext(ctx, *helmBinary, args...)
		out, err := cmd.CombinedOutput()
		Expect(err).NotTo(HaveOccurred(), "helm upgrade: %s\nplugin pods on %s:\n%s", out, gpuNode, describePluginPods(ctx))

		var fresh *corev1.Pod
		Eventually(func(g Gomega) {
			fresh = pluginPodOrNil(ctx, g)
			g.Expect(fresh).NotTo(BeNil(), "no plugin pod on %s", gpuNode)
			g.Expect(fresh.UID).NotTo(Equal(old.UID), "the old plugin pod is still the live one")
			g.Expect(fresh.Status.ContainerStatuses).NotTo(BeEmpty())
			g.Expect(fresh.Status.ContainerStatuses[0].Ready).To(BeTrue(), "the new plugin pod is not ready")
			_, err := clientset.CoreV1().Pods(old.Namespace).Get(ctx, old.Name, metav1.GetOptions{})
			g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "the old plugin pod %s is still there (err %v)", old.Name, err)
		}).WithContext(ctx).WithTimeout(2 * time.Minute).WithPolling(pollEvery).Should(Succeed())
		rolled := time.Since(started)
		Expect(overlap()).To(BeTrue(), "the new plugin pod was never ready while the old one still ran: the upgrade did not surge")

		expectUntouched(ctx, ns, before, 10*time.Second)
		now := mpsDaemonPod(ctx)
		Expect(now.UID).To(Equal(daemon.UID), "the MPS daemon pod must be adopted across the upgrade, not replaced")
		Expect(now.Status.ContainerStatuses).NotTo(BeEmpty())
		Expect(now.Status.ContainerStatuses[0].RestartCount).To(BeZero(), "the MPS daemon restarted")

		By("the new plugin prepares a new share and unprepares a claim the old one prepared")
		createPod(ctx, gpuPod(ns, "share-after", "share-10gi"))
		waitRunning(ctx, ns, "share-after")
		Expect(clientset.CoreV1().Pods(ns).Delete(ctx, "whole", metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)})).To(Succeed())
		waitClaimGone(ctx, ns, string(wholeClaim.UID))
		waitKube(ctx, "the old plugin's CDI spec of the deleted pod's claim removed", pollEvery, func(g Gomega) {
			g.Expect(cdiSpecsMentioning(string(wholeClaim.UID))).To(BeEmpty(), "the old plugin's CDI spec of the deleted pod's claim")
		})
		expectUntouched(ctx, ns, map[string]string{"share": before["share"]}, 2*time.Second)
		GinkgoWriter.Printf("  plugin pod %s replaced by %s in %s, side by side for a while; containers %v kept; MPS daemon pod %s kept; a new share ran\n",
			old.Name, fresh.Name, rolled.Round(time.Second), before, daemon.Name)
	}, SpecTimeout(8*time.Minute))
})

// watchPluginOverlap watches the GPU node's plugin pods and returns a
// function that reports whether a plugin pod other than old was ready
// while old was not yet being deleted: the surge the chart's update
// strategy asks for. The watch ends with ctx.
func watchPluginOverlap(ctx context.Context, old types.UID) func() bool {
	w, err := clientset.CoreV1().Pods(*releaseNamespace).Watch(ctx, metav1.ListOptions{
		LabelSelector: pluginComponentLabel,
		FieldSelector: "spec.nodeName=" + gpuNode,
	})
	Expect(err).NotTo(HaveOccurred(), "watching plugin pods")
	DeferCleanup(w.Stop)
	var mu sync.Mutex
	seen := false
	go func() {
		oldLive, newReady := true, false
		for ev := range w.ResultChan() {
			pod, ok := ev.Object.(*corev1.Pod)
			if !ok {
				continue
			}
			switch {
			case pod.UID == old:
				oldLive = ev.Type != watch.Deleted && pod.DeletionTimestamp == nil
			case ev.Type != watch.Deleted && pod.DeletionTimestamp == nil:
				newReady = len(pod.Status.ContainerStatuses) > 0 && pod.Status.ContainerStatuses[0].Ready
			}
			if oldLive && newReady {
				mu.Lock()
				seen = true
				mu.Unlock()
			}
		}
	}()
	return func() bool {
		mu.Lock()
		defer mu.Unlock()
		return seen
	}
}

// describePluginPods says, for a failure message, what the GPU node's
// plugin pods are doing.
func describePluginPods(ctx context.Context) string {
	list, err := clientset.CoreV1().Pods(*releaseNamespace).List(ctx, metav1.ListOptions{
		LabelSelector: pluginComponentLabel,
		FieldSelector: "spec.nodeName=" + gpuNode,
	})
	if err != nil {
		return err.Error()
	}
	var b strings.Builder
	for _, p := range list.Items {
		ready := len(p.Status.ContainerStatuses) > 0 && p.Status.ContainerStatuses[0].Ready
		fmt.Fprintf(&b, "%s (%s) %s ready=%v deleting=%v; events:\n%s\n", p.Name, p.UID, p.Status.Phase, ready, p.DeletionTimestamp != nil,
			eventText(ctx, p.Namespace, p.Name))
	}
	return b.String()
}

// repoRoot is the checkout the suite runs in (go test runs it in
// test/e2e; make demo from the repository's root).
func repoRoot() string {
	root, err := reporoot.Find()
	Expect(err).NotTo(HaveOccurred())
	return root
}
