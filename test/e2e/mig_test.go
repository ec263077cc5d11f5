//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	gtypes "github.com/onsi/ginkgo/v2/types"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"

	"github.com/tangram-gpu/tangram/pkg/device"
	"github.com/tangram-gpu/tangram/pkg/plugin/claimstatus"
	"github.com/tangram-gpu/tangram/pkg/plugin/xidtaint"
)

// migLabel marks the specs that need the GPU node's plugin on a profile
// with cards in MIG mode (the built-in mig-h100: cards 0 and 1 in MIG
// mode, deployments/helm/values/mig.yaml). `make demo` and `make test-demo`
// run them (demo/run-local.sh installs the chart on that profile first,
// runs them with --demo-narrate, then goes back to the demo's profile); by
// hand: hack/local-cluster/chart.sh install -f
// deployments/helm/values/mig.yaml, then E2E_LABEL_FILTER=mig make e2e
// (docs/testing.md). The default e2e run (dgx-h100) leaves them out. The
// same scenario on the mock driver root (real CDI nodes) is
// realpath_mig_test.go's, labelled mig-realpath.
const migLabel = "mig"

// migPartition asks for one MIG partition of profile on card 0 of the
// GPU node.
func migPartition(profile string) resourceapi.DeviceClaim {
	return resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{{
		Name: "mig",
		Exactly: &resourceapi.ExactDeviceRequest{
			DeviceClassName: device.MIGDeviceClassName,
			AllocationMode:  resourceapi.DeviceAllocationModeExactCount,
			Count:           1,
			Selectors: []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{Expression: fmt.Sprintf(
				"device.attributes[%q].%s == %q && device.attributes[%q].%s == 0",
				device.DriverName, device.AttrMIGProfile, profile, device.DriverName, device.AttrParentIndex)}}},
		},
	}}}
}

// migStatus is the plugin's status data of the pod's one MIG partition.
func migStatus(ctx context.Context, ns, pod string) claimstatus.DeviceData {
	var data claimstatus.DeviceData
	Eventually(func(g Gomega) {
		claim := allocatedClaim(ctx, ns, pod)
		g.Expect(claim.Status.Devices).To(HaveLen(1), "the claim's status.devices")
		g.Expect(json.Unmarshal(claim.Status.Devices[0].Data.Raw, &data)).To(Succeed())
	}).WithContext(ctx).WithTimeout(time.Minute).WithPolling(pollEvery).Should(Succeed())
	return data
}

func expectUnschedulable(ctx context.Context, ns, name string) {
	Eventually(func(g Gomega) {
		pod := getPod(ctx, ns, name)
		g.Expect(pod.Spec.NodeName).To(BeEmpty())
		unschedulable := false
		for _, c := range pod.Status.Conditions {
			if c.Type == corev1.PodScheduled && c.Reason == corev1.PodReasonUnschedulable {
				unschedulable = true
			}
		}
		g.Expect(unschedulable).To(BeTrue(), "the pod is not marked Unschedulable yet")
	}).WithContext(ctx).WithTimeout(2 * time.Minute).WithPolling(pollEvery).Should(Succeed())
}

// narrateMIGPod says, for the demo's narration, what a MIG pod got.
func narrateMIGPod(pod string, data claimstatus.DeviceData, report map[string]string) {
	demoSay("pod %-6s → MIG %s of card 0 (%s; GPU instance %d, compute instance %d, memory slices %d-%d): %s",
		pod, data.MIG.Profile, data.MIG.ParentUUID, data.MIG.GPUInstanceID, data.MIG.ComputeInstanceID,
		data.MIG.PlacementStart, data.MIG.PlacementStart+data.MIG.PlacementSize-1, data.UUID)
	narrateDemo(styleDim, fmt.Sprintf("     container sees NVIDIA_VISIBLE_DEVICES=%s\n", report["NVIDIA_VISIBLE_DEVICES"]))
}

var _ = Describe("MIG partitions", Label(migLabel), func() {
	ReportAfterEach(func(r SpecReport) {
		switch {
		case r.State.Is(gtypes.SpecStateSkipped | gtypes.SpecStatePending):
			// left out by the label filter: nothing to say
		case r.State.Is(gtypes.SpecStatePassed):
			narrateDemo(stylePass, fmt.Sprintf("   ✔ %s\n", demoOutcome))
		default:
			narrateDemo(styleFail, fmt.Sprintf("   ✘ %s\n", strings.Join(headLines(r.Failure.Message, maxFailureLines), "\n     ")))
		}
		demoOutcome = ""
	})

	It("runs a 1g and a 3g partition of one card side by side, keeps the 7g off it meanwhile, then gives it the 7g", func(ctx SpecContext) {
		migScenario{xid: true}.run(ctx)
	}, SpecTimeout(8*time.Minute))
})

// migScenario is the demo's MIG scenario: a 1g.10gb and a 3g.40gb of card 0
// side by side, each container seeing only its MIG device, the 7g.80gb
// Pending meanwhile and Running once both are gone. The fake path (label
// mig) runs it with XIDs injected through the fake cards' events file; the
// mock driver root (label mig-realpath, test/e2e/realpath_mig_test.go)
// with checks of each container's device nodes and of the mock library's
// instances.
type migScenario struct {
	// xid: an XID in one GPU instance taints only its partition, a
	// card-wide one every partition (fake cards' events file).
	xid bool
	// checkPod checks a running partition's container further (its /dev
	// on the mock driver root).
	checkPod func(ctx context.Context, ns, pod string, data claimstatus.DeviceData, report map[string]string)
	// afterAll runs once every pod is deleted.
	afterAll func(ctx context.Context)
}

