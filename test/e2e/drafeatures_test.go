//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/tangram-gpu/tangram/pkg/device"
)

// Features of the DRA API a GPU user reaches for beyond one claim per pod:
// a request per container, admin access to busy cards, device data in the
// claim's status, extended resources and allocationMode All. With fake GPUs
// there are no device nodes, so what a container sees is checked through
// its environment (NVIDIA_VISIBLE_DEVICES and Tangram's variables).
var _ = Describe("DRA API features", func() {
	It("per-request devices: each container sees exactly the card of the request it names", func(ctx SpecContext) {
		scenario("per-request devices: one claim, requests left and right, one container each, a third naming the claim")
		ns := newNamespace(ctx)
		left, right := wholeGPUs(1).Requests[0], wholeGPUs(1).Requests[0]
		left.Name, right.Name = "left", "right"
		createTemplate(ctx, ns, "two-requests", resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{left, right}})
		pod := gpuPod(ns, "per-request", "two-requests")
		base := pod.Spec.Containers[0]
		pod.Spec.Containers = nil
		for _, c := range []struct{ name, request string }{{"left", "left"}, {"right", "right"}, {"whole-claim", ""}} {
			ctr := *base.DeepCopy()
			ctr.Name = c.name
			ctr.Resources.Claims = []corev1.ResourceClaim{{Name: claimName, Request: c.request}}
			pod.Spec.Containers = append(pod.Spec.Containers, ctr)
		}
		createPod(ctx, pod)
		// Several containers: their reports are read one by one below.
		waitPodRunning(ctx, ns, pod.Name)
		claim := allocatedClaim(ctx, ns, pod.Name)
		describeAllocation(pod.Name, claim)
		devices := nodeDevices(ctx, gpuNode)
		uuidOf := map[string]string{}
		for _, r := range results(claim) {
			uuidOf[r.Request] = stringAttr(devices[r.Device], device.AttrUUID)
		}
		Expect(uuidOf).To(HaveLen(2))
		Expect(uuidOf["left"]).NotTo(Equal(uuidOf["right"]), "the two requests got one card")
		for _, c := range []struct{ container, want, notWant string }{
			{"left", uuidOf["left"], uuidOf["right"]},
			{"right", uuidOf["right"], uuidOf["left"]},
		} {
			report := containerReport(ctx, ns, pod.Name, c.container)
			Expect(report).To(HaveKeyWithValue("NVIDIA_VISIBLE_DEVICES", c.want), "container %s must see only its request's card", c.container)
			Expect(reportValues(report)).NotTo(ContainElement(c.notWant), "container %s sees the other request's card somewhere in its environment", c.container)
		}
		whole := containerReport(ctx, ns, pod.Name, "whole-claim")
		Expect(strings.Split(whole["NVIDIA_VISIBLE_DEVICES"], ",")).To(ConsistOf(uuidOf["left"], uuidOf["right"]),
			"a container naming the claim sees both cards")
	}, SpecTimeout(6*time.Minute))

	It("admin access reads a card held whole and one held in shares while both holders keep running; claim status shows device data", func(ctx SpecContext) {
		scenario("admin access on busy cards + ResourceClaim.status.devices")
		ns := newNamespace(ctx)
		createTemplate(ctx, ns, "whole", wholeGPUs(1))
		createTemplate(ctx, ns, "share", memoryShare("20Gi"))
		createPod(ctx, gpuPod(ns, "holder-whole", "whole"))
		createPod(ctx, gpuPod(ns, "holder-share", "share"))
		devices := nodeDevices(ctx, gpuNode)
		held := map[string]string{} // pod -> card UUID
		for _, p := range []string{"holder-whole", "holder-share"} {
			waitRunning(ctx, ns, p)
			claim := allocatedClaim(ctx, ns, p)
			res := results(claim)
			Expect(res).To(HaveLen(1))
			held[p] = stringAttr(devices[res[0].Device], device.AttrUUID)
			expectDeviceStatus(ctx, ns, claim.Name, res[0], map[string]string{"holder-whole": "exclusive", "holder-share": "simulated"}[p])
		}
		Expect(held["holder-whole"]).NotTo(Equal(held["holder-share"]))
		restartsBefore := map[string]int32{}
		for p := range held {
			restartsBefore[p] = restarts(ctx, ns, p)
		}

		// Admin access needs a namespace labelled for it.
		admin := newNamespace(ctx)
		nsObj, err := clientset.CoreV1().Namespaces().Get(ctx, admin, metav1.GetOptions{})
		Expect(err).NotTo(HaveOccurred())
		nsObj.Labels = map[string]string{"resource.kubernetes.io/admin-access": "true"}
		_, err = clientset.CoreV1().Namespaces().Update(ctx, nsObj, metav1.UpdateOptions{})
		Expect(err).NotTo(HaveOccurred())
		var requests []resourceapi.DeviceRequest
		for i, p := range []string{"holder-whole", "holder-share"} {
			requests = append(requests, resourceapi.DeviceRequest{
				Name: fmt.Sprintf("card%d", i),
				Exactly: &resourceapi.ExactDeviceRequest{
					DeviceClassName: device.DeviceClassName,
					AllocationMode:  resourceapi.DeviceAllocationModeExactCount,
					Count:           1,
					AdminAccess:     ptr.To(true),
					Selectors: []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{
						Expression: fmt.Sprintf(`device.attributes[%q].uuid == %q`, device.DriverName, held[p]),
					}}},
					// Memory 0 fits beside any holder (docs/resourceslices.md).
					Capacity: &resourceapi.CapacityRequirements{Requests: map[resourceapi.QualifiedName]resource.Quantity{
						device.CapacityMemory: resource.MustParse("0"),
					}},
				},
			})
		}
		createTemplate(ctx, admin, "monitor", resourceapi.DeviceClaim{Requests: requests})
		createPod(ctx, gpuPod(admin, "monitor", "monitor"))
		report := waitRunning(ctx, admin, "monitor")
		printPodOutput(ctx, admin, "monitor")
		Expect(strings.Split(report["NVIDIA_VISIBLE_DEVICES"], ",")).To(ConsistOf(held["holder-whole"], held["holder-share"]))
		Expect(report).NotTo(HaveKey("CUDA_MPS_PIPE_DIRECTORY"), "admin access must not be an MPS client")
		Expect(report).To(HaveKeyWithValue("TANGRAM_SHARING_BACKEND", "exclusive,exclusive"), "admin access sees the cards without limits")
		monitorClaim := allocatedClaim(ctx, admin, "monitor")
		for _, r := range results(monitorClaim) {
			expectDeviceStatus(ctx, admin, monitorClaim.Name, r, "admin-access")
		}
		for p := range held {
			pod := getPod(ctx, ns, p)
			Expect(pod.Status.Phase).To(Equal(corev1.PodRunning), "holder %s stopped after admin access", p)
			Expect(restarts(ctx, ns, p)).To(Equal(restartsBefore[p]), "holder %s restarted", p)
		}
	}, SpecTimeout(8*time.Minute))

	It("nvidia.com/gpu: 2 gives two whole cards when gpu.tangram.dev serves the extended resource", func(ctx SpecContext) {
		scenario("extended resource nvidia.com/gpu served by DeviceClass gpu.tangram.dev")
		setExtendedResourceName(ctx, ptr.To("nvidia.com/gpu"))
		DeferCleanup(func(ctx SpecContext) { setExtendedResourceName(ctx, nil) })
		ns := newNamespace(ctx)
		pod := gpuPod(ns, "extended", "")
		pod.Spec.ResourceClaims = nil
		pod.Spec.Containers[0].Resources = corev1.ResourceRequirements{
			Limits: corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("2")},
		}
		// The scheduler may not have seen the class change yet: retry.
		createPod(ctx, pod)
		report := waitRunning(ctx, ns, pod.Name)
		printPodOutput(ctx, ns, pod.Name)
		got := getPod(ctx, ns, pod.Name)
		Expect(got.Status.ExtendedResourceClaimStatus).NotTo(BeNil(), "the scheduler made no claim for the extended resource")
		claim, err := clientset.ResourceV1().ResourceClaims(ns).Get(ctx, got.Status.ExtendedResourceClaimStatus.ResourceClaimName, metav1.GetOptions{})
		Expect(err).NotTo(HaveOccurred())
		describeAllocation(pod.Name, claim)
		res := results(claim)
		Expect(res).To(HaveLen(2))
		devices := nodeDevices(ctx, gpuNode)
		var uuids []string
		for _, r := range res {
			uuids = append(uuids, stringAttr(devices[r.Device], device.AttrUUID))
			expectDeviceStatus(ctx, ns, claim.Name, r, "exclusive")
		}
		Expect(strings.Split(report["NVIDIA_VISIBLE_DEVICES"], ",")).To(ConsistOf(uuids))
		Expect(report).To(HaveKeyWithValue("TANGRAM_SHARING_BACKEND", "exclusive,exclusive"))
	}, SpecTimeout(6*time.Minute))

	It("allocationMode All gives every card matching the selector", func(ctx SpecContext) {
		scenario("allocationMode: All")
		ns := newNamespace(ctx)
		all := wholeGPUs(0)
		all.Requests[0].Exactly.AllocationMode = resourceapi.DeviceAllocationModeAll
		all.Requests[0].Exactly.Selectors = []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{
			Expression: fmt.Sprintf(`device.attributes[%q].index < 2`, device.DriverName),
		}}}
		createTemplate(ctx, ns, "all", all)
		createPod(ctx, gpuPod(ns, "all", "all"))
		report := waitRunning(ctx, ns, "all")
		claim := allocatedClaim(ctx, ns, "all")
		describeAllocation("all", claim)
		devices := nodeDevices(ctx, gpuNode)
		var want []string
		for _, r := range results(claim) {
			want = append(want, stringAttr(devices[r.Device], device.AttrUUID))
		}
		Expect(want).To(HaveLen(2), "All with index < 2 must give gpu-0 and gpu-1")
		Expect(strings.Split(report["NVIDIA_VISIBLE_DEVICES"], ",")).To(ConsistOf(want))
	}, SpecTimeout(6*time.Minute))
})

