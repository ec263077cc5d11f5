//go:build e2e

package e2e

import (
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
// driver 615 and the plugin's cgroup root is a cgroup v2 + dmem fixture, so
// the node is "hard" and every share's container runs tangram-cdi-hook,
// which sets its memory limit through the mock NVML library (the kernel's
// enforcement is not exercised: this host is cgroup v1, docs/enforcement.md).
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

	It("sets a 20 GiB limit on each of three containers' cgroups before their processes run", func(ctx SpecContext) {
		scenario("hard enforcement: three 20Gi shares of one card, one memory limit per container cgroup in the mock NVML call log")
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
			cri := containerID(ctx, ns, p)
			_, id, _ := strings.Cut(cri, "://")
			var limits []mocknvml.Call
			for _, c := range calls {
				if c.Function == setMemoryLimitsCall && strings.Contains(c.Args["namespace"], id) {
					limits = append(limits, c)
				}
			}
			Expect(limits).To(HaveLen(1), "pod %s: one memory limit on container %s's cgroup; calls.log has %v", p, id, calls)
			c := limits[0]
			Expect(c.Args).To(HaveKeyWithValue("uuid", uuid))
			Expect(c.Args).To(HaveKeyWithValue("soft", "0"))
			Expect(c.Args).To(HaveKeyWithValue("hard", "21474836480"))
			Expect(c.Args).To(HaveKeyWithValue("result", "0"))
			set, err := c.Time()
			Expect(err).NotTo(HaveOccurred())
			started := containerStartedAt(ctx, id)
			Expect(set.Before(started)).To(BeTrue(), "pod %s: the limit (set %s) must come before the container's process started (%s)",
				p, set.Format(time.RFC3339Nano), started.Format(time.RFC3339Nano))
			GinkgoWriter.Printf("  %s: %s limited to 20Gi on %s at %s, container started %s later\n",
				p, uuid, c.Args["namespace"], set.Format(time.RFC3339Nano), started.Sub(set))
		}
	}, SpecTimeout(5*time.Minute))

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

	It("leaves a shared claim unschedulable on an advisory node while the class requires hard", func(ctx SpecContext) {
		scenario("hard enforcement required: an advisory node's cards do not match shared-gpu.tangram.dev")
		// An API-only node publishing fake cards: "advisory", as the
		// plugin publishes fake GPUs.
		advisory := createSimNode(ctx, "tangram-sim-advisory", "dgx-h100", true)
		DeferCleanup(deleteSimNode, advisory)
		for name, d := range nodeDevices(ctx, advisory) {
			Expect(stringAttr(d, device.AttrShareEnforcement)).To(Equal(string(enforcement.Advisory)), "device %s", name)
		}
		ns := newNamespace(ctx)
		DeferCleanup(forceDeletePodsOn, ns, advisory)

		// The same selectors without the requirement, as with
		// sharing.requireHardEnforcement=false.
		shared, err := clientset.ResourceV1().DeviceClasses().Get(ctx, device.SharedDeviceClassName, metav1.GetOptions{})
		Expect(err).NotTo(HaveOccurred())
		lenient := &resourceapi.DeviceClass{ObjectMeta: metav1.ObjectMeta{Name: "any-shared-e2e.tangram.dev"}}
		for _, s := range shared.Spec.Selectors {
			if s.CEL != nil && strings.Contains(s.CEL.Expression, device.AttrShareEnforcement) {
				continue
			}
			lenient.Spec.Selectors = append(lenient.Spec.Selectors, s)
		}
		Expect(lenient.Spec.Selectors).To(HaveLen(len(shared.Spec.Selectors)-1), "the chart's shared class must require shareEnforcement (sharing.requireHardEnforcement=true)")
		_, err = clientset.ResourceV1().DeviceClasses().Create(ctx, lenient, metav1.CreateOptions{})
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(func(ctx context.Context) {
			_ = clientset.ResourceV1().DeviceClasses().Delete(ctx, lenient.Name, metav1.DeleteOptions{})
		})

		createTemplate(ctx, ns, "share-hard", memoryShare("20Gi"))
		anyShare := memoryShare("20Gi")
		anyShare.Requests[0].Exactly.DeviceClassName = lenient.Name
		createTemplate(ctx, ns, "share-any", anyShare)

		strict := gpuPod(ns, "needs-hard", "share-hard")
		onAnyOf(strict, advisory)
		createPod(ctx, strict)
		relaxed := gpuPod(ns, "takes-advisory", "share-any")
		onAnyOf(relaxed, advisory)
		createPod(ctx, relaxed)

		Expect(boundNode(ctx, ns, relaxed.Name)).To(Equal(advisory), "the same share without the requirement fits the advisory node")
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
		GinkgoWriter.Printf("  %s stays Pending: %s\n", strict.Name, eventText(ctx, ns, strict.Name))
	}, SpecTimeout(4*time.Minute))
})

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
