//go:build e2e

package e2e

import (
	"fmt"
	"path/filepath"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/tangram-gpu/tangram/pkg/device"
)

var _ = Describe("Memory fractions", func() {
	It("packs four 20Gi shares on one 80Gi card and puts a 30Gi share on another", func(ctx SpecContext) {
		scenario("memory fractions: 4 × 20Gi on one card, each sees its own limit; a 30Gi share goes elsewhere")
		// The scenario needs 80Gi cards published as shareable.
		devices := nodeDevices(ctx, gpuNode)
		var shareable80 int
		for _, d := range devices {
			if d.AllowMultipleAllocations != nil && *d.AllowMultipleAllocations {
				if m, ok := d.Capacity[device.CapacityMemory]; ok && m.Value.Cmp(resource.MustParse("80Gi")) == 0 {
					shareable80++
				}
			}
		}
		Expect(shareable80).To(BeNumerically(">=", 2), "node %s needs two shareable 80Gi cards (fake profile dgx-h100, --sharing=enabled)", gpuNode)

		ns := newNamespace(ctx)
		createTemplate(ctx, ns, "share-20gi", memoryShare("20Gi"))
		createTemplate(ctx, ns, "share-30gi", memoryShare("30Gi"))
		small := []string{"share-20gi-1", "share-20gi-2", "share-20gi-3", "share-20gi-4"}
		// One at a time: each allocation sees the previous ones, so the
		// packing is the allocator's choice, not a race between pods.
		var card string
		for _, p := range small {
			createPod(ctx, gpuPod(ns, p, "share-20gi"))
			report := waitRunning(ctx, ns, p)
			printPodOutput(ctx, ns, p)
			claim := allocatedClaim(ctx, ns, p)
			describeAllocation(p, claim)
			res := results(claim)
			Expect(res).To(HaveLen(1))
			Expect(res[0].ShareID).NotTo(BeNil(), "a memory request on the shared class takes a share")
			if card == "" {
				card = res[0].Device
			}
			Expect(res[0].Device).To(Equal(card), "every 20Gi share should land on the same card")
			uuid := stringAttr(devices[card], device.AttrUUID)
			Expect(report).To(HaveKeyWithValue("NVIDIA_VISIBLE_DEVICES", uuid))
			Expect(report).To(HaveKeyWithValue("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT", fmt.Sprintf("%s=%dM", uuid, 20*1024)),
				"pod %s should see its own 20Gi memory limit", p)
			if filepath.Base(report["CUDA_MPS_PIPE_DIRECTORY"]) == "pipe" {
				// Classic MPS: the node daemon's pipe directory, shared by
				// every share of the node, is mounted read-only.
				Expect(report).To(HaveKeyWithValue("MPS_PIPE_WRITE", "read-only file system"),
					"pod %s could write into the classic MPS daemon's pipe directory", p)
			}
			// Classic or v3: each share's /dev/shm is its claim's own, so
			// it holds this pod's marker and none of the earlier shares'.
			Expect(strings.Split(report["SHM_FILES"], ",")).To(ConsistOf("gpu-info-"+p),
				"pod %s's /dev/shm must hold its own marker only, not another share's", p)
		}

		big := "share-30gi"
		createPod(ctx, gpuPod(ns, big, "share-30gi"))
		report := waitRunning(ctx, ns, big)
		printPodOutput(ctx, ns, big)
		claim := allocatedClaim(ctx, ns, big)
		describeAllocation(big, claim)
		res := results(claim)
		Expect(res).To(HaveLen(1))
		Expect(res[0].Device).NotTo(Equal(card), "the 30Gi share does not fit next to 4 × 20Gi on an 80Gi card")
		uuid := stringAttr(devices[res[0].Device], device.AttrUUID)
		Expect(report).To(HaveKeyWithValue("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT", fmt.Sprintf("%s=%dM", uuid, 30*1024)))

		// The cluster-wide view must tell the same story as the claims.
		expectStatusJSONAgreesWithClaims(ctx)
	}, SpecTimeout(8*time.Minute))
})
