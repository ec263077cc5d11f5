//go:build e2e

package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	mocknvml "github.com/tangram-gpu/tangram/hack/mock-nvml"
	"github.com/tangram-gpu/tangram/pkg/clusterview/cli"
	"github.com/tangram-gpu/tangram/pkg/clusterview/usageview"
	"github.com/tangram-gpu/tangram/pkg/device"
	"github.com/tangram-gpu/tangram/pkg/plugin/podcgroup"
	"github.com/tangram-gpu/tangram/pkg/plugin/usage"
)

// What each share uses (issue 39), on the mock driver root: the mock
// libnvidia-ml reports processes the specs "run" on its cards, with the
// real host PIDs of the specs' pods (and of the suite itself, which runs
// in no pod); the plugin finds their pods through the host's /proc, and
// its metrics and events say what each claim uses. The driver-615 stage
// installs the chart with kubeletPlugin.usage.overShare=evict and a 2s
// interval (hack/local-cluster/test-e2e-realpath.sh); the r580 stage has
// the chart's defaults: report, every 10s. The driver-615 stage also sets
// unaccounted=evict.
var _ = Describe("GPU usage on the mock driver root", Label(realPathLabel), Ordered, func() {
	It("attributes a share's and a whole card's use to their claims, reports a process no claim accounts for, and evicts a share over its memory once its PodDisruptionBudget allows", func(ctx SpecContext) {
		scenario("driver 615, overShare and unaccounted evict: a 20Gi share using 25Gi, a whole card using 30Gi, the suite's own process and a pod without a claim on a card: metrics, kubectl tangram top, GPUShareExceeded, GPUProcessWithoutClaim; the pod without a claim evicted, the share's eviction waiting for its PDB")
		ns := newNamespace(ctx)
		createTemplate(ctx, ns, "share-20gi", memoryShare("20Gi"))
		createTemplate(ctx, ns, "whole", wholeGPUs(1))
		share := gpuPod(ns, "over", "share-20gi")
		share.Labels = map[string]string{"app": "over"}
		createPod(ctx, share)
		createPod(ctx, gpuPod(ns, "whole", "whole"))
		// A pod with no claim at all, as one that sets NVIDIA_VISIBLE_DEVICES
		// itself: its process on a card is unaccounted for.
		intruder := gpuPod(ns, "intruder", "")
		intruder.Spec.ResourceClaims = nil
		intruder.Spec.Containers[0].Resources.Claims = nil
		createPod(ctx, intruder)
		pdb := &policyv1.PodDisruptionBudget{
			ObjectMeta: metav1.ObjectMeta{Name: "keep-over", Namespace: ns},
			Spec:       policyv1.PodDisruptionBudgetSpec{MinAvailable: ptr.To(intstr.FromInt32(1)), Selector: &metav1.LabelSelector{MatchLabels: share.Labels}},
		}
		_, err := clientset.PolicyV1().PodDisruptionBudgets(ns).Create(ctx, pdb, metav1.CreateOptions{})
		Expect(err).NotTo(HaveOccurred())
		waitRunning(ctx, ns, "over")
		waitRunning(ctx, ns, "whole")
		waitPodRunning(ctx, ns, "intruder")
		shareCard, shareClaim := claimCard(ctx, ns, "over")
		wholeCard, wholeClaim := claimCard(ctx, ns, "whole")
		strayCard := otherCard(ctx, shareCard, wholeCard)

		nvml := mocknvml.State{Dir: *mockNVMLStateDir}
		DeferCleanup(func() { Expect(nvml.RunProcesses(nil)).To(Succeed()) })
		suitePID := os.Getpid()
		Expect(nvml.RunProcesses([]mocknvml.Process{
			{Card: shareCard, PID: podPID(ns, "over"), UsedBytes: 25 << 30, GPUInstance: -1, MPSClient: true},
			{Card: wholeCard, PID: podPID(ns, "whole"), UsedBytes: 30 << 30, GPUInstance: -1},
			{Card: strayCard, PID: suitePID, UsedBytes: 1 << 30, GPUInstance: -1},
			{Card: strayCard, PID: podPID(ns, "intruder"), UsedBytes: 2 << 30, GPUInstance: -1},
		})).To(Succeed())
		// The share's process keeps 40% of its card's SMs busy; the whole
		// card's none (NVML gives no sample for it: 0).
		DeferCleanup(func() { Expect(nvml.NoUtilization()).To(Succeed()) })
		Expect(nvml.SetUtilization([]mocknvml.Sample{{Card: shareCard, PID: podPID(ns, "over"), SM: 40, Mem: 20}})).To(Succeed())

		waitKube(ctx, "usage metrics of both claims", pollEvery, func(g Gomega) {
			m := pluginMetrics(ctx, g)
			g.Expect(m.value("tangram_gpu_claim_memory_used_bytes", "namespace", ns, "claim", shareClaim)).To(Equal(float64(25<<30)), "share's use")
			g.Expect(m.value("tangram_gpu_claim_memory_allowed_bytes", "namespace", ns, "claim", shareClaim)).To(Equal(float64(20<<30)), "share's size")
			g.Expect(m.value("tangram_gpu_claim_memory_over", "namespace", ns, "claim", shareClaim)).To(Equal(1.0), "share over")
			g.Expect(m.value("tangram_gpu_claim_memory_used_bytes", "namespace", ns, "claim", wholeClaim)).To(Equal(float64(30<<30)), "whole card's use")
			g.Expect(m.value("tangram_gpu_claim_sm_utilization_percent", "namespace", ns, "claim", shareClaim)).To(Equal(40.0), "share's SMs")
			g.Expect(m.value("tangram_gpu_claim_sm_utilization_percent", "namespace", ns, "claim", wholeClaim)).To(Equal(0.0), "whole card's SMs")
			g.Expect(m.value("tangram_gpu_unaccounted_processes", "uuid", strayCard)).To(BeNumerically(">=", 2), "the suite's and the intruder's processes on %s", strayCard)
			g.Expect(m.value("tangram_gpu_card_memory_used_bytes", "uuid", wholeCard)).To(BeNumerically(">=", float64(30<<30)))
		})
		waitKube(ctx, "kubectl tangram top shows both claims on their cards and the unaccounted process", pollEvery, func(g Gomega) {
			var v usageview.View
			g.Expect(json.Unmarshal([]byte(tangramTop(ctx, g, "-o", "json")), &v)).To(Succeed())
			g.Expect(v.Nodes).To(HaveLen(1))
			g.Expect(v.Nodes[0].Error).To(BeEmpty())
			byUUID := map[string]usageview.Card{}
			for _, c := range v.Nodes[0].Cards {
				byUUID[c.UUID] = c
			}
			g.Expect(byUUID[shareCard].Devices).To(ContainElement(And(HaveField("Claim", shareClaim), HaveField("Over", true), HaveField("UsedBytes", int64(25<<30)))))
			g.Expect(byUUID[wholeCard].Devices).To(ContainElement(And(HaveField("Claim", wholeClaim), HaveField("UsedBytes", int64(30<<30)))))
			g.Expect(byUUID[strayCard].UnaccountedProcesses).To(BeNumerically(">=", 1))
		})
		GinkgoWriter.Printf("  kubectl tangram top --node %s:\n%s", gpuNode, tangramTop(ctx, Default))
		waitKube(ctx, "GPUShareExceeded and a blocked eviction on pod over", pollEvery, func(g Gomega) {
			events := eventText(ctx, ns, "over")
			g.Expect(events).To(ContainSubstring(usage.ReasonShareExceeded + ": claim " + ns + "/" + shareClaim + " uses 25.0GiB of GPU memory"))
			g.Expect(events).To(ContainSubstring(usage.ReasonEvictionBlocked))
		})
		waitKube(ctx, "GPUProcessWithoutClaim on the node", pollEvery, func(g Gomega) {
			g.Expect(nodeEventText(ctx, usage.ReasonUnaccounted)).To(ContainSubstring(fmt.Sprintf("process %d outside any pod uses GPU %s", suitePID, strayCard)))
		})
		// unaccounted=evict: the intruder goes (no budget holds it).
		waitKube(ctx, "GPUProcessWithoutClaim on pod intruder, and its eviction", pollEvery, func(g Gomega) {
			events := eventText(ctx, ns, "intruder")
			g.Expect(events).To(ContainSubstring(usage.ReasonUnaccounted + ": process "))
			g.Expect(events).To(ContainSubstring(usage.ReasonEvicted + ": evicted: process "))
			pod, err := clientset.CoreV1().Pods(ns).Get(ctx, "intruder", metav1.GetOptions{})
			if !apierrors.IsNotFound(err) {
				g.Expect(err).NotTo(HaveOccurred())
				g.Expect(pod.DeletionTimestamp).NotTo(BeNil(), "pod intruder still runs")
			}
		})
		GinkgoWriter.Printf("  pod over's events:\n%s", eventText(ctx, ns, "over"))
		// The budget holds the pod: still running a few rounds later.
		Consistently(func(g Gomega) {
			g.Expect(getPod(ctx, ns, "over").DeletionTimestamp).To(BeNil(), "pod over evicted despite its PodDisruptionBudget")
		}).WithContext(ctx).WithTimeout(6 * time.Second).WithPolling(time.Second).Should(Succeed())

		Expect(clientset.PolicyV1().PodDisruptionBudgets(ns).Delete(ctx, pdb.Name, metav1.DeleteOptions{})).To(Succeed())
		waitKube(ctx, "pod over evicted once its budget is gone", pollEvery, func(g Gomega) {
			pod, err := clientset.CoreV1().Pods(ns).Get(ctx, "over", metav1.GetOptions{})
			if !apierrors.IsNotFound(err) {
				g.Expect(err).NotTo(HaveOccurred())
				g.Expect(pod.DeletionTimestamp).NotTo(BeNil(), "pod over still runs")
			}
			g.Expect(eventText(ctx, ns, "over")).To(ContainSubstring(usage.ReasonEvicted))
		})
		// A whole card is the pod's to use: never over, never evicted.
		whole := getPod(ctx, ns, "whole")
		Expect(whole.DeletionTimestamp).To(BeNil())
		Expect(eventText(ctx, ns, "whole")).NotTo(ContainSubstring(usage.ReasonShareExceeded))
	}, SpecTimeout(5*time.Minute))
})

