package diagnosis

import (
	"context"
	"slices"
	"strings"
	"testing"

	resourceapi "k8s.io/api/resource/v1"

	"github.com/tangram-gpu/tangram/pkg/cluster/fixture"
	"github.com/tangram-gpu/tangram/pkg/device"
)

func withSelector(c *resourceapi.ResourceClaim, expr string) *resourceapi.ResourceClaim {
	c.Spec.Devices.Requests[0].Exactly.Selectors = []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{Expression: expr}}}
	return c
}

func withClass(c *resourceapi.ResourceClaim, class string) *resourceapi.ResourceClaim {
	c.Spec.Devices.Requests[0].Exactly.DeviceClassName = class
	return c
}

func TestClaim(t *testing.T) {
	tests := []struct {
		name    string
		cluster *testCluster
		claim   *resourceapi.ResourceClaim
		fitsOn  []string
		// reason is the exact single reason expected when fitsOn is empty.
		reason string
	}{
		{
			name:    "whole card fits on the node with a free card",
			cluster: newTestCluster().node("n1", "", false, "d0", "d0").whole("a", "n1", "gpu-0").node("n2", "", false, "e0").whole("b", "n2", "gpu-0"),
			claim:   fixture.Whole("default", "new", 1, false),
			fitsOn:  []string{"n1"},
		},
		{
			name:    "no room: every card held",
			cluster: newTestCluster().node("n1", "", false, "d0", "d0").whole("a", "n1", "gpu-0", "gpu-1"),
			claim:   fixture.Whole("default", "new", 1, false),
			reason:  `request "gpu": needs a whole card, and none of the 2 matching cards is entirely free (2 held whole, 0 partly shared)`,
		},
		{
			name:    "no room: whole card on shared cards that all carry a share",
			cluster: newTestCluster().node("n1", "", true, "d0", "d0").share("a", "n1", "gpu-0", "10Gi", 0).share("b", "n1", "gpu-1", "10Gi", 0),
			claim:   fixture.Whole("default", "new", 1, false),
			reason:  `request "gpu": needs a whole card, and none of the 2 matching cards is entirely free (0 held whole, 2 partly shared)`,
		},
		{
			name: "no room: share larger than any free memory",
			cluster: newTestCluster().node("node-a", "", true, "d0", "d0", "d0", "d0").
				share("a", "node-a", "gpu-0", "70Gi", 0).share("b", "node-a", "gpu-1", "60Gi", 0).
				share("c", "node-a", "gpu-2", "65Gi", 0).share("d", "node-a", "gpu-3", "75Gi", 0),
			claim:  fixture.Share("default", "new", "30Gi", 0),
			reason: `request "gpu": no card has 30 GiB free: the most left is 20 GiB on node-a/gpu-1`,
		},
		{
			name:    "no room: share larger than any card",
			cluster: newTestCluster().node("n1", "", true, "d0"),
			claim:   fixture.Share("default", "new", "90Gi", 0),
			reason:  `request "gpu": asks for 90 GiB per card, more than any matching card can give: the largest has 80 GiB (n1/gpu-0)`,
		},
		{
			name:    "no room: memory fits but compute does not",
			cluster: newTestCluster().node("n1", "", true, "d0", "d0", "d0").share("a", "n1", "gpu-0", "10Gi", 60).share("b", "n1", "gpu-1", "10Gi", 70).share("c", "n1", "gpu-2", "75Gi", 0),
			claim:   fixture.Share("default", "new", "10Gi", 50),
			reason:  `request "gpu": no card with enough memory has 50% compute free: the most left is 40% compute on n1/gpu-0`,
		},
		{
			name:    "share rounded up to the memory step fits",
			cluster: newTestCluster().node("n1", "", true, "d0").share("a", "n1", "gpu-0", "72Gi", 0),
			claim:   fixture.Share("default", "new", "7474Mi", 0),
			fitsOn:  []string{"n1"},
		},
		{
			name:    "count split across nodes",
			cluster: newTestCluster().node("n1", "", false, "a", "b", "c").node("n2", "", false, "a", "b", "c", "d").whole("x", "n2", "gpu-0", "gpu-1"),
			claim:   fixture.Whole("default", "new", 4, false),
			reason:  `request "gpu": needs 4 cards on one node: the most any node has free is 3 (n1)`,
		},
		{
			name: "count with matchAttribute nvlinkDomain",
			cluster: newTestCluster().node("node-a", "", false, "a0", "a0", "a1", "a1").
				node("node-b", "", false, "b0", "b0", "b0", "b1").whole("x", "node-b", "gpu-0"),
			claim:  fixture.Whole("default", "new", 3, true),
			reason: `request "gpu": count 3 with matchAttribute nvlinkDomain: the largest free NVLink domain has 2 cards (node-a, node-b)`,
		},
		{
			name:    "count with matchAttribute fits in one domain",
			cluster: newTestCluster().node("node-a", "", false, "a0", "a0", "a1", "a1").node("node-b", "", false, "b0", "b0", "b0", "b1"),
			claim:   fixture.Whole("default", "new", 3, true),
			fitsOn:  []string{"node-b"},
		},
		{
			name:    "every card tainted",
			cluster: newTestCluster().node("n1", "", false, "d0", "d0").taint("n1", "gpu.tangram.dev/xid", "79", resourceapi.DeviceTaintEffectNoSchedule),
			claim:   fixture.Whole("default", "new", 1, false),
			reason:  `request "gpu": every matching card has a taint the request does not tolerate: n1/gpu-0 (gpu.tangram.dev/xid=79:NoSchedule), n1/gpu-1 (gpu.tangram.dev/xid=79:NoSchedule)`,
		},
		{
			name:    "tolerated taint",
			cluster: newTestCluster().node("n1", "", false, "d0").taint("n1", "maintenance", "", resourceapi.DeviceTaintEffectNoSchedule),
			claim: func() *resourceapi.ResourceClaim {
				c := fixture.Whole("default", "new", 1, false)
				c.Spec.Devices.Requests[0].Exactly.Tolerations = []resourceapi.DeviceToleration{{Key: "maintenance", Operator: resourceapi.DeviceTolerationOpExists}}
				return c
			}(),
			fitsOn: []string{"n1"},
		},
		{
			name:    "missing class",
			cluster: newTestCluster().node("n1", "", false, "d0"),
			claim:   withClass(fixture.Whole("default", "new", 1, false), "fast-gpu.example.com"),
			reason:  `request "gpu": DeviceClass "fast-gpu.example.com" does not exist; ` + "`kubectl get deviceclasses`" + ` lists the ones there are`,
		},
		{
			name:    "selector matches nothing",
			cluster: newTestCluster().node("n1", "", false, "d0"),
			claim:   withSelector(fixture.Whole("default", "new", 1, false), `device.attributes["gpu.tangram.dev"].productName == "B200"`),
			reason:  `request "gpu": class gpu.tangram.dev with the request's selectors matches none of the 1 devices in the cluster`,
		},
		{
			name:    "shared class needs shareable cards",
			cluster: newTestCluster().node("n1", "", false, "d0"),
			claim:   fixture.Share("default", "new", "10Gi", 0),
			reason:  `request "gpu": class shared-gpu.tangram.dev with the request's selectors matches none of the 1 devices in the cluster`,
		},
		{
			name:    "hard enforcement required, node is not",
			cluster: newTestCluster().node("n1", "", true, "d0"),
			claim:   withSelector(fixture.Share("default", "new", "10Gi", 0), `"shareEnforcement" in device.attributes["gpu.tangram.dev"] && device.attributes["gpu.tangram.dev"].shareEnforcement == "hard"`),
			reason: `request "gpu": class shared-gpu.tangram.dev with the request's selectors matches none of the 1 devices in the cluster; ` +
				`class shared-gpu.tangram.dev requires a gpu.tangram.dev/shareEnforcement level of hard, which the devices do not have (they are: 1 none published): ` +
				`hard enforcement needs driver 615+ whose NVML has per-cgroup memory limits, no card in MIG mode, cgroup v2 and dmem enabled down to the kubelet's pod cgroups (docs/enforcement.md), ` +
				`or set the chart value sharing.requireHardEnforcement=false (the default), with which this class also takes compute-only and advisory nodes`,
		},
		{
			name:    "hard enforcement required, node says why it is not",
			cluster: newTestCluster().node("n1", "", true, "d0", "d0").enforcement("n1", "compute-only", device.ReasonDmemNotEnabled),
			claim:   withSelector(fixture.Share("default", "new", "10Gi", 0), `"shareEnforcement" in device.attributes["gpu.tangram.dev"] && device.attributes["gpu.tangram.dev"].shareEnforcement == "hard"`),
			reason: `request "gpu": class shared-gpu.tangram.dev with the request's selectors matches none of the 2 devices in the cluster; ` +
				`class shared-gpu.tangram.dev requires a gpu.tangram.dev/shareEnforcement level of hard, which the devices do not have (they are: 2 compute-only (dmem-not-enabled-to-pod-cgroups)): ` +
				`hard enforcement needs driver 615+ whose NVML has per-cgroup memory limits, no card in MIG mode, cgroup v2 and dmem enabled down to the kubelet's pod cgroups (docs/enforcement.md), ` +
				`or set the chart value sharing.requireHardEnforcement=false (the default), with which this class also takes compute-only and advisory nodes`,
		},
		{
			// The strict class (the one line a tenant adds) names itself
			// and the class that runs the share anyway.
			name:    "the hard class on an advisory node",
			cluster: newTestCluster().node("n1", "", true, "d0").enforcement("n1", "advisory", device.ReasonDriverBefore615),
			claim:   withClass(fixture.Share("default", "new", "10Gi", 0), device.HardSharedDeviceClassName),
			reason: `request "gpu": class hard-shared-gpu.tangram.dev with the request's selectors matches none of the 1 devices in the cluster; ` +
				`class hard-shared-gpu.tangram.dev requires a gpu.tangram.dev/shareEnforcement level of hard, which the devices do not have (they are: 1 advisory (driver-before-615)): ` +
				`hard enforcement needs driver 615+ whose NVML has per-cgroup memory limits, no card in MIG mode, cgroup v2 and dmem enabled down to the kubelet's pod cgroups (docs/enforcement.md), ` +
				`or ask class shared-gpu.tangram.dev, which also takes compute-only and advisory nodes (a tenant can exceed its share there)`,
		},
		{
			// The shared class takes only cards of the admin's backend:
			// a node sharing with none has none for it.
			name:    "shared class on a node of another sharing backend",
			cluster: newTestCluster().node("n1", "", true, "d0").backend("n1", "none"),
			claim:   fixture.Share("default", "new", "10Gi", 0),
			reason: `request "gpu": class shared-gpu.tangram.dev with the request's selectors matches none of the 1 devices in the cluster; ` +
				`class shared-gpu.tangram.dev selects cards by the nodes' sharing backend (gpu.tangram.dev/shareBackend, set by the admin with the chart value sharing.backend); the devices have: 1 none`,
		},
		{
			name:    "selector that does not compile",
			cluster: newTestCluster().node("n1", "", false, "d0"),
			claim:   withSelector(fixture.Whole("default", "new", 1, false), `device.attributes[`),
			reason:  `request "gpu": selector "device.attributes[" does not compile`,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			snap := &tc.cluster.snap
			before := len(snap.Claims)
			d, err := Claim(context.Background(), snap, tc.claim)
			if err != nil {
				t.Fatal(err)
			}
			if len(snap.Claims) != before {
				t.Errorf("diagnosis changed the snapshot's claims")
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

func TestClaimAllocatedAndItself(t *testing.T) {
	c := newTestCluster().node("n1", "", false, "d0").whole("mine", "n1", "gpu-0")
	mine := c.snap.Claims[0]
	d, err := Claim(context.Background(), &c.snap, mine)
	if err != nil {
		t.Fatal(err)
	}
	if !d.Allocated || d.Summary() != "allocated" {
		t.Errorf("allocated claim: got %+v", d)
	}
	// The same claim, not yet allocated (e.g. being re-diagnosed), must not
	// compete with its own old allocation.
	pending := mine.DeepCopy()
	pending.Status = resourceapi.ResourceClaimStatus{}
	pending.Spec = fixture.Whole("default", "mine", 1, false).Spec
	d, err = Claim(context.Background(), &c.snap, pending)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(d.FitsOn, []string{"n1"}) {
		t.Errorf("claim competes with itself: fitsOn %v, reasons %v", d.FitsOn, d.Reasons)
	}
}

func TestClaimFirstAvailable(t *testing.T) {
	c := newTestCluster().node("n1", "", false, "d0").whole("a", "n1", "gpu-0")
	claim := fixture.Whole("default", "new", 1, false)
	claim.Spec.Devices.Requests[0] = resourceapi.DeviceRequest{Name: "gpu", FirstAvailable: []resourceapi.DeviceSubRequest{
		{Name: "two", DeviceClassName: device.DeviceClassName, AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: 2},
		{Name: "one", DeviceClassName: device.DeviceClassName, AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: 1},
	}}
	d, err := Claim(context.Background(), &c.snap, claim)
	if err != nil {
		t.Fatal(err)
	}
	want := `request "gpu": none of its alternatives can be met ("gpu/two": needs a whole card, and none of the 1 matching card is entirely free (1 held whole, 0 partly shared); "gpu/one": needs a whole card`
	if len(d.Reasons) != 1 || !strings.HasPrefix(d.Reasons[0], want) {
		t.Errorf("got %q, want prefix %q", d.Reasons, want)
	}
}

func TestClaimRequestsFitAloneNotTogether(t *testing.T) {
	c := newTestCluster().node("n1", "", false, "a", "a", "b", "b")
	claim := fixture.Whole("default", "new", 2, true)
	second := claim.Spec.Devices.Requests[0]
	second.Name = "more"
	claim.Spec.Devices.Requests = append(claim.Spec.Devices.Requests, second)
	d, err := Claim(context.Background(), &c.snap, claim)
	if err != nil {
		t.Fatal(err)
	}
	want := `each request can be met on its own, but no node can meet all of them together ("gpu" alone fits on n1; "more" alone fits on n1)`
	if len(d.FitsOn) != 0 || len(d.Reasons) != 1 || d.Reasons[0] != want {
		t.Errorf("got fitsOn %v reasons %q, want %q", d.FitsOn, d.Reasons, want)
	}
}

func TestListNodes(t *testing.T) {
	tests := []struct {
		nodes []string
		want  string
	}{
		{[]string{"a"}, "a"},
		{[]string{"a", "b", "c"}, "a, b, c"},
		{[]string{"a", "b", "c", "d", "e"}, "a, b, c and 2 more"},
	}
	for _, tc := range tests {
		if got := listFew(tc.nodes); got != tc.want {
			t.Errorf("listFew(%v) = %q, want %q", tc.nodes, got, tc.want)
		}
	}
}

func TestClaimsTogether(t *testing.T) {
	c := newTestCluster().node("n1", "", false, "a", "a").node("n2", "", true, "b")
	tests := []struct {
		name   string
		claims []*resourceapi.ResourceClaim
		want   []string
	}{
		{"both whole cards fit on n1", []*resourceapi.ResourceClaim{fixture.Whole("d", "x", 1, false), fixture.Whole("d", "y", 1, false)}, []string{"n1"}},
		{"two cards and a share need different nodes", []*resourceapi.ResourceClaim{fixture.Whole("d", "x", 2, false), fixture.Share("d", "y", "10Gi", 0)}, []string{}},
		{"three cards fit nowhere", []*resourceapi.ResourceClaim{fixture.Whole("d", "x", 2, false), fixture.Whole("d", "y", 1, true)}, []string{}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ClaimsTogether(context.Background(), &c.snap, tc.claims)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("got %v, want %v", got, tc.want)
			}
		})
	}
}
