package dra_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"

	"github.com/tangram-gpu/tangram/pkg/device"
	"github.com/tangram-gpu/tangram/pkg/dra"
)

// TestAdminAccessNamingNoCapacity pins what the 1.37 allocator does with
// admin access as the Kubernetes docs and the reference example driver
// write it: adminAccess: true and no capacity request. On a card published
// with allowMultipleAllocations (every card of a sharing node) the
// allocator skips the "device in use" check for admin access but still
// checks that the request's capacity fits beside the holders'
// (CmpRequestOverCapacity, kubernetes/kubernetes#140729), and a request
// that names no memory asks for the request policy's default: all of it.
// So the documented form fits only a free card; beside a whole-card
// holder or full shares it is unschedulable, while the same request with
// memory 0 fits everywhere. No default of Tangram's request policy can
// change that without also giving a whole-card claim (which names no
// capacity either) a part of the card, so the chart refuses the documented
// form at creation (templates/admission-policy-claims.yaml,
// TestAdminAccessPolicyMatchesAllocator). When this test starts failing
// because the documented form fits, the allocator has been fixed: the
// refusal can go (docs/resourceslices.md).
func TestAdminAccessNamingNoCapacity(t *testing.T) {
	onCard := func(i int) string { return fmt.Sprintf(`device.attributes["gpu.tangram.dev"].index == %d`, i) }
	admin := func(card int, memoryZero bool) *resourceapi.ResourceClaim {
		r := dra.WholeGPUs("monitor", 1, onCard(card))
		if memoryZero {
			r = dra.AdminGPU("monitor", onCard(card))
		}
		r.Exactly.AdminAccess = ptr.To(true)
		return dra.Claim(fmt.Sprintf("admin-%d", card), nil, r)
	}
	tests := []struct {
		name       string
		sharing    bool
		card       int
		memoryZero bool
		// fits: the admin claim is allocated; wantAllMemory: its result
		// says it consumed the card's whole default memory.
		fits, wantAllMemory bool
	}{
		{name: "documented form beside a whole-card holder", sharing: true, card: 0},
		{name: "documented form beside full shares", sharing: true, card: 1},
		{name: "documented form on a free card asks for all its memory", sharing: true, card: 2, fits: true, wantAllMemory: true},
		{name: "documented form on a whole-card node", sharing: false, card: 0, fits: true},
		{name: "memory 0 beside a whole-card holder", sharing: true, card: 0, memoryZero: true, fits: true},
		{name: "memory 0 beside full shares", sharing: true, card: 1, memoryZero: true, fits: true},
		{name: "memory 0 on a whole-card node", sharing: false, card: 0, memoryZero: true, fits: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			n := publishedNode(t, "dgx-h100", tc.sharing)
			holder, err := n.Allocate(ctx, whole("holder"))
			if err != nil {
				t.Fatal(err)
			}
			if got := dra.Devices(holder.Status.Allocation); len(got) != 1 || got[0] != "gpu-0" {
				t.Fatalf("the whole-card holder got %v, want gpu-0", got)
			}
			if tc.sharing {
				for _, name := range []string{"s1", "s2"} {
					if _, err := n.Allocate(ctx, share(name, q("40Gi"), q("50"))); err != nil {
						t.Fatal(err)
					}
				}
			}
			allocated, err := n.Allocate(ctx, admin(tc.card, tc.memoryZero))
			if !tc.fits {
				if !errors.Is(err, dra.ErrUnschedulable) {
					t.Fatalf("admin access naming no capacity on busy gpu-%d: got %v, want unschedulable (if it fits now, the allocator no longer checks an admin request's capacity: drop the chart's refusal)", tc.card, err)
				}
				return
			}
			if err != nil {
				t.Fatalf("admin access to gpu-%d: %v", tc.card, err)
			}
			r := allocated.Status.Allocation.Devices.Results[0]
			if want := fmt.Sprintf("gpu-%d", tc.card); r.Device != want || !ptr.Deref(r.AdminAccess, false) {
				t.Fatalf("admin result %s (adminAccess %v), want %s with admin access", r.Device, ptr.Deref(r.AdminAccess, false), want)
			}
			mem, consumed := r.ConsumedCapacity[device.CapacityMemory]
			if tc.wantAllMemory {
				def := cardDefaultMemory(t, n, r.Device)
				if !consumed || mem.Cmp(def) != 0 {
					t.Errorf("admin result consumed memory %s, want the default %s (the request names none)", mem.String(), def.String())
				}
			} else if consumed && !mem.IsZero() {
				t.Errorf("admin result consumed memory %s, want none", mem.String())
			}
			// Either way the admin result takes nothing: the scheduler
			// skips admin results, so a share still fits on gpu-2.
			if tc.sharing {
				if _, err := n.Allocate(ctx, dra.Claim("after", nil, dra.SharedGPU("gpu", q("40Gi"), q("50"), onCard(2)))); err != nil {
					t.Errorf("a share no longer fits on gpu-2 after the admin claim: %v", err)
				}
			}
		})
	}
}

// cardDefaultMemory is the memory request policy's default of a published
// card: what a request that names no memory consumes.
func cardDefaultMemory(t *testing.T, n *dra.Node, name string) resource.Quantity {
	t.Helper()
	for _, s := range n.Slices {
		for _, d := range s.Spec.Devices {
			if d.Name == name {
				c := d.Capacity[device.CapacityMemory]
				if c.RequestPolicy == nil || c.RequestPolicy.Default == nil {
					t.Fatalf("%s publishes no memory default", name)
				}
				return *c.RequestPolicy.Default
			}
		}
	}
	t.Fatalf("no device %s", name)
	return resource.Quantity{}
}
