//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/tangram-gpu/tangram/pkg/gpu/nvcaps"
	"github.com/tangram-gpu/tangram/pkg/plugin/claimstatus"
)

// migRealPathLabel marks the MIG scenario on the mock driver root: `make
// test-e2e-realpath` runs it in a stage of its own (e2e-realpath-mig), with
// the chart reinstalled on a mock root serving the built-in profile
// mig-h100 (cards 0 and 1 in MIG mode). It is not labelled mig, so the
// demo's fake-path run (label filter mig) leaves it out.
const migRealPathLabel = "mig-realpath"

var _ = Describe("Real GPU path: MIG partitions", Label(realPathLabel, migRealPathLabel), func() {
	It("runs a 1g and a 3g partition of one card side by side, each container with exactly its card's node and its instance's capability nodes, then the 7g", func(ctx SpecContext) {
		Expect(*mockDriverRoot).NotTo(BeEmpty(), "pass --mock-driver-root (make test-e2e-realpath does)")
		Expect(*mockNVMLStateDir).NotTo(BeEmpty(), "pass --mock-nvml-state-dir")
		marker := readMarker(filepath.Join(*mockDriverRoot, mockProfileMarker))
		Expect(marker).To(HaveKeyWithValue("profile", "mig-h100"), "the MIG stage needs the mock root on profile mig-h100")
		capsMajor := mockCapsMajor()
		minors := mockCardMinors()
		var parent string // card 0's UUID, whose instances must all be gone at the end
		migScenario{
			checkPod: func(ctx context.Context, ns, pod string, data claimstatus.DeviceData, report map[string]string) {
				parent = data.MIG.ParentUUID
				minor, ok := minors[data.MIG.ParentUUID]
				Expect(ok).To(BeTrue(), "the mock root's devices file has no card %s", data.MIG.ParentUUID)
				cardNode := fmt.Sprintf("/dev/nvidia%d", minor)
				var cards []string
				for _, n := range strings.Split(report["DEVICE_NODES"], ",") {
					if isCardNode(n) {
						cards = append(cards, n)
					}
				}
				Expect(cards).To(ConsistOf(cardNode), "pod %s must see its parent card's node and no other card's", pod)
				// The minors as the real driver numbers them
				// (docs/gpu-reports/h200-580.159.04-mig-caps.txt): GPU
				// instance I of the card of minor G is 3 + 135*G + 9*I,
				// its compute instance C that + 1 + C.
				gi := 3 + 135*minor + 9*data.MIG.GPUInstanceID
				ci := gi + 1 + data.MIG.ComputeInstanceID
				want := []string{
					fmt.Sprintf("/dev/nvidia-caps/nvidia-cap%d=%d:%d", gi, capsMajor, gi),
					fmt.Sprintf("/dev/nvidia-caps/nvidia-cap%d=%d:%d", ci, capsMajor, ci),
				}
				Expect(strings.Split(report["CAP_NODES"], ",")).To(ConsistOf(want),
					"pod %s (GPU instance %d, compute instance %d of card minor %d) must see exactly its two capability nodes", pod, data.MIG.GPUInstanceID, data.MIG.ComputeInstanceID, minor)
				GinkgoWriter.Printf("  pod %s: %s, %s\n", pod, cardNode, report["CAP_NODES"])
				// The mock library records the card's instances where
				// afterAll looks for them: without this, a state file
				// written elsewhere would make afterAll's check pass with
				// nothing to check.
				state, err := os.ReadFile(filepath.Join(*mockNVMLStateDir, "mig", parent))
				Expect(err).NotTo(HaveOccurred(), "the mock library's MIG state of card %s while pod %s runs", parent, pod)
				Expect(strings.TrimSpace(string(state))).NotTo(BeEmpty(), "no instance recorded on card %s while pod %s runs", parent, pod)
			},
			afterAll: func(ctx context.Context) {
				By("unprepare destroyed every instance in the mock library")
				Expect(parent).NotTo(BeEmpty())
				Eventually(func(g Gomega) {
					data, err := os.ReadFile(filepath.Join(*mockNVMLStateDir, "mig", parent))
					if os.IsNotExist(err) {
						return
					}
					g.Expect(err).NotTo(HaveOccurred())
					g.Expect(strings.TrimSpace(string(data))).To(BeEmpty(), "instances left on card %s", parent)
				}).WithContext(ctx).WithTimeout(time.Minute).WithPolling(pollEvery).Should(Succeed())
			},
		}.run(ctx)
	}, SpecTimeout(8*time.Minute))
})

// mockCapsMajor is nvidia-caps' major in the mock root's /proc/devices.
func mockCapsMajor() uint32 {
	data, err := os.ReadFile(filepath.Join(*mockDriverRoot, "proc", nvcaps.DevicesFile))
	Expect(err).NotTo(HaveOccurred(), "the mock driver root's proc/devices")
	devices, err := nvcaps.ParseDevices(data)
	Expect(err).NotTo(HaveOccurred())
	major, err := devices.CharMajor(nvcaps.CapsDeviceName)
	Expect(err).NotTo(HaveOccurred())
	return major
}

// mockCardMinors are the cards' device minors by UUID, from the mock
// library's devices file ("gpu <index> <minor> <uuid> ...").
func mockCardMinors() map[string]int {
	data, err := os.ReadFile(filepath.Join(*mockDriverRoot, "usr/share/tangram-mock-nvml/devices"))
	Expect(err).NotTo(HaveOccurred(), "the mock library's devices file")
	out := map[string]int{}
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		if len(f) >= 4 && f[0] == "gpu" {
			minor, err := strconv.Atoi(f[2])
			Expect(err).NotTo(HaveOccurred(), "devices file line %q", line)
			out[f[3]] = minor
		}
	}
	return out
}