var _ = Describe("DRA API features: DeviceTaintRule", func() {
	It("a NoSchedule DeviceTaintRule on a shared card keeps new shares off it while its share keeps running", func(ctx SpecContext) {
		scenario("DeviceTaintRule NoSchedule on the card of a running share")
		ns := newNamespace(ctx)
		createTemplate(ctx, ns, "share", memoryShare("20Gi"))
		createPod(ctx, gpuPod(ns, "first", "share"))
		waitRunning(ctx, ns, "first")
		first := results(allocatedClaim(ctx, ns, "first"))
		Expect(first).To(HaveLen(1))
		card := first[0].Device
		rule := &resourceapi.DeviceTaintRule{
			ObjectMeta: metav1.ObjectMeta{GenerateName: "tangram-e2e-"},
			Spec: resourceapi.DeviceTaintRuleSpec{
				DeviceSelector: &resourceapi.DeviceTaintSelector{Driver: ptr.To(device.DriverName), Pool: ptr.To(first[0].Pool), Device: ptr.To(card)},
				Taint:          resourceapi.DeviceTaint{Key: "e2e.tangram.dev/maintenance", Effect: resourceapi.DeviceTaintEffectNoSchedule},
			},
		}
		created, err := clientset.ResourceV1().DeviceTaintRules().Create(ctx, rule, metav1.CreateOptions{})
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(func(ctx SpecContext) {
			Expect(clientset.ResourceV1().DeviceTaintRules().Delete(ctx, created.Name, metav1.DeleteOptions{})).To(Succeed())
		})
		GinkgoWriter.Printf("  DeviceTaintRule %s: NoSchedule on %s\n", created.Name, card)
		// Without the taint the packing puts the second share beside the
		// first. The scheduler learns of the rule through an informer, so a
		// share created at once may still land there: then it is deleted
		// and tried again, a few times.
		var got string
		for attempt := range 3 {
			name := fmt.Sprintf("second-%d", attempt)
			createPod(ctx, gpuPod(ns, name, "share"))
			waitRunning(ctx, ns, name)
			second := results(allocatedClaim(ctx, ns, name))
			Expect(second).To(HaveLen(1))
			got = second[0].Device
			if got != card {
				break
			}
			GinkgoWriter.Printf("  %s landed on %s before the scheduler saw the rule; retrying\n", name, card)
			deletePodAndWait(ctx, ns, name)
		}
		Expect(got).NotTo(Equal(card), "new shares keep landing on the tainted card")
		Expect(getPod(ctx, ns, "first").Status.Phase).To(Equal(corev1.PodRunning), "NoSchedule must not evict the running share")
		Expect(restarts(ctx, ns, "first")).To(BeZero())
	}, SpecTimeout(6*time.Minute))
})

