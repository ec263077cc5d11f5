//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/tangram-gpu/tangram/pkg/clusterview/cli"

	mocknvml "github.com/tangram-gpu/tangram/hack/mock-nvml"
	"github.com/tangram-gpu/tangram/pkg/device"
	"github.com/tangram-gpu/tangram/pkg/plugin/enforcement"
)

var (
	crictl      = flag.String("crictl", "crictl", "realpath specs: crictl, for the containers' start times in nanoseconds")
	criEndpoint = flag.String("cri-endpoint", "", "realpath specs: the CRI endpoint of the GPU node's containerd (unix://...)")
)

const setMemoryLimitsCall = "nvmlDeviceSetMemoryLimits_v1"

// Hard share enforcement on the real path: the mock driver root reports
// driver 615 and the plugin's cgroup root is a cgroup v2 fixture with dmem
// enabled down to the kubelet's QoS cgroups, so the node is "hard" and
// every share's container runs tangram-cdi-hook, which sets the claim's
// limit on the container's pod cgroup (here the cgroup v1 memory
// hierarchy's) through the mock NVML library (the kernel's enforcement is
// not exercised: this host is cgroup v1 and its kernel has no dmem,
// docs/enforcement.md).
var _ = Describe("Hard share enforcement", Label(realPathLabel), Ordered, func() {
	var state mocknvml.State

	BeforeAll(func(ctx SpecContext) {
		marker := readMarker(filepath.Join(*mockDriverRoot, mockProfileMarker))
		Expect(marker["share_enforcement"]).To(Equal(string(enforcement.Hard)),
			"the realpath stage creates the mock root with driver 615 and a dmem fixture (hack/local-cluster/test-e2e-realpath.sh)")
		for name, d := range nodeDevices(ctx, gpuNode) {
			Expect(stringAttr(d, device.AttrShareEnforcement)).To(Equal(string(enforcement.Hard)), "device %s", name)
		}
		state = mocknvml.State{Dir: *mockNVMLStateDir}
	})

	It("sets a 20 GiB limit on each of three pods' cgroups before their containers run", func(ctx SpecContext) {
		scenario("hard enforcement: three 20Gi shares of one card, one memory limit per pod cgroup in the mock NVML call log")
		ns := newNamespace(ctx)
		createTemplate(ctx, ns, "share-20gi", memoryShare("20Gi"))
		pods := []string{"tenant-a", "tenant-b", "tenant-c"}
		for _, p := range pods {
			createPod(ctx, gpuPod(ns, p, "share-20gi"))
		}
		devices := nodeDevices(ctx, gpuNode)
		card := ""
		for _, p := range pods {
			waitRunning(ctx, ns, p)
			res := results(allocatedClaim(ctx, ns, p))
			Expect(res).To(HaveLen(1))
			if card == "" {
				card = res[0].Device
			}
			Expect(res[0].Device).To(Equal(card), "the three 20Gi shares should pack onto one card")
		}
		uuid := stringAttr(devices[card], device.AttrUUID)

		calls, err := state.Calls()
		Expect(err).NotTo(HaveOccurred(), "the mock NVML call log")
		for _, p := range pods {
			c := podLimit(ctx, calls, ns, p, uuid)
			set, err := c.Time()
			Expect(err).NotTo(HaveOccurred())
			_, id, _ := strings.Cut(containerID(ctx, ns, p), "://")
			started := containerStartedAt(ctx, id)
			Expect(set.Before(started)).To(BeTrue(), "pod %s: the limit (set %s) must come before the container's process started (%s)",
				p, set.Format(time.RFC3339Nano), started.Format(time.RFC3339Nano))
			GinkgoWriter.Printf("  %s: %s limited to 20Gi on %s at %s, container started %s later\n",
				p, uuid, c.Args["namespace"], set.Format(time.RFC3339Nano), started.Sub(set))
		}
	}, SpecTimeout(5*time.Minute))

	It("gives the two containers of one pod one 20 GiB limit on the pod's cgroup, not one each", func(ctx SpecContext) {
		scenario("hard enforcement: one pod of two containers on one 20Gi share, one 20 GiB limit for the pod cgroup (not 40, not per container)")
		ns := newNamespace(ctx)
		createTemplate(ctx, ns, "share-20gi", memoryShare("20Gi"))
		pod := gpuPod(ns, "two-containers", "share-20gi")
		second := *pod.Spec.Containers[0].DeepCopy()
		second.Name = "gpu-info-2"
		pod.Spec.Containers = append(pod.Spec.Containers, second)
		createPod(ctx, pod)
		waitPodRunning(ctx, ns, pod.Name)
		res := results(allocatedClaim(ctx, ns, pod.Name))
		Expect(res).To(HaveLen(1))
		uuid := stringAttr(nodeDevices(ctx, gpuNode)[res[0].Device], device.AttrUUID)

		calls, err := state.Calls()
		Expect(err).NotTo(HaveOccurred(), "the mock NVML call log")
		c := podLimit(ctx, calls, ns, pod.Name, uuid)
		set, err := c.Time()
		Expect(err).NotTo(HaveOccurred())
		for _, cs := range getPod(ctx, ns, pod.Name).Status.ContainerStatuses {
			_, id, _ := strings.Cut(cs.ContainerID, "://")
			for _, other := range calls {
				Expect(other.Args["namespace"]).NotTo(ContainSubstring(id), "a limit on container %s's own cgroup: %v", cs.Name, other)
			}
			started := containerStartedAt(ctx, id)
			Expect(set.Before(started)).To(BeTrue(), "container %s started (%s) before the pod's limit was set (%s)", cs.Name, started, set)
		}
		GinkgoWriter.Printf("  one limit for both containers: %s\n", c)
	}, SpecTimeout(5*time.Minute))

	It("refuses a second pod on a hard share claim while the first pod lives, and lets the next pod take it once it is gone", func(ctx SpecContext) {
		scenario("hard enforcement: a 20Gi share claim used by two pods; the second pod's container is refused with the reason")
		ns := newNamespace(ctx)
		claim := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: "shared-20gi", Namespace: ns},
			Spec: resourceapi.ResourceClaimSpec{Devices: memoryShare("20Gi")}}
		_, err := clientset.ResourceV1().ResourceClaims(ns).Create(ctx, claim, metav1.CreateOptions{})
		Expect(err).NotTo(HaveOccurred())
		onClaim := func(name string) *corev1.Pod {
			p := gpuPod(ns, name, "unused")
			p.Spec.ResourceClaims = []corev1.PodResourceClaim{{Name: claimName, ResourceClaimName: ptr.To(claim.Name)}}
			return p
		}
		first := createPod(ctx, onClaim("first"))
		waitRunning(ctx, ns, first.Name)
		createPod(ctx, onClaim("second"))
		Eventually(func(g Gomega) {
			g.Expect(eventText(ctx, ns, "second")).To(ContainSubstring("is a hard memory share held by pod " + string(first.UID)))
		}).WithContext(ctx).WithTimeout(2 * time.Minute).WithPolling(pollEvery).Should(Succeed())
		Expect(getPod(ctx, ns, "second").Status.Phase).NotTo(Equal(corev1.PodRunning))
		GinkgoWriter.Printf("  second pod's events:\n%s", eventText(ctx, ns, "second"))

		Expect(clientset.CoreV1().Pods(ns).Delete(ctx, first.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)})).To(Succeed())
		// The claim is free once the kubelet has removed the first pod's cgroup.
		Eventually(func() []string { return podCgroups(string(first.UID)) }).WithContext(ctx).
			WithTimeout(2 * time.Minute).WithPolling(pollEvery).Should(BeEmpty())
		third := createPod(ctx, onClaim("third"))
		// The second pod may get there first once the first is gone;
		// either way one pod, and then only one, runs on the claim.
		Eventually(func(g Gomega) {
			running := 0
			for _, name := range []string{"second", third.Name} {
				if getPod(ctx, ns, name).Status.Phase == corev1.PodRunning {
					running++
				}
			}
			g.Expect(running).To(Equal(1), "events of second:\n%s\nevents of third:\n%s", eventText(ctx, ns, "second"), eventText(ctx, ns, third.Name))
		}).WithContext(ctx).WithTimeout(3 * time.Minute).WithPolling(pollEvery).Should(Succeed())
	}, SpecTimeout(7*time.Minute))

	It("refuses at prepare a root pod admitted before its strict share claim existed, naming the container and the field", func(ctx SpecContext) {
		scenario("non-root at prepare: a root pod names a claim that does not exist yet (admission cannot check it); the claim of the strict class hard-shared-gpu.tangram.dev is then created; the plugin refuses the prepare naming the pod, container and field")
		ns := newNamespace(ctx)
		early := rootPod(ns, "early-root", "unused")
		early.Spec.ResourceClaims = []corev1.PodResourceClaim{{Name: claimName, ResourceClaimName: ptr.To("late-share")}}
		createPod(ctx, early)
		strictShare := memoryShare("20Gi")
		strictShare.Requests[0].Exactly.DeviceClassName = device.HardSharedDeviceClassName
		claim := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: "late-share", Namespace: ns},
			Spec: resourceapi.ResourceClaimSpec{Devices: strictShare}}
		_, err := clientset.ResourceV1().ResourceClaims(ns).Create(ctx, claim, metav1.CreateOptions{})
		Expect(err).NotTo(HaveOccurred())
		want := `pod ` + ns + `/early-root container "gpu-info": securityContext.runAsNonRoot must be true (on the container or the pod) for a share of class ` + device.HardSharedDeviceClassName
		Eventually(func(g Gomega) {
			events := eventText(ctx, ns, "early-root")
			g.Expect(events).To(ContainSubstring(want))
			g.Expect(events).To(ContainSubstring(`container "gpu-info": securityContext.allowPrivilegeEscalation must be false`))
		}).WithContext(ctx).WithTimeout(2 * time.Minute).WithPolling(pollEvery).Should(Succeed())
		Expect(getPod(ctx, ns, "early-root").Status.Phase).NotTo(Equal(corev1.PodRunning))
		GinkgoWriter.Printf("  pod events:\n%s", eventText(ctx, ns, "early-root"))
	}, SpecTimeout(3*time.Minute))

	It("refuses a root container joining a strict share claim already prepared, in the container's create hook", func(ctx SpecContext) {
		scenario("non-root for late joiners: a root pod gated before the strict claim existed (admission cannot check it) is ungated once a locked-down pod runs on the claim; the kubelet does not prepare the claim again, and tangram-cdi-hook refuses the root container from its runtime config, naming the pod, the claim and the fix")
		ns := newNamespace(ctx)
		strictShare := memoryShare("20Gi")
		strictShare.Requests[0].Exactly.DeviceClassName = device.HardSharedDeviceClassName
		onClaim := func(p *corev1.Pod) *corev1.Pod {
			p.Spec.ResourceClaims = []corev1.PodResourceClaim{{Name: claimName, ResourceClaimName: ptr.To("joined-share")}}
			return p
		}
		late := onClaim(rootPod(ns, "late-root", "unused"))
		late.Spec.SchedulingGates = []corev1.PodSchedulingGate{{Name: "tangram.dev/e2e-join-later"}}
		createPod(ctx, late)
		claim := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: "joined-share", Namespace: ns},
			Spec: resourceapi.ResourceClaimSpec{Devices: strictShare}}
		_, err := clientset.ResourceV1().ResourceClaims(ns).Create(ctx, claim, metav1.CreateOptions{})
		Expect(err).NotTo(HaveOccurred())
		createPod(ctx, onClaim(gpuPod(ns, "first", "unused")))
		waitRunning(ctx, ns, "first")

		// The claim is prepared; the root pod joins it.
		Eventually(func(g Gomega) {
			pod := getPod(ctx, ns, late.Name)
			pod.Spec.SchedulingGates = nil
			_, err := clientset.CoreV1().Pods(ns).Update(ctx, pod, metav1.UpdateOptions{})
			g.Expect(err).NotTo(HaveOccurred())
		}).WithContext(ctx).WithTimeout(time.Minute).WithPolling(pollEvery).Should(Succeed())
		want := `tangram-cdi-hook: refusing to start the container: pod ` + ns + `/late-root container "gpu-info" would run as uid 0 (root)`
		Eventually(func(g Gomega) {
			events := eventText(ctx, ns, late.Name)
			g.Expect(events).To(ContainSubstring(want))
			g.Expect(events).To(ContainSubstring(`on a share of class ` + device.HardSharedDeviceClassName + ` (claim ` + ns + `/joined-share)`))
			g.Expect(events).To(ContainSubstring("runAsNonRoot: true"))
		}).WithContext(ctx).WithTimeout(2 * time.Minute).WithPolling(pollEvery).Should(Succeed())
		pod := getPod(ctx, ns, late.Name)
		Expect(pod.Status.Phase).NotTo(Equal(corev1.PodRunning))
		for _, cs := range pod.Status.ContainerStatuses {
			Expect(cs.State.Running).To(BeNil(), "the root container must not run")
		}
		Expect(getPod(ctx, ns, "first").Status.Phase).To(Equal(corev1.PodRunning), "the locked-down pod keeps running")
		GinkgoWriter.Printf("  root pod's events:\n%s", eventText(ctx, ns, late.Name))
	}, SpecTimeout(4*time.Minute))

	It("never starts a container whose memory limit cannot be set, and says why in the pod's events", func(ctx SpecContext) {
		scenario("hard enforcement fails closed: the mock NVML refuses the limit, the pod does not start")
		Expect(state.FailMemoryLimits(4)).To(Succeed(), "NVML_ERROR_NO_PERMISSION for every limit") // nvml.ERROR_NO_PERMISSION
		DeferCleanup(func() { Expect(state.AllowMemoryLimits()).To(Succeed()) })
		ns := newNamespace(ctx)
		createTemplate(ctx, ns, "share-20gi", memoryShare("20Gi"))
		createPod(ctx, gpuPod(ns, "refused", "share-20gi"))
		Eventually(func(g Gomega) {
			g.Expect(eventText(ctx, ns, "refused")).To(ContainSubstring("tangram-cdi-hook: GPU memory limit not set, refusing to start the container"))
		}).WithContext(ctx).WithTimeout(2 * time.Minute).WithPolling(pollEvery).Should(Succeed())
		pod := getPod(ctx, ns, "refused")
		Expect(pod.Status.Phase).NotTo(Equal(corev1.PodRunning))
		for _, cs := range pod.Status.ContainerStatuses {
			Expect(cs.State.Running).To(BeNil(), "the container must not run")
		}
		events := eventText(ctx, ns, "refused")
		Expect(events).To(ContainSubstring("NVML return 4"), "the event must carry NVML's answer")
		GinkgoWriter.Printf("  pod events:\n%s", events)
	}, SpecTimeout(3*time.Minute))

	It("leaves a share of the hard class Pending on an advisory node, where the default class runs it", func(ctx SpecContext) {
		scenario("hard class: an advisory node's cards match shared-gpu.tangram.dev but not hard-shared-gpu.tangram.dev; the reason names the class")
		// An API-only node publishing fake cards: "advisory", as the
		// plugin publishes fake GPUs.
		advisory := createSimNode(ctx, "tangram-sim-advisory", "dgx-h100", true)
		DeferCleanup(deleteSimNode, advisory)
		for name, d := range nodeDevices(ctx, advisory) {
			Expect(stringAttr(d, device.AttrShareEnforcement)).To(Equal(string(enforcement.Advisory)), "device %s", name)
		}
		ns := newNamespace(ctx)
		DeferCleanup(forceDeletePodsOn, ns, advisory)

		hardShare := memoryShare("20Gi")
		hardShare.Requests[0].Exactly.DeviceClassName = device.HardSharedDeviceClassName
		createTemplate(ctx, ns, "share-hard", hardShare)
		createTemplate(ctx, ns, "share-any", memoryShare("20Gi"))

		strict := gpuPod(ns, "needs-hard", "share-hard")
		onAnyOf(strict, advisory)
		createPod(ctx, strict)
		relaxed := gpuPod(ns, "takes-advisory", "share-any")
		onAnyOf(relaxed, advisory)
		createPod(ctx, relaxed)

		Expect(boundNode(ctx, ns, relaxed.Name)).To(Equal(advisory), "the default shared class takes the advisory node")
		Eventually(func(g Gomega) {
			pod := getPod(ctx, ns, strict.Name)
			g.Expect(pod.Spec.NodeName).To(BeEmpty())
			var cond *corev1.PodCondition
			for i := range pod.Status.Conditions {
				if pod.Status.Conditions[i].Type == corev1.PodScheduled {
					cond = &pod.Status.Conditions[i]
				}
			}
			g.Expect(cond).NotTo(BeNil(), "no PodScheduled condition yet")
			g.Expect(cond.Reason).To(Equal(corev1.PodReasonUnschedulable))
			g.Expect(cond.Message).To(ContainSubstring("cannot allocate all claims"))
		}).WithContext(ctx).WithTimeout(2 * time.Minute).WithPolling(pollEvery).Should(Succeed())
		// The stock scheduler's message is generic. The diagnosis naming the
		// class is checked where no node is hard (the r580 stage,
		// advisory_test.go): here the GPU node is, and the claim fits there.
		GinkgoWriter.Printf("  %s stays Pending: %s\n", strict.Name, eventText(ctx, ns, strict.Name))
	}, SpecTimeout(4*time.Minute))
})