// Out of the box on r580 (report): the event and the metric, no eviction.
var _ = Describe("GPU usage on driver r580", Label(realPathLabel, r580Label), Ordered, func() {
	It("tells a share over its memory with an event and a metric, and leaves its pod running", func(ctx SpecContext) {
		scenario("r580, chart defaults (overShare=report): a 20Gi share using 22Gi gets GPUShareExceeded on its pod and the over metric; it keeps running")
		ns := newNamespace(ctx)
		createTemplate(ctx, ns, "share-20gi", memoryShare("20Gi"))
		createPod(ctx, gpuPod(ns, "over", "share-20gi"))
		waitRunning(ctx, ns, "over")
		card, claim := claimCard(ctx, ns, "over")
		nvml := mocknvml.State{Dir: *mockNVMLStateDir}
		DeferCleanup(func() { Expect(nvml.RunProcesses(nil)).To(Succeed()) })
		Expect(nvml.RunProcesses([]mocknvml.Process{{Card: card, PID: podPID(ns, "over"), UsedBytes: 22 << 30, GPUInstance: -1}})).To(Succeed())
		waitKube(ctx, "GPUShareExceeded on pod over", pollEvery, func(g Gomega) {
			g.Expect(eventText(ctx, ns, "over")).To(ContainSubstring(usage.ReasonShareExceeded + ": claim " + ns + "/" + claim + " uses 22.0GiB of GPU memory"))
			g.Expect(pluginMetrics(ctx, g).value("tangram_gpu_claim_memory_over", "namespace", ns, "claim", claim)).To(Equal(1.0))
		})
		Consistently(func(g Gomega) {
			g.Expect(getPod(ctx, ns, "over").DeletionTimestamp).To(BeNil(), "report must not evict")
		}).WithContext(ctx).WithTimeout(12 * time.Second).WithPolling(2 * time.Second).Should(Succeed())
		Expect(eventText(ctx, ns, "over")).NotTo(ContainSubstring(usage.ReasonEvicted))
	}, SpecTimeout(4*time.Minute))
})

