//go:build e2e

package e2e

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/tangram-gpu/tangram/pkg/device"
	"github.com/tangram-gpu/tangram/pkg/plugin/enforcement"
)

// r580Label marks the specs of the second realpath stage: the mock driver
// root re-created as NVIDIA driver r580 (what most clusters run) and the
// chart installed with its default values (hack/local-cluster/
// test-e2e-realpath.sh, stage e2e-realpath-r580). They also carry the
// realpath label, so the fake-GPU suite leaves them out.
const r580Label = "r580"

// Out of the box on r535-r580: with the chart's defaults a share runs
// (classic MPS, limits in the environment) and every place a user looks
// says it is advisory; the hard class leaves a share Pending.
var _ = Describe("Advisory shares on driver r580", Label(realPathLabel, r580Label), Ordered, func() {
	BeforeAll(func(ctx SpecContext) {
		for name, d := range nodeDevices(ctx, gpuNode) {
			Expect(stringAttr(d, device.AttrShareEnforcement)).To(Equal(string(enforcement.Advisory)), "device %s", name)
			Expect(stringAttr(d, device.AttrShareEnforcementReason)).To(Equal(device.ReasonDriverBefore615), "device %s", name)
			Expect(stringAttr(d, device.AttrShareBackend)).To(Equal(device.ShareBackendMPS), "device %s", name)
		}
	})

	It("runs a share of the default class and says in the claim's status and the pod's events that it is advisory", func(ctx SpecContext) {
		scenario("r580, chart defaults: a 20Gi share of shared-gpu.tangram.dev runs; status.devices LimitsEnforced False (Advisory, driver-before-615); a Warning event on the pod")
		ns := newNamespace(ctx)
		createTemplate(ctx, ns, "share-20gi", memoryShare("20Gi"))
		createPod(ctx, gpuPod(ns, "advisory", "share-20gi"))
		report := waitRunning(ctx, ns, "advisory")
		expectClassicShareView(ctx, ns, "advisory", report)
		cond := limitsEnforced(ctx, ns, "advisory")
		GinkgoWriter.Printf("  LimitsEnforced=%s reason %s: %s\n", cond.Status, cond.Reason, cond.Message)
		Expect(cond.Status).To(Equal(metav1.ConditionFalse))
		Expect(cond.Reason).To(Equal("Advisory"))
		Expect(cond.Message).To(ContainSubstring(device.ShareEnforcementReasonText(device.ReasonDriverBefore615)))
		Expect(cond.Message).To(ContainSubstring(device.HardSharedDeviceClassName))
		var data struct {
			ShareEnforcement       string `json:"shareEnforcement"`
			ShareEnforcementReason string `json:"shareEnforcementReason"`
		}
		claim := allocatedClaim(ctx, ns, "advisory")
		for _, d := range claim.Status.Devices {
			if d.Driver == device.DriverName && d.Data != nil {
				Expect(json.Unmarshal(d.Data.Raw, &data)).To(Succeed())
			}
		}
		Expect(data.ShareEnforcement).To(Equal(string(enforcement.Advisory)))
		Expect(data.ShareEnforcementReason).To(Equal(device.ReasonDriverBefore615))
		waitKube(ctx, "GPUShareNotEnforced event of advisory", pollEvery, func(g Gomega) {
			g.Expect(eventText(ctx, ns, "advisory")).To(ContainSubstring("GPUShareNotEnforced"), "no Warning event on the pod")
		})
		GinkgoWriter.Printf("  pod events:\n%s", eventText(ctx, ns, "advisory"))
	}, SpecTimeout(4*time.Minute))

	It("leaves a share of the hard class Pending, and the diagnosis names the class", func(ctx SpecContext) {
		scenario("r580, chart defaults: a share of hard-shared-gpu.tangram.dev stays Pending; kubectl tangram describe names the class and the level")
		ns := newNamespace(ctx)
		hard := memoryShare("20Gi")
		hard.Requests[0].Exactly.DeviceClassName = device.HardSharedDeviceClassName
		createTemplate(ctx, ns, "share-hard", hard)
		createPod(ctx, gpuPod(ns, "needs-hard", "share-hard"))
		Eventually(func(g Gomega) {
			pod := getPod(ctx, ns, "needs-hard")
			g.Expect(pod.Spec.NodeName).To(BeEmpty())
			scheduled := false
			for _, c := range pod.Status.Conditions {
				if c.Type == corev1.PodScheduled && c.Reason == corev1.PodReasonUnschedulable {
					scheduled = true
				}
			}
			g.Expect(scheduled).To(BeTrue(), "the pod is not marked Unschedulable yet")
		}).WithContext(ctx).WithTimeout(2 * time.Minute).WithPolling(pollEvery).Should(Succeed())
		why := tangramDescribe(ctx, ns, "needs-hard")
		Expect(why).To(ContainSubstring("class " + device.HardSharedDeviceClassName + " requires"))
		Expect(why).To(ContainSubstring("advisory (" + device.ReasonDriverBefore615 + ")"))
		GinkgoWriter.Printf("  kubectl tangram describe pod/needs-hard:\n%s", why)
	}, SpecTimeout(3*time.Minute))
})

// expectClassicShareView checks what a classic MPS share's container gets
// with the chart's defaults (docs/enforcement.md, "Classic MPS: what every
// share still shares"): the daemon's pipe directory read-only, its claim's
// own /dev/shm (not the daemon's <mps-root>/shm), and a daemon started
// multi-user (-M, kubeletPlugin.mps.multiUser=true), which the stand-in
// control daemon writes into its control.log.
func expectClassicShareView(ctx SpecContext, ns, pod string, report map[string]string) {
	claim := allocatedClaim(ctx, ns, pod)
	edits := claimSpecEdits(string(claim.UID))
	pipe := filepath.Join(*mpsRoot, "pipe")
	var shm, pipeOptions []string
	for _, m := range edits.Mounts {
		switch m.ContainerPath {
		case "/dev/shm":
			shm = append(shm, m.HostPath)
		case pipe:
			pipeOptions = m.Options
		}
	}
	Expect(slices.Compact(shm)).To(Equal([]string{filepath.Join(*mpsRoot, "claims", string(claim.UID), "shm")}),
		"a classic share's /dev/shm must be its claim's own, not the MPS daemon's %s", filepath.Join(*mpsRoot, "shm"))
	Expect(pipeOptions).To(ContainElement("ro"), "the classic daemon's pipe directory must be mounted read-only")
	Expect(report).To(HaveKeyWithValue("MPS_PIPE_WRITE", "read-only file system"))
	Expect(strings.Split(report["SHM_FILES"], ",")).To(ConsistOf("gpu-info-"+pod), "the share's /dev/shm holds its own marker only")
	log, err := os.ReadFile(filepath.Join(*mpsRoot, "log", "control.log"))
	Expect(err).NotTo(HaveOccurred(), "the MPS control daemon's log")
	Expect(string(log)).To(ContainSubstring("protocol 2, multi-user true"), "the classic daemon must run with -M by default")
	GinkgoWriter.Printf("  classic share: /dev/shm %s, pipe %s %v, daemon multi-user\n", shm[0], pipe, pipeOptions)
}
