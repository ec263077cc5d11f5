//go:build e2e

package e2e

import (
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/tangram-gpu/tangram/pkg/device"
)

var _ = Describe("Whole cards", func() {
	It("gives two pods with one GPU each two different cards", func(ctx SpecContext) {
		scenario("whole cards: two pods, one GPU each, get different UUIDs")
		ns := newNamespace(ctx)
		createTemplate(ctx, ns, "one-gpu", wholeGPUs(1))
		pods := []string{"whole-a", "whole-b"}
		for _, p := range pods {
			createPod(ctx, gpuPod(ns, p, "one-gpu"))
		}
		devices := nodeDevices(ctx, gpuNode)
		seen := map[string]string{}
		for _, p := range pods {
			report := waitRunning(ctx, ns, p)
			printPodOutput(ctx, ns, p)
			claim := allocatedClaim(ctx, ns, p)
			describeAllocation(p, claim)

			res := results(claim)
			Expect(res).To(HaveLen(1), "claim of %s should hold exactly one device", p)
			dev := devices[res[0].Device]
			// On a shareable card a claim naming no capacity takes all of it.
			if res[0].ShareID != nil {
				Expect(res[0].ConsumedCapacity[device.CapacityMemory]).To(BeComparableTo(dev.Capacity[device.CapacityMemory].Value),
					"a whole-card claim on a shareable card must consume all its memory")
			}
			Expect(report).NotTo(HaveKey("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"), "a whole card must not be limited by MPS")
			wantUUID := stringAttr(dev, device.AttrUUID)
			Expect(wantUUID).NotTo(BeEmpty(), "device %s has no uuid attribute in the ResourceSlice", res[0].Device)
			Expect(report).To(HaveKeyWithValue("NVIDIA_VISIBLE_DEVICES", wantUUID),
				"pod %s should see exactly the UUID of its allocated device %s", p, res[0].Device)
			Expect(seen).NotTo(HaveKey(wantUUID), "pods %s and %s got the same card", seen[wantUUID], p)
			seen[wantUUID] = p
		}
	}, SpecTimeout(6*time.Minute))
})
