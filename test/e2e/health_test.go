//go:build e2e

package e2e

import (
	"context"
	"flag"
	"fmt"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"github.com/onsi/gomega/types"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	mocknvml "github.com/tangram-gpu/tangram/hack/mock-nvml"
	"github.com/tangram-gpu/tangram/pkg/device"
	"github.com/tangram-gpu/tangram/pkg/plugin/prepared"
	"github.com/tangram-gpu/tangram/pkg/plugin/xidtaint"
)

var healthEventCmd = flag.String("health-event-cmd", "", "shell command that injects a health event for a fake GPU of the plugin under test; the scenario appends flags of `dra-kubelet-plugin health-event` (--gpu N --xid X | --recovered). With the chart: `kubectl exec -n <ns> <plugin pod> -- /dra-kubelet-plugin health-event --state-dir <kubeletPlugin.hostPaths.stateDir>`; the local cluster's is `hack/local-cluster/chart.sh health-event`")

// An injected event reaches the slice through the plugin (it polls its
// events file every 250ms) and the ResourceSlice controller's work queue,
// the pod's status through the kubelet's status manager, and the node's
// events through the event broadcaster: all Kubernetes' own queues, so
// these waits are waitKube's, which prints how long each took (they were
// limited to 30 s).

var _ = Describe("GPU health", func() {
	It("taints a card on a fatal XID, reports it in the pod's status, keeps new pods off it and lets it recover", func(ctx SpecContext) {
		scenario("GPU health: fatal XID → NoSchedule taint + Unhealthy in pod status; recovery; informational XID → None taint")
		ns := newNamespace(ctx)
		createTemplate(ctx, ns, "one-gpu", wholeGPUs(1))

		By("a pod holds one whole card")
		createPod(ctx, gpuPod(ns, "victim", "one-gpu"))
		waitRunning(ctx, ns, "victim")
		victimClaim := allocatedClaim(ctx, ns, "victim")
		res := results(victimClaim)
		Expect(res).To(HaveLen(1))
		sick := res[0].Device
		victimID := healthResourceID(victimClaim, res[0])
		index := deviceIndex(ctx, sick)
		GinkgoWriter.Printf("  victim holds %s (index %d)\n", sick, index)
		DeferCleanup(func(ctx SpecContext) {
			// Leave the card healthy for the scenarios after this one.
			injectHealthEvent(ctx, fmt.Sprintf("--gpu %d --recovered", index))
			waitTaints(ctx, sick, BeEmpty())
		})
		expectPodDeviceHealth(ctx, ns, "victim", victimID, "Healthy")

		By("a fatal XID (79, fallen off the bus) taints the card NoSchedule")
		injectHealthEvent(ctx, fmt.Sprintf("--gpu %d --xid 79 --message e2e", index))
		waitTaints(ctx, sick, ConsistOf(SatisfyAll(
			HaveField("Key", xidtaint.TaintKeyXID), HaveField("Value", "79"), HaveField("Effect", resourceapi.DeviceTaintEffectNoSchedule))))
		msg := expectPodDeviceHealth(ctx, ns, "victim", victimID, "Unhealthy")
		Expect(msg).To(ContainSubstring("XID 79"), "the pod's status should say why the card is unhealthy")
		Expect(getPod(ctx, ns, "victim").Status.Phase).To(Equal(corev1.PodRunning), "NoSchedule must not evict the pod holding the card")
		waitNodeEvent(ctx, "GPUUnhealthy", sick)

		By("a new whole-card pod is placed on another card; one asking for the tainted card waits")
		createPod(ctx, gpuPod(ns, "newcomer", "one-gpu"))
		waitRunning(ctx, ns, "newcomer")
		Expect(results(allocatedClaim(ctx, ns, "newcomer"))[0].Device).NotTo(Equal(sick), "a pod was placed on the tainted card")
		createTemplate(ctx, ns, "the-sick-card", cardWithIndex(index))
		createPod(ctx, gpuPod(ns, "waiter", "the-sick-card"))
		Consistently(func(g Gomega) {
			g.Expect(getPod(ctx, ns, "waiter").Spec.NodeName).To(BeEmpty(), "a pod got the tainted card")
		}).WithContext(ctx).WithTimeout(10 * time.Second).WithPolling(pollEvery).Should(Succeed())

		By("recovery removes the taint and the card is allocatable again")
		injectHealthEvent(ctx, fmt.Sprintf("--gpu %d --recovered", index))
		waitTaints(ctx, sick, BeEmpty())
		expectPodDeviceHealth(ctx, ns, "victim", victimID, "Healthy")
		waitNodeEvent(ctx, "GPURecovered", sick)
		deletePodAndWait(ctx, ns, "victim")
		waitRunning(ctx, ns, "waiter")
		waiterClaim := allocatedClaim(ctx, ns, "waiter")
		Expect(results(waiterClaim)[0].Device).To(Equal(sick))

		By("an informational XID (13, an application's fault) is a None taint only")
		injectHealthEvent(ctx, fmt.Sprintf("--gpu %d --xid 13", index))
		waitTaints(ctx, sick, ConsistOf(SatisfyAll(
			HaveField("Key", xidtaint.TaintKeyXID), HaveField("Value", "13"), HaveField("Effect", resourceapi.DeviceTaintEffectNone))))
		expectPodDeviceHealth(ctx, ns, "waiter", healthResourceID(waiterClaim, results(waiterClaim)[0]), "Healthy")
	}, SpecTimeout(15*time.Minute))
})