// containerReport waits for one container's gpu-info report.
func containerReport(ctx context.Context, ns, pod, container string) map[string]string {
	var report map[string]string
	Eventually(func(g Gomega) {
		raw, err := clientset.CoreV1().Pods(ns).GetLogs(pod, &corev1.PodLogOptions{Container: container}).DoRaw(ctx)
		g.Expect(err).NotTo(HaveOccurred())
		var complete bool
		report, complete = parseReport(string(raw))
		g.Expect(complete).To(BeTrue(), "container %s of %s has not printed its report", container, pod)
	}).WithContext(ctx).WithTimeout(time.Minute).WithPolling(pollEvery).Should(Succeed())
	GinkgoWriter.Printf("  container %s of %s: NVIDIA_VISIBLE_DEVICES=%s\n", container, pod, report["NVIDIA_VISIBLE_DEVICES"])
	return report
}

// reportValues lists every value of a report, split at commas.
func reportValues(report map[string]string) []string {
	var out []string
	for _, v := range report {
		out = append(out, strings.Split(v, ",")...)
	}
	return out
}

func restarts(ctx context.Context, ns, pod string) int32 {
	var n int32
	for _, s := range getPod(ctx, ns, pod).Status.ContainerStatuses {
		n += s.RestartCount
	}
	return n
}

