package diagnosis

import (
	"context"
	"slices"
	"strings"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"

	"github.com/tangram-gpu/tangram/pkg/cluster/fixture"
	"github.com/tangram-gpu/tangram/pkg/device"
)

// adminClaim is a monitoring claim on gpu.tangram.dev: adminAccess: true,
// asking for memory when it is not "" (the form the Kubernetes docs show
// names no capacity).
func adminClaim(memory string) *resourceapi.ResourceClaim {
	c := fixture.Whole("default", "monitor", 1, false)
	e := c.Spec.Devices.Requests[0].Exactly
	e.AdminAccess = ptr.To(true)
	if memory != "" {
		e.Capacity = &resourceapi.CapacityRequirements{Requests: map[resourceapi.QualifiedName]resource.Quantity{
			device.CapacityMemory: resource.MustParse(memory)}}
	}
	return c
}

// TestClaimAdminAccess: the diagnosis of an admin-access claim follows the
// 1.37 allocator (pkg/dra TestAdminAccessNamingNoCapacity): busy cards are
// no obstacle, but on a shared card the request's capacity must fit beside
// the holders, so the documented form (no capacity) is told to add memory
// 0, and memory 0 fits beside any holder.
func TestClaimAdminAccess(t *testing.T) {
	const noMemory = `request "gpu": has adminAccess: true but names no memory, which asks for all of it: ` +
		`the 1.37 scheduler checks that an admin request fits beside the holders of a shared card, and none of the 1 matching shared card has that free; ` +
		`add capacity: {requests: {memory: "0"}} to the request (admin access takes nothing from the card)`
	tests := []struct {
		name    string
		cluster *testCluster
		claim   *resourceapi.ResourceClaim
		fitsOn  []string
		reason  string
	}{
		{
			name:    "no capacity beside a whole-card holder of a shared card",
			cluster: newTestCluster().node("n1", "", true, "d0").share("holder", "n1", "gpu-0", "80Gi", 0),
			claim:   adminClaim(""),
			reason:  noMemory,
		},
		{
			name:    "no capacity beside full shares",
			cluster: newTestCluster().node("n1", "", true, "d0").share("a", "n1", "gpu-0", "40Gi", 50).share("b", "n1", "gpu-0", "40Gi", 50),
			claim:   adminClaim(""),
			reason:  noMemory,
		},
		{
			name:    "memory 20Gi beside a whole-card holder",
			cluster: newTestCluster().node("n1", "", true, "d0").share("holder", "n1", "gpu-0", "80Gi", 0),
			claim:   adminClaim("20Gi"),
			reason:  `request "gpu": has adminAccess: true but asks for 20 GiB: the 1.37 scheduler checks`,
		},
		{
			name:    "memory 0 beside a whole-card holder of a shared card",
			cluster: newTestCluster().node("n1", "", true, "d0").share("holder", "n1", "gpu-0", "80Gi", 0),
			claim:   adminClaim("0"),
			fitsOn:  []string{"n1"},
		},
		{
			name:    "memory 0 beside full shares",
			cluster: newTestCluster().node("n1", "", true, "d0").share("a", "n1", "gpu-0", "40Gi", 50).share("b", "n1", "gpu-0", "40Gi", 50),
			claim:   adminClaim("0"),
			fitsOn:  []string{"n1"},
		},
		{
			name:    "no capacity beside a holder on a whole-card node",
			cluster: newTestCluster().node("n1", "", false, "d0").whole("holder", "n1", "gpu-0"),
			claim:   adminClaim(""),
			fitsOn:  []string{"n1"},
		},
		{
			name:    "no capacity on a free shared card",
			cluster: newTestCluster().node("n1", "", true, "d0"),
			claim:   adminClaim(""),
			fitsOn:  []string{"n1"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d, err := Claim(context.Background(), &tc.cluster.snap, tc.claim)
			if err != nil {
				t.Fatal(err)
			}
			if tc.fitsOn != nil {
				if !slices.Equal(d.FitsOn, tc.fitsOn) || len(d.Reasons) != 0 {
					t.Errorf("got fitsOn %v reasons %q, want fitsOn %v and no reasons", d.FitsOn, d.Reasons, tc.fitsOn)
				}
				return
			}
			if len(d.FitsOn) != 0 || len(d.Reasons) != 1 {
				t.Fatalf("got fitsOn %v reasons %q, want one reason %q", d.FitsOn, d.Reasons, tc.reason)
			}
			if !strings.HasPrefix(d.Reasons[0], tc.reason) {
				t.Errorf("reason\n got: %s\nwant: %s", d.Reasons[0], tc.reason)
			}
		})
	}
}

// TestWholeCardBesideAdminAccess: a card that only a monitoring (admin
// access) claim holds is free for a whole-card claim, as the allocator sees
// it, and the "none is entirely free" counts name only cards really held.
func TestWholeCardBesideAdminAccess(t *testing.T) {
	monitored := func(c *testCluster, node, dev string) *testCluster {
		return c.allocated("monitor-"+dev, []resourceapi.DeviceRequestAllocationResult{{
			Request: "gpu", Driver: device.DriverName, Pool: node, Device: dev, AdminAccess: ptr.To(true)}})
	}
	t.Run("only monitored: fits", func(t *testing.T) {
		c := monitored(newTestCluster().node("n1", "", false, "d0"), "n1", "gpu-0")
		d, err := Claim(context.Background(), &c.snap, fixture.Whole("default", "w", 1, false))
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(d.FitsOn, []string{"n1"}) || len(d.Reasons) != 0 {
			t.Errorf("got fitsOn %v reasons %q, want fitsOn [n1]", d.FitsOn, d.Reasons)
		}
	})
	t.Run("held and monitored: counts", func(t *testing.T) {
		c := newTestCluster().node("n1", "", false, "d0", "d0").whole("holder", "n1", "gpu-0", "gpu-1")
		c = monitored(c, "n1", "gpu-1")
		d, err := Claim(context.Background(), &c.snap, fixture.Whole("default", "w", 1, false))
		if err != nil {
			t.Fatal(err)
		}
		want := "(2 held whole, 0 partly shared)"
		if len(d.Reasons) != 1 || !strings.Contains(d.Reasons[0], want) {
			t.Errorf("reasons %q, want one containing %q", d.Reasons, want)
		}
	})
}