// tangramDescribe is `kubectl tangram describe pod/<pod>`, waiting until
// it says why the pod waits.
func tangramDescribe(ctx context.Context, ns, pod string) string {
	var why string
	Eventually(func(g Gomega) {
		var out, errOut bytes.Buffer
		cmd := cli.NewCommand(&out)
		cmd.SetArgs([]string{"describe", "pod/" + pod, "-n", ns, "--kubeconfig", *kubeconfig, "--color", "never"})
		cmd.SetErr(&errOut)
		g.Expect(cmd.ExecuteContext(ctx)).To(Succeed(), "kubectl tangram describe pod/%s: %s", pod, errOut.String())
		why = out.String()
		g.Expect(why).To(ContainSubstring(device.AttrShareEnforcement))
	}).WithContext(ctx).WithTimeout(time.Minute).WithPolling(pollEvery).Should(Succeed())
	return why
}

// podLimit is the one memory limit the mock NVML call log has on the
// pod's cgroup (/…/pod<uid>, v1 or v2) for the card: 20 GiB, soft 0,
// successful; a second set on it fails the spec.
func podLimit(ctx context.Context, calls []mocknvml.Call, ns, pod, uuid string) mocknvml.Call {
	uid := string(getPod(ctx, ns, pod).UID)
	var limits []mocknvml.Call
	for _, c := range calls {
		if c.Function == setMemoryLimitsCall && strings.HasSuffix(c.Args["namespace"], "/pod"+uid) {
			limits = append(limits, c)
		}
	}
	Expect(limits).To(HaveLen(1), "pod %s: one memory limit on its pod cgroup (…/pod%s); calls.log has %v", pod, uid, calls)
	c := limits[0]
	Expect(c.Args).To(HaveKeyWithValue("uuid", uuid))
	Expect(c.Args).To(HaveKeyWithValue("soft", "0"))
	Expect(c.Args).To(HaveKeyWithValue("hard", "21474836480"))
	Expect(c.Args).To(HaveKeyWithValue("result", "0"))
	return c
}

