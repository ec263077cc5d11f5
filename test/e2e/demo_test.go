//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	gtypes "github.com/onsi/ginkgo/v2/types"
	. "github.com/onsi/gomega"
	"golang.org/x/term"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	tangramv1alpha1 "github.com/tangram-gpu/tangram/api/tangram/v1alpha1"
	"github.com/tangram-gpu/tangram/pkg/clusterview/cli"
	"github.com/tangram-gpu/tangram/pkg/clusterview/usageview"
	"github.com/tangram-gpu/tangram/pkg/device"
	"github.com/tangram-gpu/tangram/pkg/plugin/usage"
)

// The demo (label demo, `make demo`, docs/demo.md): the scenarios of
// demo/specs, applied from the very files a user reads and applies, checked
// here and narrated for a human watching. They need the Helm chart with the
// controller (its GpuConfig webhook, GpuGangs), tangram-scheduler and the
// plugin's MPS daemon pod, the way demo/run-local.sh installs it.
var (
	demoSpecDir      = flag.String("demo-specs", "", "demo specs: the directory of the demo's YAML specs (default demo/specs of this repository)")
	demoExtraNode    = flag.String("demo-extra-node", "demo-gpu-node-2", "demo specs: name of the API-only second GPU node the packing scenarios add")
	demoExtraProfile = flag.String("demo-extra-profile", "dgx-h100", "demo specs: fake GPU profile of that node (the GPU node's, so both offer the same cards)")
	demoKeep         = flag.Bool("demo-keep", false, "demo specs: leave the demo namespace and the second node for looking around afterwards")
	fakeProcessesCmd = flag.String("fake-processes-cmd", "", "demo specs: shell command that sets the processes the fake GPUs report; the scenario appends `dra-kubelet-plugin fake-processes` flags (the local cluster's is `hack/local-cluster/chart.sh fake-processes`); empty: the cards run nothing")
	demoNarrate      = flag.Bool("demo-narrate", false, "demo specs: also write the narration to stderr as it happens (demo/run-local.sh sends Ginkgo's own report to a log file)")
)

const (
	demoLabel     = "demo"
	demoNamespace = "tangram-demo" // the namespace every demo spec names
	// demoPodLabel marks the demo's pods: demo=<scenario>.
	demoPodLabel = "demo"
	// adoptionLog is what the kubelet plugin logs when it finds the node's
	// MPS daemon pod running and keeps it.
	adoptionLog = "Adopting the MPS daemon pod"
)

// ANSI styles of the narration on a terminal, as demo/lib.sh prints.
const (
	styleTitle = "\x1b[1m"
	styleDim   = "\x1b[2m"
	stylePass  = "\x1b[32m"
	styleFail  = "\x1b[31m"
	styleReset = "\x1b[0m"
)

// narrateDemo writes one piece of narration to GinkgoWriter (the suite's
// report) and, with --demo-narrate, to stderr as it happens, in the given
// style when stderr is a terminal.
func narrateDemo(style, text string) {
	fmt.Fprint(GinkgoWriter, text)
	if !*demoNarrate {
		return
	}
	if style != "" && term.IsTerminal(int(os.Stderr.Fd())) {
		lead := len(text) - len(strings.TrimLeft(text, "\n "))
		body := strings.TrimRight(text[lead:], "\n")
		text = text[:lead] + style + body + styleReset + text[lead+len(body):]
	}
	fmt.Fprint(os.Stderr, text)
}

func demoTitle(format string, args ...any) {
	narrateDemo(styleTitle, fmt.Sprintf("\n━━ %s\n", fmt.Sprintf(format, args...)))
}

func demoSay(format string, args ...any) {
	for _, l := range splitLines(fmt.Sprintf(format, args...)) {
		narrateDemo("", fmt.Sprintf("   %s\n", l))
	}
}

// demoOutcome is the one-line result of the current scenario, printed with
// its ✔ once the spec has passed.
var demoOutcome string

func demoPassed(format string, args ...any) { demoOutcome = fmt.Sprintf(format, args...) }

