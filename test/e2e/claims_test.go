//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/tangram-gpu/tangram/pkg/device"
)

// wholeGPUs asks for count whole cards of the gpu.tangram.dev class.
func wholeGPUs(count int64) resourceapi.DeviceClaim {
	return resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{{
		Name: "gpus",
		Exactly: &resourceapi.ExactDeviceRequest{
			DeviceClassName: device.DeviceClassName,
			AllocationMode:  resourceapi.DeviceAllocationModeExactCount,
			Count:           count,
		},
	}}}
}

// memoryShare asks for a share of one card's memory.
func memoryShare(memory string) resourceapi.DeviceClaim {
	return resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{{
		Name: "share",
		Exactly: &resourceapi.ExactDeviceRequest{
			DeviceClassName: device.SharedDeviceClassName,
			Capacity: &resourceapi.CapacityRequirements{Requests: map[resourceapi.QualifiedName]resource.Quantity{
				device.CapacityMemory: resource.MustParse(memory),
			}},
		},
	}}}
}

// nvlinkGang asks for count cards in one claim that share an NVLink domain.
func nvlinkGang(count int64) resourceapi.DeviceClaim {
	c := wholeGPUs(count)
	c.Constraints = []resourceapi.DeviceConstraint{{
		Requests:       []string{"gpus"},
		MatchAttribute: ptr.To(resourceapi.FullyQualifiedName(device.DriverName + "/" + device.AttrNVLinkDomain)),
	}}
	return c
}

// podClaim returns the claim generated for the pod's "gpu" claim once the
// resourceclaim controller has created it.
func podClaim(ctx context.Context, ns, pod string) *resourceapi.ResourceClaim {
	var claim *resourceapi.ResourceClaim
	Eventually(func(g Gomega) {
		p := getPod(ctx, ns, pod)
		var name string
		for _, s := range p.Status.ResourceClaimStatuses {
			if s.Name == claimName && s.ResourceClaimName != nil {
				name = *s.ResourceClaimName
			}
		}
		g.Expect(name).NotTo(BeEmpty(), "pod %s has no generated claim yet", pod)
		c, err := clientset.ResourceV1().ResourceClaims(ns).Get(ctx, name, metav1.GetOptions{})
		g.Expect(err).NotTo(HaveOccurred())
		claim = c
	}).WithContext(ctx).WithTimeout(time.Minute).WithPolling(pollEvery).Should(Succeed())
	return claim
}

// allocatedClaim waits until the pod's claim is allocated (by the
// scheduler, with its retries: waitKube) and returns it.
func allocatedClaim(ctx context.Context, ns, pod string) *resourceapi.ResourceClaim {
	var claim *resourceapi.ResourceClaim
	waitKube(ctx, "claim of pod "+pod+" allocated", pollEvery, func(g Gomega) {
		claim = podClaim(ctx, ns, pod)
		g.Expect(claim.Status.Allocation).NotTo(BeNil(), "claim of pod %s is not allocated; pod events:\n%s", pod, eventText(ctx, ns, pod))
	})
	return claim
}

// results are our driver's device results of an allocated claim.
func results(claim *resourceapi.ResourceClaim) []resourceapi.DeviceRequestAllocationResult {
	var out []resourceapi.DeviceRequestAllocationResult
	if claim.Status.Allocation == nil {
		return nil
	}
	for _, r := range claim.Status.Allocation.Devices.Results {
		if r.Driver == device.DriverName {
			out = append(out, r)
		}
	}
	return out
}

// describeAllocation prints a claim's allocation as one line per device.
func describeAllocation(pod string, claim *resourceapi.ResourceClaim) {
	for _, r := range results(claim) {
		var caps []string
		for k, v := range r.ConsumedCapacity {
			caps = append(caps, fmt.Sprintf("%s=%s", k, v.String()))
		}
		share := ""
		if r.ShareID != nil {
			share = " share " + string(*r.ShareID)
		}
		GinkgoWriter.Printf("  claim %s of pod %s: %s/%s%s %s\n", claim.Name, pod, r.Pool, r.Device, share, strings.Join(caps, " "))
	}
}

// limitsEnforced is the LimitsEnforced condition the plugin wrote into the
// status.devices entry of the pod's claim (its first device of ours),
// waiting for it to appear.
func limitsEnforced(ctx context.Context, ns, pod string) metav1.Condition {
	var found metav1.Condition
	Eventually(func(g Gomega) {
		claim := allocatedClaim(ctx, ns, pod)
		for _, d := range claim.Status.Devices {
			if d.Driver != device.DriverName {
				continue
			}
			for _, c := range d.Conditions {
				if c.Type == "LimitsEnforced" {
					found = c
					return
				}
			}
		}
		g.Expect(false).To(BeTrue(), "claim %s/%s has no LimitsEnforced condition in status.devices: %+v", ns, claim.Name, claim.Status.Devices)
	}).WithContext(ctx).WithTimeout(time.Minute).WithPolling(pollEvery).Should(Succeed())
	return found
}