// claimCard is the UUID of the card the pod's claim got, and the claim's name.
func claimCard(ctx context.Context, ns, pod string) (uuid, claim string) {
	c := allocatedClaim(ctx, ns, pod)
	res := results(c)
	Expect(res).To(HaveLen(1), "claim of pod %s", pod)
	d, ok := nodeDevices(ctx, gpuNode)[res[0].Device]
	Expect(ok).To(BeTrue(), "device %s of pod %s is not published", res[0].Device, pod)
	uuid = stringAttr(d, device.AttrUUID)
	Expect(uuid).NotTo(BeEmpty())
	return uuid, c.Name
}

// otherCard is a card of the node that is none of used.
func otherCard(ctx context.Context, used ...string) string {
	for _, d := range nodeDevices(ctx, gpuNode) {
		if uuid := stringAttr(d, device.AttrUUID); uuid != "" && !strings.Contains(strings.Join(used, ","), uuid) {
			return uuid
		}
	}
	Fail("the GPU node has no card besides " + strings.Join(used, ", "))
	return ""
}

// podPID is a host PID of one of the pod's processes, found as the
// plugin finds them: through each process's cgroup.
func podPID(ns, name string) int {
	uid := string(getPod(context.Background(), ns, name).UID)
	entries, err := os.ReadDir("/proc")
	Expect(err).NotTo(HaveOccurred())
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		c, err := podcgroup.Read("/proc", pid)
		if err != nil {
			continue
		}
		if pod, ok := c.PodOf(); ok && pod == uid {
			return pid
		}
	}
	Fail(fmt.Sprintf("no process of pod %s/%s (UID %s) on this host", ns, name, uid))
	return 0
}