func (s migScenario) run(ctx SpecContext) {
	xid := ""
	if s.xid {
		xid = "; an XID in one instance taints only its partition"
	}
	scenario("MIG: 1g.10gb and 3g.40gb of card 0 side by side, each container sees only its MIG device" + xid + "; 7g.80gb Pending until both are gone, then runs")
	demoTitle("MIG partitions: a 1g.10gb and a 3g.40gb of one H100 side by side, then the 7g.80gb (DeviceClass %s)", device.MIGDeviceClassName)
	demoSay("cards 0 and 1 of %s are in MIG mode (fake profile mig-h100); each claim asks for one partition of card 0", gpuNode)
	ns := newNamespace(ctx)
	createTemplate(ctx, ns, "mig-1g", migPartition("1g.10gb"))
	createTemplate(ctx, ns, "mig-3g", migPartition("3g.40gb"))
	createTemplate(ctx, ns, "mig-7g", migPartition("7g.80gb"))

	By("a 1g.10gb and a 3g.40gb of card 0 run side by side")
	createPod(ctx, gpuPod(ns, "small", "mig-1g"))
	createPod(ctx, gpuPod(ns, "large", "mig-3g"))
	seen := map[string]string{}
	for pod, profile := range map[string]string{"small": "1g.10gb", "large": "3g.40gb"} {
		report := waitRunning(ctx, ns, pod)
		data := migStatus(ctx, ns, pod)
		Expect(data.MIG).NotTo(BeNil(), "pod %s: status.devices data has no mig", pod)
		Expect(data.MIG.Profile).To(Equal(profile))
		Expect(data.UUID).To(HavePrefix("MIG-"), "pod %s: status.devices names the MIG device", pod)
		Expect(data.Enforcement).To(Equal(claimstatus.EnforcementMIG))
		By(fmt.Sprintf("pod %s sees exactly its MIG device %s", pod, data.UUID))
		Expect(report["NVIDIA_VISIBLE_DEVICES"]).To(Equal(data.UUID), "pod %s's container must see its MIG device and nothing else", pod)
		seen[pod] = data.UUID
		if s.checkPod != nil {
			s.checkPod(ctx, ns, pod, data, report)
		}
		narrateMIGPod(pod, data, report)
	}
	Expect(seen["small"]).NotTo(Equal(seen["large"]))

	if s.xid {
		By("an XID in the 3g.40gb's GPU instance taints only that partition; a card-wide one every partition of the card")
		large := results(allocatedClaim(ctx, ns, "large"))[0].Device
		small := results(allocatedClaim(ctx, ns, "small"))[0].Device
		gi := migStatus(ctx, ns, "large").MIG.GPUInstanceID
		DeferCleanup(func(ctx SpecContext) {
			injectHealthEvent(ctx, "--gpu 0 --recovered")
			waitTaints(ctx, large, BeEmpty())
		})
		injectHealthEvent(ctx, fmt.Sprintf("--gpu 0 --xid 43 --gpu-instance %d", gi))
		waitTaints(ctx, large, ConsistOf(SatisfyAll(HaveField("Key", xidtaint.TaintKeyXID), HaveField("Value", "43"))))
		Consistently(func(g Gomega) {
			g.Expect(nodeDevices(ctx, gpuNode)[small].Taints).To(BeEmpty(), "the 1g.10gb must not carry the 3g.40gb's XID")
		}).WithContext(ctx).WithTimeout(3 * time.Second).WithPolling(pollEvery).Should(Succeed())
		injectHealthEvent(ctx, "--gpu 0 --xid 13")
		waitTaints(ctx, small, ConsistOf(HaveField("Value", "13")))
		injectHealthEvent(ctx, "--gpu 0 --recovered")
		waitTaints(ctx, large, BeEmpty())
		waitTaints(ctx, small, BeEmpty())

		demoSay("an XID in the 3g.40gb's GPU instance %d tainted its partition only; a card-wide XID tainted both; recovered", gi)
	}

	By("meanwhile a 7g.80gb of card 0 (the whole card as one partition) is not allocatable")
	createPod(ctx, gpuPod(ns, "whole", "mig-7g"))
	expectUnschedulable(ctx, ns, "whole")
	demoSay("pod whole  (7g.80gb of card 0) stays Pending, Unschedulable, while small and large hold their partitions")

	By("once both partitions are gone, the 7g.80gb is allocated and runs")
	deletePodAndWait(ctx, ns, "small")
	deletePodAndWait(ctx, ns, "large")
	report := waitRunning(ctx, ns, "whole")
	data := migStatus(ctx, ns, "whole")
	Expect(data.MIG).NotTo(BeNil())
	Expect(data.MIG.Profile).To(Equal("7g.80gb"))
	Expect(report["NVIDIA_VISIBLE_DEVICES"]).To(Equal(data.UUID))
	Expect(strings.Contains(data.UUID, ",")).To(BeFalse())
	if s.checkPod != nil {
		s.checkPod(ctx, ns, "whole", data, report)
	}
	demoSay("small and large deleted: their GPU and compute instances destroyed")
	narrateMIGPod("whole", data, report)
	demoPassed("1g.10gb and 3g.40gb ran side by side on %s and %s, the 7g.80gb only once both were gone, each container seeing only its MIG device", seen["small"], seen["large"])
	if s.afterAll != nil {
		deletePodAndWait(ctx, ns, "whole")
		s.afterAll(ctx)
	}
}