var _ = Describe("Demo", Label(demoLabel), Ordered, ContinueOnFailure, func() {
	var (
		sharesCard string // pool/device of share-a/b/c
		wholeCard  string // pool/device of the whole-card pod
		extraReady bool   // the second node is there
	)

	BeforeAll(func(ctx SpecContext) {
		if *demoSpecDir == "" {
			*demoSpecDir = filepath.Join(repoRoot(), "demo", "specs")
		}
		recreateDemoNamespace(ctx)
		applySpec(ctx, "00-namespace.yaml", allObjects)
		Eventually(func() error {
			_, err := clientset.CoreV1().ServiceAccounts(demoNamespace).Get(ctx, "default", metav1.GetOptions{})
			return err
		}).WithContext(ctx).WithTimeout(time.Minute).Should(Succeed(), "service account default in %s", demoNamespace)
	}, NodeTimeout(5*time.Minute))

	AfterAll(func(ctx SpecContext) {
		if *demoKeep {
			return
		}
		deleteSimNode(ctx, *demoExtraNode)
		deleteDemoNamespace(ctx)
	}, NodeTimeout(5*time.Minute))

	ReportAfterEach(func(r SpecReport) {
		switch {
		case r.State.Is(gtypes.SpecStatePassed):
			narrateDemo(stylePass, fmt.Sprintf("   ✔ %s\n", demoOutcome))
		case r.State.Is(gtypes.SpecStateSkipped) && r.Failure.Message == "":
			// left out by the label filter (the MIG run of demo/run-local.sh): nothing to say
		case r.State.Is(gtypes.SpecStateSkipped):
			narrateDemo(styleDim, fmt.Sprintf("   – skipped: %s\n", firstLineOf(r.Failure.Message)))
		default:
			narrateDemo(styleFail, fmt.Sprintf("   ✘ %s\n", strings.Join(headLines(r.Failure.Message, maxFailureLines), "\n     ")))
		}
		demoOutcome = ""
	})

	It("the chart's admission policy lets the plugin write only its own node's ResourceSlices", func(ctx SpecContext) {
		demoTitle("The chart's admission policy: each plugin writes only its own node's ResourceSlices")
		demoSay("as the plugin's service account on %s (dry run, the node name its bound token carries):", gpuNode)
		Expect(createSliceAs(ctx, gpuNode, gpuNode)).To(Succeed(), "the plugin on %s may not write its own node's slices", gpuNode)
		demoSay("a ResourceSlice for %s is admitted", gpuNode)
		err := createSliceAs(ctx, gpuNode, "not-"+gpuNode)
		Expect(err).To(HaveOccurred(), "the plugin on %s could write a slice of node not-%s", gpuNode, gpuNode)
		msg := err.Error()
		if _, after, ok := strings.Cut(msg, "denied request: "); ok {
			msg = after
		}
		demoSay("one for not-%s is refused: %s", gpuNode, msg)
		demoPassed("the plugin on %s may write its own slices, not another node's", gpuNode)
	}, SpecTimeout(time.Minute))

	It("gives the whole-card pod one card of its own", func(ctx SpecContext) {
		startDemoScenario("Whole card", "01-whole-card.yaml")
		applySpec(ctx, "01-whole-card.yaml", allObjects)
		waitDemoPodsReady(ctx, "whole-card", 2*time.Minute)
		held := showDemoPods(ctx, "whole-card")
		Expect(held).To(HaveLen(1), "the whole-card pod should hold exactly one device")
		Expect(held[0].share).To(BeFalse(), "the whole-card pod holds a share of %s, not the card", held[0].card)
		wholeCard = held[0].card
		demoPassed("one whole card: %s", shortCard(wholeCard))
	}, SpecTimeout(3*time.Minute))

	It("packs three memory shares onto one card", func(ctx SpecContext) {
		startDemoScenario("Memory fractions packed onto one card", "02-memory-shares.yaml")
		applyPodsOneByOne(ctx, "02-memory-shares.yaml")
		waitDemoPodsReady(ctx, "memory-shares", 2*time.Minute)
		held := showDemoPods(ctx, "memory-shares")
		Expect(held).To(HaveLen(3), "three share pods, one device each")
		cards := distinctCards(held)
		Expect(cards).To(HaveLen(1), "the three shares should sit on one card")
		Expect(cards[0]).NotTo(Equal(wholeCard), "the shares landed on the whole card's %s", wholeCard)
		sharesCard = cards[0]
		demoPassed("all three shares on %s; the other cards stay whole", shortCard(sharesCard))
	}, SpecTimeout(4*time.Minute))

	It("shows what each share uses, and the share over its size, in kubectl tangram top", func(ctx SpecContext) {
		demoTitle("What runs on the GPUs: each share's use, and one over its size")
		Expect(sharesCard).NotTo(BeEmpty(), "the memory-shares scenario placed no shares")
		if *fakeProcessesCmd == "" {
			// A kind node's PIDs are not this host's: nothing to fake there.
			demoSay("no --fake-processes-cmd: the fake cards run nothing here, so top shows them idle")
			Eventually(func(g Gomega) {
				g.Expect(tangramTop(ctx, g)).To(ContainSubstring("no GPU process"))
			}).WithContext(ctx).WithTimeout(time.Minute).WithPolling(2 * time.Second).Should(Succeed())
			demoPassed("kubectl tangram top lists the node's cards, idle")
			return
		}
		_, cardDevice, _ := strings.Cut(sharesCard, "/")
		uuid := stringAttr(nodeDevices(ctx, gpuNode)[cardDevice], device.AttrUUID)
		Expect(uuid).NotTo(BeEmpty(), "card %s has no UUID", sharesCard)
		// The fake cards report a process of each share pod, by its real
		// PID on this host, using what the table says; share-b more than
		// its 20Gi.
		used := map[string]string{"share-a": "12Gi", "share-b": "23Gi", "share-c": "2Gi"}
		sm := map[string]int{"share-a": 55, "share-b": 30, "share-c": 5}
		var args []string
		for _, pod := range []string{"share-a", "share-b", "share-c"} {
			args = append(args, fmt.Sprintf("--process %s,%d,%s,%d", uuid, podPID(demoNamespace, pod), used[pod], sm[pod]))
			demoSay("  %s uses %s and keeps %d%% of the card's SMs busy", pod, used[pod], sm[pod])
		}
		DeferCleanup(func(ctx SpecContext) { runShell(ctx, "clear the fake cards' processes", *fakeProcessesCmd) })
		runShell(ctx, "make the fake cards report the share pods' processes", *fakeProcessesCmd+" "+strings.Join(args, " "))
		statuses := getPod(ctx, demoNamespace, "share-b").Status.ResourceClaimStatuses
		Expect(statuses).To(HaveLen(1), "share-b's claim")
		claimB := *statuses[0].ResourceClaimName
		var table string
		Eventually(func(g Gomega) {
			var v usageview.View
			g.Expect(json.Unmarshal([]byte(tangramTop(ctx, g, "-o", "json")), &v)).To(Succeed())
			g.Expect(v.Nodes).To(HaveLen(1))
			var devices []usageview.Device
			for _, c := range v.Nodes[0].Cards {
				if c.UUID == uuid {
					devices = c.Devices
				}
			}
			g.Expect(devices).To(HaveLen(3), "the three shares on %s in top", cardDevice)
			g.Expect(devices[0]).To(And(HaveField("Claim", claimB), HaveField("Over", true), HaveField("SMPercent", HaveValue(Equal(30)))), "share-b, over its size, first")
			table = tangramTop(ctx, g)
		}).WithContext(ctx).WithTimeout(time.Minute).WithPolling(2 * time.Second).Should(Succeed())
		demoSay("kubectl tangram top --node %s:\n%s", gpuNode, table)
		Eventually(func(g Gomega) {
			g.Expect(eventText(ctx, demoNamespace, "share-b")).To(ContainSubstring(usage.ReasonShareExceeded))
		}).WithContext(ctx).WithTimeout(time.Minute).WithPolling(2 * time.Second).Should(Succeed())
		for _, line := range strings.Split(eventText(ctx, demoNamespace, "share-b"), "\n") {
			if strings.Contains(line, usage.ReasonShareExceeded) {
				demoSay("  share-b's event: %s", line)
			}
		}
		demoPassed("top shows each share's use of its 20Gi; share-b, over it, first and marked OVER, with a GPUShareExceeded event")
	}, SpecTimeout(3*time.Minute))

	It("keeps the MPS daemon pod and the shares when the plugin's pod is replaced", func(ctx SpecContext) {
		demoTitle("The plugin's pod is replaced; the MPS daemon pod and the shares stay")
		demoSay("The node's MPS daemon runs in a pod of its own (chart value kubeletPlugin.mps.daemon=pod),")
		demoSay("so replacing the plugin's pod must leave it, and the shares, alone.")
		var mps *corev1.Pod
		Eventually(func(g Gomega) {
			mps = mpsDaemonPod(ctx)
			g.Expect(mps.Status.Phase).To(Equal(corev1.PodRunning), "MPS daemon pod %s", mps.Name)
		}).WithContext(ctx).WithTimeout(time.Minute).WithPolling(pollEvery).Should(Succeed())
		demoSay("MPS daemon pod %s/%s (uid %s); its log: %s", mps.Namespace, mps.Name, mps.UID,
			lastLogLine(ctx, mps.Namespace, mps.Name, mps.Spec.Containers[0].Name))
		sharesBefore := demoPodStatesOf(ctx, "share-a", "share-b", "share-c")

		old := pluginPod(ctx)
		demoSay("deleting the plugin pod %s; shares before: %s", old.Name, sharesBefore)
		Expect(clientset.CoreV1().Pods(old.Namespace).Delete(ctx, old.Name, metav1.DeleteOptions{})).To(Succeed(), "deleting plugin pod %s", old.Name)
		Eventually(func() bool {
			p, err := clientset.CoreV1().Pods(old.Namespace).Get(ctx, old.Name, metav1.GetOptions{})
			return apierrors.IsNotFound(err) || (err == nil && p.UID != old.UID)
		}).WithContext(ctx).WithTimeout(90*time.Second).WithPolling(pollEvery).Should(BeTrue(), "plugin pod %s is still there after 90s", old.Name)

		var fresh *corev1.Pod
		Eventually(func(g Gomega) {
			fresh = pluginPodOrNil(ctx, g)
			g.Expect(fresh).NotTo(BeNil(), "the DaemonSet has not created a new plugin pod on %s yet", gpuNode)
			g.Expect(fresh.UID).NotTo(Equal(old.UID))
			g.Expect(fresh.Status.ContainerStatuses).NotTo(BeEmpty())
			g.Expect(fresh.Status.ContainerStatuses[0].Ready).To(BeTrue(), "new plugin pod %s is not Ready", fresh.Name)
		}).WithContext(ctx).WithTimeout(2*time.Minute).WithPolling(pollEvery).Should(Succeed(), "no Ready plugin pod replaced %s:\n%s", old.Name, describePluginPods(ctx))

		// The new plugin replays its checkpoint: the shares are accounted
		// again and the daemon pod is adopted, not recreated.
		Eventually(func() string {
			return podLogOf(ctx, fresh.Namespace, fresh.Name, fresh.Spec.Containers[0].Name)
		}).WithContext(ctx).WithTimeout(30*time.Second).WithPolling(pollEvery).Should(ContainSubstring(adoptionLog),
			"the new plugin pod %s did not log that it adopted %s", fresh.Name, mps.Name)

		now := mpsDaemonPod(ctx)
		sharesAfter := demoPodStatesOf(ctx, "share-a", "share-b", "share-c")
		demoSay("new plugin pod %s; MPS pod uid %s, %s, %d restart(s); shares after: %s",
			fresh.Name, now.UID, now.Status.Phase, restartCount(now), sharesAfter)
		Expect(now.UID).To(Equal(mps.UID), "the MPS daemon pod was recreated")
		Expect(now.Status.Phase).To(Equal(corev1.PodRunning), "MPS daemon pod %s", now.Name)
		Expect(restartCount(now)).To(BeZero(), "the MPS daemon pod's container restarted")
		Expect(sharesAfter).To(Equal(sharesBefore), "the share pods changed while the plugin was replaced")
		for name, state := range sharesAfter {
			Expect(state.Phase).To(Equal(corev1.PodRunning), "share pod %s", name)
		}
		demoPassed("%s adopted %s (same uid, 0 restarts); share-a/b/c kept running, no restarts", fresh.Name, mps.Name)
	}, SpecTimeout(5*time.Minute))

	It("allocates an NVLink pair in one claim", func(ctx SpecContext) {
		startDemoScenario("NVLink pair in one claim", "03-nvlink-pair.yaml")
		applySpec(ctx, "03-nvlink-pair.yaml", allObjects)
		waitDemoPodsReady(ctx, "nvlink-pair", 2*time.Minute)
		held := showDemoPods(ctx, "nvlink-pair")
		Expect(held).To(HaveLen(2), "one claim of two devices")
		domains := nvlinkDomains(ctx, held)
		Expect(domains).To(HaveLen(1), "the pair's NVLink domains differ")
		Expect(domains[0]).NotTo(BeEmpty(), "the pair's cards publish no NVLink domain")
		demoPassed("%s and %s share NVLink domain %s", shortCard(held[0].card), shortCard(held[1].card), domains[0])
	}, SpecTimeout(3*time.Minute))

	It("binds the PodGroup gang all together", func(ctx SpecContext) {
		startDemoScenario("PodGroup gang: all or nothing", "04-podgroup-gang.yaml")
		applySpec(ctx, "04-podgroup-gang.yaml", allObjects)
		waitDemoPodsReady(ctx, "podgroup-gang", 3*time.Minute)
		held := showDemoPods(ctx, "podgroup-gang")
		Expect(distinctCards(held)).To(HaveLen(3), "the gang members should hold three distinct cards")
		demoPassed("all three members bound together, each with its own card")
	}, SpecTimeout(4*time.Minute))

	It("refuses an invalid GpuConfig when it is applied", func(ctx SpecContext) {
		const file = "05-mistake-bad-config.yaml"
		demoTitle("A mistake: invalid GpuConfig  (%s)", file)
		describeDemoSpec(file)
		errs := tryApplySpec(ctx, file, allObjects)
		// The pod of the same file is created anyway and would wait for a
		// template that never comes.
		DeferCleanup(deleteSpec, file)
		Expect(errs).NotTo(BeEmpty(), "the API server accepted the invalid GpuConfig (is the controller's webhook running?)")
		msg := errs[0].Error()
		demoSay("kubectl apply would say:")
		for _, l := range splitLines(foldLines(msg, 96)) {
			demoSay("  %s", l)
		}
		// The API server does not read opaque parameters: only the webhook
		// says "invalid gpu.tangram.dev config".
		Expect(msg).To(ContainSubstring("invalid "+device.DriverName+" config"), "the refusal does not come from the GpuConfig webhook")
		Expect(msg).To(ContainSubstring(`sharing.mps.defaultActiveThreadPercentage: Invalid value: 150`), "the refusal does not name the field")
		_, err := clientset.ResourceV1().ResourceClaimTemplates(demoNamespace).Get(ctx, "gpu-10gi-bad-config", metav1.GetOptions{})
		Expect(apierrors.IsNotFound(err)).To(BeTrue(), "the invalid template exists: %v", err)
		demoPassed("refused when applied, by the controller's webhook; the message names the field and the valid range")
	}, SpecTimeout(2*time.Minute))

	It("adds an API-only second GPU node", func(ctx SpecContext) {
		demoTitle("A second GPU node joins: %s (API only)", *demoExtraNode)
		demoSay("a Node object without a kubelet: the free cards of fake %s, 64 CPUs, 512 GiB;", *demoExtraProfile)
		demoSay("the scheduler can place pods there, nothing ever starts them")
		createSimNode(ctx, *demoExtraNode, *demoExtraProfile, true)
		names := sortedKeys(nodeDevices(ctx, *demoExtraNode))
		Expect(names).NotTo(BeEmpty())
		demoSay("node %s publishes %s", *demoExtraNode, strings.Join(names, " "))
		extraReady = true
		demoPassed("%s publishes %d shareable GPUs", *demoExtraNode, len(names))
	}, SpecTimeout(2*time.Minute))

	It("shows the stock scheduler breaking a fresh card on the empty node", func(ctx SpecContext) {
		Expect(extraReady).To(BeTrue(), "needs the second node")
		startDemoScenario("Packing across nodes, part 1: the stock kube-scheduler", "06-packing-stock.yaml")
		applySpec(ctx, "06-packing-stock.yaml", allObjects)
		node := boundNode(ctx, demoNamespace, "next-share-stock")
		claim := allocatedClaim(ctx, demoNamespace, "next-share-stock")
		showDemoPods(ctx, "packing-stock")
		Expect(scheduledBy(ctx, demoNamespace, "next-share-stock")).To(Equal(corev1.DefaultSchedulerName))
		Expect(node).To(Equal(*demoExtraNode), "default-scheduler bound next-share-stock to %s, not to the empty node: "+
			"it spreads by CPU/memory (NodeResourcesFit LeastAllocated), so the empty node with 64 CPUs should win; if it did not, the scenario shows nothing", node)
		// It never starts on an API-only node: remove it at once, then wait
		// until its claim (and with it the share) is gone, so both schedulers
		// face the same cluster.
		forceDeletePodsOn(ctx, demoNamespace, *demoExtraNode)
		waitClaimGone(ctx, demoNamespace, string(claim.UID))
		demoSay("removed next-share-stock; its share on %s is free again", *demoExtraNode)
		demoPassed("default-scheduler bound it to %s: a fresh card broken on the empty node", node)
	}, SpecTimeout(4*time.Minute))

	It("shows tangram-scheduler packing the share next to the others", func(ctx SpecContext) {
		Expect(extraReady).To(BeTrue(), "needs the second node")
		Expect(sharesCard).NotTo(BeEmpty(), "needs the card of share-a/b/c")
		startDemoScenario("Packing across nodes, part 2: tangram-scheduler", "07-packing-tangram.yaml")
		applySpec(ctx, "07-packing-tangram.yaml", allObjects)
		waitDemoPodsReady(ctx, "packing-tangram", 2*time.Minute)
		held := showDemoPods(ctx, "packing-tangram")
		by := scheduledBy(ctx, demoNamespace, "next-share-tangram")
		Expect(by).To(Equal(*tangramScheduler), "the pod's Scheduled event must come from %s", *tangramScheduler)
		Expect(getPod(ctx, demoNamespace, "next-share-tangram").Spec.NodeName).To(Equal(gpuNode),
			"%s should pack the share onto the node whose card is already in use", by)
		Expect(held).To(HaveLen(1))
		Expect(held[0].card).To(Equal(sharesCard), "%s should pack it next to share-a/b/c", by)
		// The share's limit reaches the container: its 10Gi of that card.
		report, _ := parseReport(podLog(ctx, demoNamespace, "next-share-tangram"))
		pool, card, _ := strings.Cut(sharesCard, "/")
		uuid := stringAttr(nodeDevices(ctx, pool)[card], device.AttrUUID)
		Expect(report).To(HaveKeyWithValue("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT", fmt.Sprintf("%s=%dM", uuid, 10*1024)))
		demoPassed("%s packed it onto %s next to share-a/b/c; %s stays whole", by, shortCard(sharesCard), *demoExtraNode)
	}, SpecTimeout(4*time.Minute))

	It("runs a GpuGang: two members on NVLinked cards", func(ctx SpecContext) {
		demoTitle("The gang of 04 finishes (the demo deletes it): four cards are free for the next one")
		deleteSpec(ctx, "04-podgroup-gang.yaml")
		startDemoScenario("GpuGang: a gang in one object, run by the controller", "08-gpugang.yaml")
		// The GpuGang first; its members only once the controller has created
		// the PodGroup they name: the scheduler parks a member of a group that
		// does not exist yet.
		applySpec(ctx, "08-gpugang.yaml", withoutDemoLabel)
		Eventually(func(g Gomega) {
			g.Expect(getGangStatus(ctx, g, demoNamespace, "finetune").PodGroupName).NotTo(BeEmpty(), "the controller has not created the gang's PodGroup")
		}).WithContext(ctx).WithTimeout(time.Minute).WithPolling(pollEvery).Should(Succeed())
		applySpec(ctx, "08-gpugang.yaml", withDemoLabel)
		waitDemoPodsReady(ctx, "gpugang", 3*time.Minute)
		var status tangramv1alpha1.GpuGangStatus
		// The controller sees the members Ready through its informer.
		waitKube(ctx, "GpuGang finetune Running", pollEvery, func(g Gomega) {
			status = getGangStatus(ctx, g, demoNamespace, "finetune")
			g.Expect(status.Phase).To(Equal(tangramv1alpha1.GangRunning), "GpuGang finetune; diagnosis: %s", status.Diagnosis)
		})
		held := showDemoPods(ctx, "gpugang")
		demoSay("GpuGang finetune: %s, %d placed, %d running", status.Phase, status.Placed, status.Running)
		Expect(distinctCards(held)).To(HaveLen(4), "two members with two cards each")
		domains := nvlinkDomains(ctx, held)
		Expect(domains).To(HaveLen(1), "the gang's cards span NVLink domains %v", domains)
		demoPassed("GpuGang finetune is Running: two members, four cards, one NVLink domain")
	}, SpecTimeout(5*time.Minute))

	It("runs a share of the default class advisory, and leaves one of the hard class Pending, saying why", func(ctx SpecContext) {
		const file = "11-hard-enforcement.yaml"
		startDemoScenario("Two classes: advisory shares run, hard-only shares wait", file)
		applySpec(ctx, file, allObjects)
		DeferCleanup(deleteSpec, file)

		// shared-gpu.tangram.dev: runs, and says it is advisory.
		waitRunning(ctx, demoNamespace, "runs-advisory")
		cond := limitsEnforced(ctx, demoNamespace, "runs-advisory")
		demoSay("runs-advisory (shared-gpu.tangram.dev): Running; its claim's status.devices says LimitsEnforced=%s, reason %s:", cond.Status, cond.Reason)
		for _, l := range splitLines(foldLines(cond.Message, 96)) {
			demoSay("  %s", l)
		}
		Expect(cond.Status).To(Equal(metav1.ConditionFalse))
		Expect(cond.Reason).To(Equal("Advisory"))
		waitKube(ctx, "GPUShareNotEnforced event of runs-advisory", pollEvery, func(g Gomega) {
			g.Expect(eventText(ctx, demoNamespace, "runs-advisory")).To(ContainSubstring("GPUShareNotEnforced"), "no Warning event on the advisory share's pod")
		})

		// hard-shared-gpu.tangram.dev: Pending, and the reason names the class.
		var why string
		// The explanation needs the scheduler's attempt (and its retries).
		waitKube(ctx, "kubectl tangram describe pod/needs-hard names the hard class", pollEvery, func(g Gomega) {
			var out, errOut bytes.Buffer
			cmd := cli.NewCommand(&out)
			cmd.SetArgs([]string{"describe", "pod/needs-hard", "-n", demoNamespace, "--kubeconfig", *kubeconfig, "--color", "never"})
			cmd.SetErr(&errOut)
			g.Expect(cmd.ExecuteContext(ctx)).To(Succeed(), "kubectl tangram describe pod/needs-hard: %s", errOut.String())
			why = out.String()
			g.Expect(why).To(ContainSubstring(device.AttrShareEnforcement))
			g.Expect(why).To(ContainSubstring("class "+device.HardSharedDeviceClassName+" requires"), "the explanation does not name shareEnforcement and the hard class")
		})
		demoSay("kubectl tangram describe pod/needs-hard (hard-shared-gpu.tangram.dev):")
		for _, l := range splitLines(foldLines(why, 96)) {
			demoSay("  %s", l)
		}
		Expect(getPod(ctx, demoNamespace, "needs-hard").Status.Phase).To(Equal(corev1.PodPending))
		demoPassed("the default class's share runs, labelled advisory; the hard class's stays Pending, and the reason names the class")
	}, SpecTimeout(kubeRetryTimeout+3*time.Minute))
})