var _ = Describe("GPU health through NVML", Label(realPathLabel), func() {
	It("taints cards on an XID and a lost GPU from the mock NVML library, and starts clean after a plugin restart", func(ctx SpecContext) {
		scenario("real path: NVML events (mock library) → XID and gpu-lost taints; a restarted plugin publishes the cards untainted")
		Expect(*mockNVMLStateDir).NotTo(BeEmpty(), "pass --mock-nvml-state-dir (make test-e2e-realpath does)")
		state := mocknvml.State{Dir: *mockNVMLStateDir}
		Expect(nodeDevices(ctx, gpuNode)).To(HaveKey("gpu-1"))
		Expect(nodeDevices(ctx, gpuNode)).To(HaveKey("gpu-2"))
		// The plugin's event set sees only events appended after it exists.
		Expect(state.TriggerXID(1, 79)).To(Succeed())
		waitTaints(ctx, "gpu-1", ConsistOf(SatisfyAll(
			HaveField("Key", xidtaint.TaintKeyXID), HaveField("Value", "79"), HaveField("Effect", resourceapi.DeviceTaintEffectNoSchedule))))
		Expect(state.LoseGPU(2)).To(Succeed())
		waitTaints(ctx, "gpu-2", ConsistOf(SatisfyAll(
			HaveField("Key", xidtaint.TaintKeyGPULost), HaveField("Effect", resourceapi.DeviceTaintEffectNoSchedule))))
		waitNodeEvent(ctx, "GPUUnhealthy", "gpu-2")

		By("restarting the plugin pod")
		old := pluginPod(ctx)
		Expect(clientset.CoreV1().Pods(old.Namespace).Delete(ctx, old.Name, metav1.DeleteOptions{})).To(Succeed())
		waitKube(ctx, "a new Ready plugin pod", pollEvery, func(g Gomega) {
			p := pluginPodOrNil(ctx, g)
			g.Expect(p).NotTo(BeNil(), "no plugin pod on %s", gpuNode)
			g.Expect(p.UID).NotTo(Equal(old.UID), "the old plugin pod is still there")
			g.Expect(p.Status.ContainerStatuses).NotTo(BeEmpty())
			g.Expect(p.Status.ContainerStatuses[0].Ready).To(BeTrue(), "the new plugin pod is not ready")
		})
		waitTaints(ctx, "gpu-1", BeEmpty())
		waitTaints(ctx, "gpu-2", BeEmpty())
	}, SpecTimeout(15*time.Minute))
})