// expectDeviceStatus waits until the claim's status.devices holds our entry
// for the result, with the card's UUID, the given enforcement and Ready.
func expectDeviceStatus(ctx context.Context, ns, claim string, r resourceapi.DeviceRequestAllocationResult, enforcement string) {
	devices := nodeDevices(ctx, gpuNode)
	Eventually(func(g Gomega) {
		c, err := clientset.ResourceV1().ResourceClaims(ns).Get(ctx, claim, metav1.GetOptions{})
		g.Expect(err).NotTo(HaveOccurred())
		var found *resourceapi.AllocatedDeviceStatus
		for i, d := range c.Status.Devices {
			if d.Driver == r.Driver && d.Pool == r.Pool && d.Device == r.Device && ptr.Deref(d.ShareID, "") == string(ptr.Deref(r.ShareID, types.UID(""))) {
				found = &c.Status.Devices[i]
			}
		}
		g.Expect(found).NotTo(BeNil(), "claim %s/%s has no status entry for %s", ns, claim, r.Device)
		g.Expect(found.Data).NotTo(BeNil())
		var data map[string]any
		g.Expect(json.Unmarshal(found.Data.Raw, &data)).To(Succeed())
		g.Expect(data).To(HaveKeyWithValue("uuid", stringAttr(devices[r.Device], device.AttrUUID)))
		g.Expect(data).To(HaveKeyWithValue("enforcement", enforcement))
		g.Expect(data).To(HaveKey("pciBusID"))
		g.Expect(data).To(HaveKey("productName"))
		ready := false
		for _, cond := range found.Conditions {
			ready = ready || (cond.Type == "Ready" && cond.Status == metav1.ConditionTrue)
		}
		g.Expect(ready).To(BeTrue(), "status entry of %s is not Ready: %+v", r.Device, found.Conditions)
		GinkgoWriter.Printf("  claim %s status.devices[%s]: %s\n", claim, r.Device, found.Data.Raw)
	}).WithContext(ctx).WithTimeout(time.Minute).WithPolling(pollEvery).Should(Succeed())
}

// setExtendedResourceName sets (or, with nil, clears) the extended resource
// gpu.tangram.dev serves, as the chart's deviceClasses.gpu.extendedResourceName does.
func setExtendedResourceName(ctx context.Context, name *string) {
	Eventually(func() error {
		dc, err := clientset.ResourceV1().DeviceClasses().Get(ctx, device.DeviceClassName, metav1.GetOptions{})
		if err != nil {
			return err
		}
		dc.Spec.ExtendedResourceName = name
		_, err = clientset.ResourceV1().DeviceClasses().Update(ctx, dc, metav1.UpdateOptions{})
		return err
	}).WithContext(ctx).WithTimeout(30 * time.Second).Should(Succeed())
}