// ReportAfterSuite counts the demo's scenarios: the last line a newcomer
// watching `make demo` reads.
var _ = ReportAfterSuite("demo summary", func(r Report) {
	var pass, fail, skip int
	for _, s := range r.SpecReports {
		if s.LeafNodeType != gtypes.NodeTypeIt || !containsString(s.Labels(), demoLabel) {
			continue
		}
		switch {
		case s.State.Is(gtypes.SpecStatePassed):
			pass++
		case s.State.Is(gtypes.SpecStateSkipped | gtypes.SpecStatePending):
			skip++
		default:
			fail++
		}
	}
	// A run that left the demo out (label filter) reports its specs as
	// skipped: nothing to say then.
	if pass+fail == 0 || r.SuiteConfig.DryRun {
		return
	}
	summary := fmt.Sprintf("Demo scenarios: %d passed, %d failed", pass, fail)
	if skip > 0 {
		summary += fmt.Sprintf(", %d skipped", skip)
	}
	style := stylePass
	if fail+skip > 0 {
		style = styleFail
	}
	narrateDemo(style, "\n━━ "+summary+"\n")
})

func startDemoScenario(name, file string) {
	demoTitle("%s  (%s)", name, file)
	describeDemoSpec(file)
}

// describeDemoSpec prints the spec file's leading comment: its story.
func describeDemoSpec(file string) {
	data, err := os.ReadFile(filepath.Join(*demoSpecDir, file))
	Expect(err).NotTo(HaveOccurred(), "reading demo spec %s", file)
	for _, l := range strings.Split(string(data), "\n") {
		if !strings.HasPrefix(l, "#") {
			break
		}
		demoSay("%s", strings.TrimPrefix(strings.TrimPrefix(l, "#"), " "))
	}
}

