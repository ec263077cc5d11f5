//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	gtypes "github.com/onsi/ginkgo/v2/types"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	tangramv1alpha1 "github.com/tangram-gpu/tangram/api/tangram/v1alpha1"
	"github.com/tangram-gpu/tangram/pkg/clusterview/cli"
	"github.com/tangram-gpu/tangram/pkg/device"
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

// narration goes to GinkgoWriter (the suite's report) and, with
// --demo-narrate, to stderr as it happens.
func narration() io.Writer {
	if *demoNarrate {
		return io.MultiWriter(GinkgoWriter, os.Stderr)
	}
	return GinkgoWriter
}

func title(format string, args ...any) {
	fmt.Fprintf(narration(), "\n━━ %s\n", fmt.Sprintf(format, args...))
}

func say(format string, args ...any) {
	for _, l := range splitLines(fmt.Sprintf(format, args...)) {
		fmt.Fprintf(narration(), "   %s\n", l)
	}
}

// demoOutcome is the one-line result of the current scenario, printed with
// its ✔ once the spec has passed.
var demoOutcome string

func passed(format string, args ...any) { demoOutcome = fmt.Sprintf(format, args...) }

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
			fmt.Fprintf(narration(), "   ✔ %s\n", demoOutcome)
		case r.State.Is(gtypes.SpecStateSkipped):
			fmt.Fprintf(narration(), "   – skipped: %s\n", firstLine(r.Failure.Message))
		default:
			fmt.Fprintf(narration(), "   ✘ %s\n", strings.ReplaceAll(strings.TrimSpace(r.Failure.Message), "\n", "\n     "))
		}
		demoOutcome = ""
	})

	It("the chart's admission policy lets the plugin write only its own node's ResourceSlices", func(ctx SpecContext) {
		title("The chart's admission policy: each plugin writes only its own node's ResourceSlices")
		say("as the plugin's service account on %s (dry run, the node name its bound token carries):", gpuNode)
		Expect(createSliceAs(ctx, gpuNode, gpuNode)).To(Succeed(), "the plugin on %s may not write its own node's slices", gpuNode)
		say("a ResourceSlice for %s is admitted", gpuNode)
		err := createSliceAs(ctx, gpuNode, "not-"+gpuNode)
		Expect(err).To(HaveOccurred(), "the plugin on %s could write a slice of node not-%s", gpuNode, gpuNode)
		msg := err.Error()
		if _, after, ok := strings.Cut(msg, "denied request: "); ok {
			msg = after
		}
		say("one for not-%s is refused: %s", gpuNode, msg)
		passed("the plugin on %s may write its own slices, not another node's", gpuNode)
	}, SpecTimeout(time.Minute))

	It("gives the whole-card pod one card of its own", func(ctx SpecContext) {
		startScenario("Whole card", "01-whole-card.yaml")
		applySpec(ctx, "01-whole-card.yaml", allObjects)
		waitDemoPodsReady(ctx, "whole-card", 2*time.Minute)
		held := showPods(ctx, "whole-card")
		Expect(held).To(HaveLen(1), "the whole-card pod should hold exactly one device")
		Expect(held[0].share).To(BeFalse(), "the whole-card pod holds a share of %s, not the card", held[0].card)
		wholeCard = held[0].card
		passed("one whole card: %s", shortCard(wholeCard))
	}, SpecTimeout(3*time.Minute))

	It("packs three memory shares onto one card", func(ctx SpecContext) {
		startScenario("Memory fractions packed onto one card", "02-memory-shares.yaml")
		applyPodsOneByOne(ctx, "02-memory-shares.yaml")
		waitDemoPodsReady(ctx, "memory-shares", 2*time.Minute)
		held := showPods(ctx, "memory-shares")
		Expect(held).To(HaveLen(3), "three share pods, one device each")
		cards := distinctCards(held)
		Expect(cards).To(HaveLen(1), "the three shares should sit on one card")
		Expect(cards[0]).NotTo(Equal(wholeCard), "the shares landed on the whole card's %s", wholeCard)
		sharesCard = cards[0]
		passed("all three shares on %s; the other cards stay whole", shortCard(sharesCard))
	}, SpecTimeout(4*time.Minute))

	It("keeps the MPS daemon pod and the shares when the plugin's pod is replaced", func(ctx SpecContext) {
		title("The plugin's pod is replaced; the MPS daemon pod and the shares stay")
		say("The node's MPS daemon runs in a pod of its own (chart value kubeletPlugin.mps.daemon=pod),")
		say("so replacing the plugin's pod must leave it, and the shares, alone.")
		var mps *corev1.Pod
		Eventually(func(g Gomega) {
			mps = mpsDaemonPod(ctx)
			g.Expect(mps.Status.Phase).To(Equal(corev1.PodRunning), "MPS daemon pod %s", mps.Name)
		}).WithContext(ctx).WithTimeout(time.Minute).WithPolling(pollEvery).Should(Succeed())
		say("MPS daemon pod %s/%s (uid %s); its log: %s", mps.Namespace, mps.Name, mps.UID,
			lastLogLine(ctx, mps.Namespace, mps.Name, mps.Spec.Containers[0].Name))
		sharesBefore := podStates(ctx, "share-a", "share-b", "share-c")

		old := pluginPod(ctx)
		say("deleting the plugin pod %s; shares before: %s", old.Name, sharesBefore)
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
		sharesAfter := podStates(ctx, "share-a", "share-b", "share-c")
		say("new plugin pod %s; MPS pod uid %s, %s, %d restart(s); shares after: %s",
			fresh.Name, now.UID, now.Status.Phase, restartCount(now), sharesAfter)
		Expect(now.UID).To(Equal(mps.UID), "the MPS daemon pod was recreated")
		Expect(now.Status.Phase).To(Equal(corev1.PodRunning), "MPS daemon pod %s", now.Name)
		Expect(restartCount(now)).To(BeZero(), "the MPS daemon pod's container restarted")
		Expect(sharesAfter).To(Equal(sharesBefore), "the share pods changed while the plugin was replaced")
		for name, state := range sharesAfter {
			Expect(state).To(HavePrefix(string(corev1.PodRunning)+"/"), "share pod %s", name)
		}
		passed("%s adopted %s (same uid, 0 restarts); share-a/b/c kept running, no restarts", fresh.Name, mps.Name)
	}, SpecTimeout(5*time.Minute))

	It("allocates an NVLink pair in one claim", func(ctx SpecContext) {
		startScenario("NVLink pair in one claim", "03-nvlink-pair.yaml")
		applySpec(ctx, "03-nvlink-pair.yaml", allObjects)
		waitDemoPodsReady(ctx, "nvlink-pair", 2*time.Minute)
		held := showPods(ctx, "nvlink-pair")
		Expect(held).To(HaveLen(2), "one claim of two devices")
		domains := nvlinkDomains(ctx, held)
		Expect(domains).To(HaveLen(1), "the pair's NVLink domains differ")
		Expect(domains[0]).NotTo(BeEmpty(), "the pair's cards publish no NVLink domain")
		passed("%s and %s share NVLink domain %s", shortCard(held[0].card), shortCard(held[1].card), domains[0])
	}, SpecTimeout(3*time.Minute))

	It("binds the PodGroup gang all together", func(ctx SpecContext) {
		startScenario("PodGroup gang: all or nothing", "04-podgroup-gang.yaml")
		applySpec(ctx, "04-podgroup-gang.yaml", allObjects)
		waitDemoPodsReady(ctx, "podgroup-gang", 3*time.Minute)
		held := showPods(ctx, "podgroup-gang")
		Expect(distinctCards(held)).To(HaveLen(3), "the gang members should hold three distinct cards")
		passed("all three members bound together, each with its own card")
	}, SpecTimeout(4*time.Minute))

	It("refuses an invalid GpuConfig when it is applied", func(ctx SpecContext) {
		const file = "05-mistake-bad-config.yaml"
		title("A mistake: invalid GpuConfig  (%s)", file)
		describeSpec(file)
		errs := tryApplySpec(ctx, file, allObjects)
		// The pod of the same file is created anyway and would wait for a
		// template that never comes.
		DeferCleanup(deleteSpec, file)
		Expect(errs).NotTo(BeEmpty(), "the API server accepted the invalid GpuConfig (is the controller's webhook running?)")
		msg := errs[0].Error()
		say("kubectl apply would say:")
		for _, l := range splitLines(fold(msg, 96)) {
			say("  %s", l)
		}
		// The API server does not read opaque parameters: only the webhook
		// says "invalid gpu.tangram.dev config".
		Expect(msg).To(ContainSubstring("invalid "+device.DriverName+" config"), "the refusal does not come from the GpuConfig webhook")
		Expect(msg).To(ContainSubstring(`sharing.backend: Unsupported value: "vcuda"`), "the refusal does not name the field")
		_, err := clientset.ResourceV1().ResourceClaimTemplates(demoNamespace).Get(ctx, "gpu-10gi-bad-backend", metav1.GetOptions{})
		Expect(apierrors.IsNotFound(err)).To(BeTrue(), "the invalid template exists: %v", err)
		passed("refused when applied, by the controller's webhook; the message names the field and the valid values")
	}, SpecTimeout(2*time.Minute))

	It("adds an API-only second GPU node", func(ctx SpecContext) {
		title("A second GPU node joins: %s (API only)", *demoExtraNode)
		say("a Node object without a kubelet: the free cards of fake %s, 64 CPUs, 512 GiB;", *demoExtraProfile)
		say("the scheduler can place pods there, nothing ever starts them")
		createSimNode(ctx, *demoExtraNode, *demoExtraProfile, true)
		names := sortedKeys(nodeDevices(ctx, *demoExtraNode))
		Expect(names).NotTo(BeEmpty())
		say("node %s publishes %s", *demoExtraNode, strings.Join(names, " "))
		extraReady = true
		passed("%s publishes %d shareable GPUs", *demoExtraNode, len(names))
	}, SpecTimeout(2*time.Minute))

	It("shows the stock scheduler breaking a fresh card on the empty node", func(ctx SpecContext) {
		Expect(extraReady).To(BeTrue(), "needs the second node")
		startScenario("Packing across nodes, part 1: the stock kube-scheduler", "06-packing-stock.yaml")
		applySpec(ctx, "06-packing-stock.yaml", allObjects)
		node := boundNode(ctx, demoNamespace, "next-share-stock")
		claim := allocatedClaim(ctx, demoNamespace, "next-share-stock")
		showPods(ctx, "packing-stock")
		Expect(node).To(Equal(*demoExtraNode), "default-scheduler bound next-share-stock to %s, not to the empty node", node)
		// It never starts on an API-only node: remove it at once, then wait
		// until its claim (and with it the share) is gone, so both schedulers
		// face the same cluster.
		forceDeletePodsOn(ctx, demoNamespace, *demoExtraNode)
		waitClaimGone(ctx, demoNamespace, string(claim.UID))
		say("removed next-share-stock; its share on %s is free again", *demoExtraNode)
		passed("default-scheduler bound it to %s: a fresh card broken on the empty node", node)
	}, SpecTimeout(4*time.Minute))

	It("shows tangram-scheduler packing the share next to the others", func(ctx SpecContext) {
		Expect(extraReady).To(BeTrue(), "needs the second node")
		Expect(sharesCard).NotTo(BeEmpty(), "needs the card of share-a/b/c")
		startScenario("Packing across nodes, part 2: tangram-scheduler", "07-packing-tangram.yaml")
		applySpec(ctx, "07-packing-tangram.yaml", allObjects)
		waitDemoPodsReady(ctx, "packing-tangram", 2*time.Minute)
		held := showPods(ctx, "packing-tangram")
		by := scheduledBy(ctx, demoNamespace, "next-share-tangram")
		Expect(getPod(ctx, demoNamespace, "next-share-tangram").Spec.NodeName).To(Equal(gpuNode))
		Expect(held).To(HaveLen(1))
		Expect(held[0].card).To(Equal(sharesCard), "tangram-scheduler should pack it next to share-a/b/c")
		passed("%s packed it onto %s next to share-a/b/c; %s stays whole", by, shortCard(sharesCard), *demoExtraNode)
	}, SpecTimeout(4*time.Minute))

	It("runs a GpuGang: two members on NVLinked cards", func(ctx SpecContext) {
		title("The gang of 04 finishes (the demo deletes it): four cards are free for the next one")
		deleteSpec(ctx, "04-podgroup-gang.yaml")
		startScenario("GpuGang: a gang in one object, run by the controller", "08-gpugang.yaml")
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
		Eventually(func(g Gomega) {
			status = getGangStatus(ctx, g, demoNamespace, "finetune")
			g.Expect(status.Phase).To(Equal(tangramv1alpha1.GangRunning), "GpuGang finetune; diagnosis: %s", status.Diagnosis)
		}).WithContext(ctx).WithTimeout(30 * time.Second).WithPolling(pollEvery).Should(Succeed())
		held := showPods(ctx, "gpugang")
		say("GpuGang finetune: %s, %d placed, %d running", status.Phase, status.Placed, status.Running)
		Expect(distinctCards(held)).To(HaveLen(4), "two members with two cards each")
		domains := nvlinkDomains(ctx, held)
		Expect(domains).To(HaveLen(1), "the gang's cards span NVLink domains %v", domains)
		passed("GpuGang finetune is Running: two members, four cards, one NVLink domain")
	}, SpecTimeout(5*time.Minute))

	It("leaves a share that requires hard enforcement Pending, and says why", func(ctx SpecContext) {
		const file = "11-hard-enforcement.yaml"
		startScenario("Hard enforcement required, on advisory nodes", file)
		applySpec(ctx, file, allObjects)
		DeferCleanup(deleteSpec, file)
		var why string
		Eventually(func(g Gomega) {
			var out, errOut bytes.Buffer
			cmd := cli.NewCommand(&out)
			cmd.SetArgs([]string{"describe", "pod/needs-hard", "-n", demoNamespace, "--kubeconfig", *kubeconfig, "--color", "never"})
			cmd.SetErr(&errOut)
			g.Expect(cmd.ExecuteContext(ctx)).To(Succeed(), "kubectl tangram describe pod/needs-hard: %s", errOut.String())
			why = out.String()
			g.Expect(why).To(ContainSubstring(device.AttrShareEnforcement))
			g.Expect(why).To(ContainSubstring("sharing.requireHardEnforcement"))
		}).WithContext(ctx).WithTimeout(30*time.Second).WithPolling(pollEvery).Should(Succeed(), "the explanation does not name shareEnforcement and sharing.requireHardEnforcement")
		say("kubectl tangram describe pod/needs-hard:")
		for _, l := range splitLines(fold(why, 96)) {
			say("  %s", l)
		}
		Expect(getPod(ctx, demoNamespace, "needs-hard").Status.Phase).To(Equal(corev1.PodPending))
		passed("Pending: the nodes publish shareEnforcement advisory; the reason names the chart value that would accept them")
	}, SpecTimeout(2*time.Minute))
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
	if pass+fail+skip == 0 || r.SuiteConfig.DryRun {
		return
	}
	fmt.Fprintf(narration(), "\n━━ Demo scenarios: %d passed, %d failed", pass, fail)
	if skip > 0 {
		fmt.Fprintf(narration(), ", %d skipped", skip)
	}
	fmt.Fprintln(narration())
})