// podCgroups are the host's cgroup directories of the pod with this UID
// (cgroupfs and systemd names, v1 hierarchies and v2); the realpath specs
// run on the GPU node.
func podCgroups(uid string) []string {
	var found []string
	for _, pattern := range []string{
		"/sys/fs/cgroup/*/kubepods/pod" + uid, "/sys/fs/cgroup/*/kubepods/*/pod" + uid,
		"/sys/fs/cgroup/kubepods/pod" + uid, "/sys/fs/cgroup/kubepods/*/pod" + uid,
		"/sys/fs/cgroup/kubepods.slice/*pod" + strings.ReplaceAll(uid, "-", "_") + ".slice",
		"/sys/fs/cgroup/kubepods.slice/*/*pod" + strings.ReplaceAll(uid, "-", "_") + ".slice",
	} {
		m, _ := filepath.Glob(pattern)
		found = append(found, m...)
	}
	return found
}

// containerStartedAt is when the runtime started the container's process,
// to the nanosecond (the pod status has whole seconds only).
func containerStartedAt(ctx context.Context, id string) time.Time {
	out, err := exec.CommandContext(ctx, *crictl, "--runtime-endpoint", *criEndpoint, "inspect", id).Output()
	Expect(err).NotTo(HaveOccurred(), "%s inspect %s (pass --crictl and --cri-endpoint)", *crictl, id)
	var inspect struct {
		Status struct {
			StartedAt time.Time `json:"startedAt"`
		} `json:"status"`
	}
	Expect(json.Unmarshal(out, &inspect)).To(Succeed(), "crictl inspect output")
	Expect(inspect.Status.StartedAt.IsZero()).To(BeFalse(), "container %s has no start time", id)
	return inspect.Status.StartedAt
}