// recreateDemoNamespace removes what an earlier demo left, so every
// scenario starts from the same cluster.
func recreateDemoNamespace(ctx context.Context) {
	if _, err := clientset.CoreV1().Namespaces().Get(ctx, demoNamespace, metav1.GetOptions{}); err == nil {
		demoSay("removing the previous demo namespace %s", demoNamespace)
		deleteDemoNamespace(ctx)
	}
	deleteSimNode(ctx, *demoExtraNode)
}

func deleteDemoNamespace(ctx context.Context) {
	// A pod bound to the API-only node would hold the namespace deletion
	// forever: no kubelet ever confirms it is gone.
	forceDeletePodsOn(ctx, demoNamespace, *demoExtraNode)
	err := clientset.CoreV1().Namespaces().Delete(ctx, demoNamespace, metav1.DeleteOptions{})
	if apierrors.IsNotFound(err) {
		return
	}
	Expect(err).NotTo(HaveOccurred(), "deleting namespace %s", demoNamespace)
	Eventually(func() bool {
		_, err := clientset.CoreV1().Namespaces().Get(ctx, demoNamespace, metav1.GetOptions{})
		return apierrors.IsNotFound(err)
	}).WithContext(ctx).WithTimeout(3*time.Minute).WithPolling(pollEvery).Should(BeTrue(), "namespace %s is still being deleted", demoNamespace)
}