func startScenario(name, file string) {
	title("%s  (%s)", name, file)
	describeSpec(file)
}

// describeSpec prints the spec file's leading comment: its story.
func describeSpec(file string) {
	data, err := os.ReadFile(filepath.Join(*demoSpecDir, file))
	Expect(err).NotTo(HaveOccurred(), "reading demo spec %s", file)
	for _, l := range strings.Split(string(data), "\n") {
		if !strings.HasPrefix(l, "#") {
			break
		}
		say("%s", strings.TrimPrefix(strings.TrimPrefix(l, "#"), " "))
	}
}

// recreateDemoNamespace removes what an earlier demo left, so every
// scenario starts from the same cluster.
func recreateDemoNamespace(ctx context.Context) {
	if _, err := clientset.CoreV1().Namespaces().Get(ctx, demoNamespace, metav1.GetOptions{}); err == nil {
		say("removing the previous demo namespace %s", demoNamespace)
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

// showPods prints, per pod of the scenario, its node, each allocated device
// with its memory and compute share, and what the container was given; it
// returns the devices.
func showPods(ctx context.Context, scenario string) []heldDevice {
	var held []heldDevice
	cardMemory := map[string]int64{}
	for _, p := range demoPods(ctx, scenario) {
		node := p.Spec.NodeName
		if node == "" {
			node = "<none>"
		}
		say("pod %-12s node %-20s %s", p.Name, node, p.Status.Phase)
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
				say("  claim %-28s → %-8s %s", claim.Name, r.Device, describeShare(r, total, &h))
				held = append(held, h)
			}
		}
		if p.Status.Phase == corev1.PodRunning {
			report, _ := parseReport(podLog(ctx, p.Namespace, p.Name))
			for _, k := range []string{"NVIDIA_VISIBLE_DEVICES", "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT", "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", "TANGRAM_SHARING_BACKEND"} {
				if v, ok := report[k]; ok {
					say("  container sees %s=%s", k, v)
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

// podStatesOf is what must not change for a running pod: its UID, phase,
// container and restarts.
type podStatesOf map[string]string

func (s podStatesOf) String() string {
	var out []string
	for _, k := range sortedKeys(s) {
		out = append(out, k+"="+s[k])
	}
	return strings.Join(out, " ")
}

func podStates(ctx context.Context, names ...string) podStatesOf {
	states := podStatesOf{}
	for _, n := range names {
		p := getPod(ctx, demoNamespace, n)
		container := ""
		if len(p.Status.ContainerStatuses) > 0 {
			container = p.Status.ContainerStatuses[0].ContainerID
		}
		states[n] = fmt.Sprintf("%s/%d restarts (uid %s, container %s)", p.Status.Phase, restartCount(p), shortID(string(p.UID)), shortID(container))
	}
	return states
}

func shortID(id string) string {
	if _, after, ok := strings.Cut(id, "://"); ok {
		id = after
	}
	if len(id) > 8 {
		return id[:8]
	}
	return id
}

func restartCount(p *corev1.Pod) int32 {
	var n int32
	for _, c := range p.Status.ContainerStatuses {
		n += c.RestartCount
	}
	return n
}

func podLogOf(ctx context.Context, ns, name, container string) string {
	raw, err := clientset.CoreV1().Pods(ns).GetLogs(name, &corev1.PodLogOptions{Container: container}).DoRaw(ctx)
	if err != nil {
		return ""
	}
	return string(raw)
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

// fold breaks long lines at spaces so that narration stays readable.
func fold(s string, width int) string {
	var out []string
	for _, l := range splitLines(s) {
		for len(l) > width {
			cut := strings.LastIndex(l[:width], " ")
			if cut <= 0 {
				cut = width
			}
			out = append(out, l[:cut])
			l = strings.TrimLeft(l[cut:], " ")
		}
		out = append(out, l)
	}
	return strings.Join(out, "\n")
}

func firstLine(s string) string {
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