// tangramTop runs kubectl tangram top on the GPU node with args.
func tangramTop(ctx context.Context, g Gomega, args ...string) string {
	var out, errOut bytes.Buffer
	cmd := cli.NewCommand(&out)
	cmd.SetArgs(append([]string{"top", "--node", gpuNode, "--plugin-namespace", *releaseNamespace, "--kubeconfig", *kubeconfig}, args...))
	cmd.SetErr(&errOut)
	g.Expect(cmd.ExecuteContext(ctx)).To(Succeed(), "kubectl tangram top: %s", errOut.String())
	return out.String()
}

// nodeEventText is the GPU node's events of one reason, one per line.
func nodeEventText(ctx context.Context, reason string) string {
	return objectEventText(ctx, metav1.NamespaceDefault, fields.Set{"involvedObject.kind": "Node", "involvedObject.name": gpuNode, "reason": reason})
}

// metricsText is one scrape of the plugin's /metrics.
type metricsText string

// pluginMetrics scrapes the GPU node's plugin pod through the API
// server's pod proxy (as kubectl tangram top reads it).
func pluginMetrics(ctx context.Context, g Gomega) metricsText {
	pod := pluginPod(ctx)
	port, err := cli.MetricsPort(pod)
	g.Expect(err).NotTo(HaveOccurred(), "plugin pod %s", pod.Name)
	raw, err := clientset.CoreV1().Pods(pod.Namespace).ProxyGet("http", pod.Name, port, "/metrics", nil).DoRaw(ctx)
	g.Expect(err).NotTo(HaveOccurred(), "scraping plugin pod %s", pod.Name)
	return metricsText(raw)
}

// value is the sample of metric name whose labels include every
// label=value pair given; -1 when there is none.
func (m metricsText) value(name string, labels ...string) float64 {
	sc := bufio.NewScanner(strings.NewReader(string(m)))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, name+"{") {
			continue
		}
		end := strings.LastIndex(line, "}")
		if end < 0 {
			continue
		}
		set, match := line[len(name)+1:end], true
		for i := 0; i+1 < len(labels); i += 2 {
			if !strings.Contains(set, labels[i]+"=\""+labels[i+1]+"\"") {
				match = false
			}
		}
		if !match {
			continue
		}
		v, err := strconv.ParseFloat(strings.TrimSpace(line[end+1:]), 64)
		if err == nil {
			return v
		}
	}
	return -1
}