// waitDemoPodsReady waits until every pod labelled demo=scenario is Ready.
func waitDemoPodsReady(ctx context.Context, scenario string, timeout time.Duration) {
	Eventually(func(g Gomega) {
		pods := demoPods(ctx, scenario)
		g.Expect(pods).NotTo(BeEmpty(), "no pod labelled %s=%s", demoPodLabel, scenario)
		for _, p := range pods {
			g.Expect(podReady(&p)).To(BeTrue(), "pod %s is %s; events:\n%s", p.Name, p.Status.Phase, eventText(ctx, p.Namespace, p.Name))
		}
	}).WithContext(ctx).WithTimeout(timeout).WithPolling(pollEvery).Should(Succeed())
}

func demoPods(ctx context.Context, scenario string) []corev1.Pod {
	list, err := clientset.CoreV1().Pods(demoNamespace).List(ctx, metav1.ListOptions{LabelSelector: demoPodLabel + "=" + scenario})
	Expect(err).NotTo(HaveOccurred(), "listing the pods of scenario %s", scenario)
	sort.Slice(list.Items, func(i, j int) bool { return list.Items[i].Name < list.Items[j].Name })
	return list.Items
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// heldDevice is one device a demo pod's claim got.
type heldDevice struct {
	pod   string
	card  string // pool/device
	share bool   // a share of the card, not all of it
}

// showDemoPods prints, per pod of the scenario, its node, each allocated device
// with its memory and compute share, and what the container was given; it
// returns the devices.
func showDemoPods(ctx context.Context, scenario string) []heldDevice {
	var held []heldDevice
	cardMemory := map[string]int64{}
	for _, p := range demoPods(ctx, scenario) {
		node := p.Spec.NodeName
		if node == "" {
			node = "<none>"
		}
		demoSay("pod %-12s node %-20s %s", p.Name, node, p.Status.Phase)
		for _, s := range p.Status.ResourceClaimStatuses {
			if s.ResourceClaimName == nil {
				continue
			}
			claim, err := clientset.ResourceV1().ResourceClaims(demoNamespace).Get(ctx, *s.ResourceClaimName, metav1.GetOptions{})
			Expect(err).NotTo(HaveOccurred(), "getting claim %s of pod %s", *s.ResourceClaimName, p.Name)
			for _, r := range results(claim) {
				card := r.Pool + "/" + r.Device
				total, ok := cardMemory[card]
				if !ok {
					total = deviceMemory(ctx, r.Pool, r.Device)
					cardMemory[card] = total
				}
				h := heldDevice{pod: p.Name, card: card}
				demoSay("  claim %-28s → %-8s %s", claim.Name, r.Device, describeShare(r, total, &h))
				held = append(held, h)
			}
		}
		if p.Status.Phase == corev1.PodRunning {
			report, _ := parseReport(podLog(ctx, p.Namespace, p.Name))
			for _, k := range []string{"NVIDIA_VISIBLE_DEVICES", "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT", "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", "TANGRAM_SHARING_BACKEND"} {
				if v, ok := report[k]; ok {
					narrateDemo(styleDim, fmt.Sprintf("     container sees %s=%s\n", k, v))
				}
			}
		}
	}
	return held
}

// describeShare says how much of the card a result holds, and notes in h
// whether that is a share.
func describeShare(r resourceapi.DeviceRequestAllocationResult, total int64, h *heldDevice) string {
	all := "whole card"
	if total > 0 {
		all += fmt.Sprintf(" (%s)", bytesString(total))
	}
	mem, ok := r.ConsumedCapacity[device.CapacityMemory]
	if !ok || mem.Value() == total {
		return all
	}
	h.share = true
	s := fmt.Sprintf("memory %s of %s", mem.String(), bytesString(total))
	if c, ok := r.ConsumedCapacity[device.CapacityCompute]; ok && !c.IsZero() {
		return s + fmt.Sprintf(", compute %s%%", c.String())
	}
	return s + ", compute time-shared"
}

func bytesString(b int64) string {
	if b%(1<<30) == 0 {
		return fmt.Sprintf("%dGi", b>>30)
	}
	return fmt.Sprintf("%dMi", b>>20)
}

// deviceMemory is a published device's memory capacity (0 when unknown).
func deviceMemory(ctx context.Context, pool, name string) int64 {
	d, ok := nodeDevices(ctx, pool)[name]
	if !ok {
		return 0
	}
	c, ok := d.Capacity[device.CapacityMemory]
	if !ok {
		return 0
	}
	return c.Value.Value()
}

func distinctCards(held []heldDevice) []string {
	set := map[string]bool{}
	for _, h := range held {
		set[h.card] = true
	}
	return sortedKeys(set)
}

// nvlinkDomains are the distinct NVLink domains of the held cards.
func nvlinkDomains(ctx context.Context, held []heldDevice) []string {
	set := map[string]bool{}
	for _, h := range held {
		pool, name, _ := strings.Cut(h.card, "/")
		set[stringAttr(nodeDevices(ctx, pool)[name], device.AttrNVLinkDomain)] = true
	}
	return sortedKeys(set)
}

func shortCard(card string) string {
	_, name, _ := strings.Cut(card, "/")
	return name
}

// demoPodState is what must not change for a running pod while the plugin is
// replaced.
type demoPodState struct {
	UID       string
	Phase     corev1.PodPhase
	Container string // the first container's ID
	Restarts  int32
}

// demoPodStates maps pod names to their states; it prints as
// "name=Phase/restarts ..." (the UIDs and container IDs are compared, not
// shown).
type demoPodStates map[string]demoPodState

func (s demoPodStates) String() string {
	var out []string
	for _, k := range sortedKeys(s) {
		out = append(out, fmt.Sprintf("%s=%s/%d", k, s[k].Phase, s[k].Restarts))
	}
	return strings.Join(out, " ")
}

func demoPodStatesOf(ctx context.Context, names ...string) demoPodStates {
	states := demoPodStates{}
	for _, n := range names {
		p := getPod(ctx, demoNamespace, n)
		st := demoPodState{UID: string(p.UID), Phase: p.Status.Phase, Restarts: restartCount(p)}
		if len(p.Status.ContainerStatuses) > 0 {
			st.Container = p.Status.ContainerStatuses[0].ContainerID
		}
		states[n] = st
	}
	return states
}

func restartCount(p *corev1.Pod) int32 {
	var n int32
	for _, c := range p.Status.ContainerStatuses {
		n += c.RestartCount
	}
	return n
}

// lastLogLine is the container's last log line without klog's header,
// cut to fit a line.
func lastLogLine(ctx context.Context, ns, name, container string) string {
	lines := splitLines(podLogOf(ctx, ns, name, container))
	l := lines[len(lines)-1]
	if _, after, ok := strings.Cut(l, "] "); ok {
		l = after
	}
	if len(l) > 100 {
		l = l[:100] + "…"
	}
	return l
}

// foldLines breaks long lines at spaces so that the narration stays readable;
// continuation lines keep the line's indentation, two deeper.
func foldLines(s string, width int) string {
	var out []string
	for _, line := range splitLines(s) {
		body := strings.TrimLeft(line, " ")
		indent := line[:len(line)-len(body)]
		prefix := indent
		for {
			room := max(width-len(prefix), 20)
			if len(body) <= room {
				out = append(out, prefix+body)
				break
			}
			cut := strings.LastIndex(body[:room], " ")
			if cut <= 0 {
				cut = room
			}
			out = append(out, prefix+body[:cut])
			body = strings.TrimLeft(body[cut:], " ")
			prefix = indent + "  "
		}
	}
	return strings.Join(out, "\n")
}

// maxFailureLines is how much of a failure the narration shows; the suite's
// report has all of it.
const maxFailureLines = 12

// headLines is the first n lines of s, and a note of how many were left out.
func headLines(s string, n int) []string {
	lines := splitLines(strings.TrimSpace(s))
	if len(lines) <= n {
		return lines
	}
	return append(lines[:n], fmt.Sprintf("… (%d more lines in the suite's report)", len(lines)-n))
}

func firstLineOf(s string) string {
	l, _, _ := strings.Cut(strings.TrimSpace(s), "\n")
	return l
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

func containsString(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// createSliceAs creates, as a dry run, an empty ResourceSlice for node
// sliceNode while impersonating the kubelet plugin's service account with a
// token bound to node pluginNode: what the chart's admission policy judges.
func createSliceAs(ctx context.Context, pluginNode, sliceNode string) error {
	client := pluginClientOn(pluginNode)
	slice := &resourceapi.ResourceSlice{
		ObjectMeta: metav1.ObjectMeta{Name: "tangram-demo-policy-check-" + sliceNode},
		Spec: resourceapi.ResourceSliceSpec{
			Driver:   device.DriverName,
			NodeName: &sliceNode,
			Pool:     resourceapi.ResourcePool{Name: sliceNode, Generation: 1, ResourceSliceCount: 1},
		},
	}
	_, err := client.ResourceV1().ResourceSlices().Create(ctx, slice, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
	return err
}