// injectHealthEvent runs --health-event-cmd with args.
func injectHealthEvent(ctx context.Context, args string) {
	Expect(*healthEventCmd).NotTo(BeEmpty(), "pass --health-event-cmd (hack/local-cluster/e2e.sh sets it for the local cluster)")
	runShell(ctx, "inject a GPU health event", *healthEventCmd+" "+args)
}

// deviceIndex is the index attribute of a device on the GPU node.
func deviceIndex(ctx context.Context, name string) int64 {
	d, ok := nodeDevices(ctx, gpuNode)[name]
	Expect(ok).To(BeTrue(), "no device %s on %s", name, gpuNode)
	a, ok := d.Attributes[device.AttrIndex]
	Expect(ok && a.IntValue != nil).To(BeTrue(), "device %s has no index attribute", name)
	return *a.IntValue
}

// cardWithIndex asks for the one whole card with that index.
func cardWithIndex(index int64) resourceapi.DeviceClaim {
	c := wholeGPUs(1)
	c.Requests[0].Exactly.Selectors = []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{
		Expression: fmt.Sprintf(`device.attributes["%s"].%s == %d`, device.DriverName, device.AttrIndex, index),
	}}}
	return c
}

// waitTaints waits until the device's taints in the slice match.
func waitTaints(ctx context.Context, device string, matcher types.GomegaMatcher) {
	waitKube(ctx, "taints of "+device+" in the ResourceSlice", pollEvery, func(g Gomega) {
		d, ok := nodeDevices(ctx, gpuNode)[device]
		g.Expect(ok).To(BeTrue())
		g.Expect(d.Taints).To(matcher, "taints of %s in the ResourceSlice", device)
	})
}

// healthResourceID is how the kubelet names an allocated device in
// allocatedResourcesStatus: its CDI device ID.
func healthResourceID(claim *resourceapi.ResourceClaim, r resourceapi.DeviceRequestAllocationResult) string {
	shareID := ""
	if r.ShareID != nil {
		shareID = string(*r.ShareID)
	}
	return prepared.CDIDeviceID(prepared.CDIDeviceName(string(claim.UID), r.Device, shareID))
}

// expectPodDeviceHealth waits until the pod's container reports the
// resource's health in allocatedResourcesStatus, and returns its message.
func expectPodDeviceHealth(ctx context.Context, ns, pod, resourceID, want string) string {
	var msg string
	waitKube(ctx, "pod "+pod+" reports "+resourceID+" "+want, pollEvery, func(g Gomega) {
		p := getPod(ctx, ns, pod)
		var seen []string
		for _, cs := range p.Status.ContainerStatuses {
			for _, rs := range cs.AllocatedResourcesStatus {
				for _, h := range rs.Resources {
					seen = append(seen, fmt.Sprintf("%s=%s", h.ResourceID, h.Health))
					if string(h.ResourceID) == resourceID && string(h.Health) == want {
						msg = ""
						if h.Message != nil {
							msg = *h.Message
						}
						return
					}
				}
			}
		}
		g.Expect(seen).To(ContainElement(resourceID+"="+want), "allocatedResourcesStatus of pod %s", pod)
	})
	GinkgoWriter.Printf("  pod %s: %s is %s (%q)\n", pod, resourceID, want, msg)
	return msg
}

// waitNodeEvent waits for an Event on the GPU node with reason naming the
// device.
func waitNodeEvent(ctx context.Context, reason, device string) {
	waitKube(ctx, reason+" event of "+device+" on node "+gpuNode, pollEvery, func(g Gomega) {
		events, err := clientset.CoreV1().Events(metav1.NamespaceDefault).List(ctx, metav1.ListOptions{
			FieldSelector: "involvedObject.kind=Node,involvedObject.name=" + gpuNode + ",reason=" + reason,
		})
		g.Expect(err).NotTo(HaveOccurred())
		var messages []string
		for _, e := range events.Items {
			messages = append(messages, e.Message)
		}
		g.Expect(messages).To(ContainElement(HavePrefix(device+" ")), "%s events on node %s", reason, gpuNode)
	})
}
