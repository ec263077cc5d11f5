package dra_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/utils/ptr"

	"github.com/tangram-gpu/tangram/pkg/device"
	"github.com/tangram-gpu/tangram/pkg/dra"
	"github.com/tangram-gpu/tangram/pkg/gpu"
	"github.com/tangram-gpu/tangram/pkg/gpu/fakegpu"
	"github.com/tangram-gpu/tangram/pkg/resourceslices"
)

const nodeName = "node-a"

// publishedNode is the node as the kubelet plugin would publish it: the
// fake profile's cards through resourceslices.DriverResources.
func publishedNode(t testing.TB, profile string, sharing bool) *dra.Node {
	t.Helper()
	p, err := fakegpu.BuiltinProfile(profile)
	if err != nil {
		t.Fatal(err)
	}
	gpus, err := fakegpu.NewFakeSource(nodeName, p).GPUs(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	res, err := resourceslices.DriverResources(gpus, resourceslices.Options{NodeName: nodeName, Sharing: sharing})
	if err != nil {
		t.Fatal(err)
	}
	return &dra.Node{
		Name:    nodeName,
		Slices:  resourceslices.ResourceSlices(nodeName, res),
		Classes: device.DeviceClasses(),
	}
}

var (
	none = resource.Quantity{}
	q    = resource.MustParse
)

func whole(name string) *resourceapi.ResourceClaim {
	return dra.Claim(name, nil, dra.WholeGPUs("gpu", 1))
}

func share(name string, memory, compute resource.Quantity) *resourceapi.ResourceClaim {
	return dra.Claim(name, nil, dra.SharedGPU("gpu", memory, compute))
}

// step is one claim allocated after the ones before it.
type step struct {
	claim *resourceapi.ResourceClaim
	// wantDevices is where the claim must land; nil means it must not fit.
	wantDevices []string
	// wantConsumed is the capacity the share takes (checked when set).
	wantConsumed map[resourceapi.QualifiedName]resource.Quantity
}

func TestAllocationSequences(t *testing.T) {
	tests := []struct {
		name    string
		profile string
		sharing bool
		steps   []step
	}{
		{
			name: "a claim without capacity gets a whole card, shares go elsewhere", profile: "dgx-h100", sharing: true,
			steps: []step{
				{claim: whole("a"), wantDevices: []string{"gpu-0"},
					wantConsumed: map[resourceapi.QualifiedName]resource.Quantity{"memory": q("80Gi"), "compute": q("0")}},
				{claim: share("b", q("1Gi"), none), wantDevices: []string{"gpu-1"}},
			},
		},
		{
			name: "four 20Gi shares fill one 80Gi card before the next is touched", profile: "dgx-h100", sharing: true,
			steps: []step{
				{claim: share("a", q("20Gi"), none), wantDevices: []string{"gpu-0"},
					wantConsumed: map[resourceapi.QualifiedName]resource.Quantity{"memory": q("20Gi"), "compute": q("0")}},
				{claim: share("b", q("20Gi"), none), wantDevices: []string{"gpu-0"}},
				{claim: share("c", q("20Gi"), none), wantDevices: []string{"gpu-0"}},
				{claim: share("d", q("20Gi"), none), wantDevices: []string{"gpu-0"}},
				{claim: share("e", q("20Gi"), none), wantDevices: []string{"gpu-1"}},
			},
		},
		{
			name: "DESIGN.md sequence", profile: "dgx-h100", sharing: true,
			steps: []step{
				{claim: whole("whole-80Gi"), wantDevices: []string{"gpu-0"}},
				{claim: share("20Gi", q("20Gi"), none), wantDevices: []string{"gpu-1"}},
				{claim: share("20Gi-40pc-1", q("20Gi"), q("40")), wantDevices: []string{"gpu-1"},
					wantConsumed: map[resourceapi.QualifiedName]resource.Quantity{"memory": q("20Gi"), "compute": q("40")}},
				{claim: share("20Gi-40pc-2", q("20Gi"), q("40")), wantDevices: []string{"gpu-1"}},
				// gpu-1 still has 20Gi free, but compute would reach 120.
				{claim: share("20Gi-40pc-3", q("20Gi"), q("40")), wantDevices: []string{"gpu-2"}},
				// Memory is rounded up to the 256Mi step; it fits into gpu-1's last 20Gi.
				{claim: share("7474Mi", q("7474Mi"), none), wantDevices: []string{"gpu-1"},
					wantConsumed: map[resourceapi.QualifiedName]resource.Quantity{"memory": q("7680Mi"), "compute": q("0")}},
			},
		},
		{
			name: "a claim naming only compute takes all memory, i.e. a whole card", profile: "dgx-h100", sharing: true,
			steps: []step{
				{claim: share("a", q("20Gi"), none), wantDevices: []string{"gpu-0"}},
				{claim: share("compute-only", none, q("40")), wantDevices: []string{"gpu-1"},
					wantConsumed: map[resourceapi.QualifiedName]resource.Quantity{"memory": q("80Gi"), "compute": q("40")}},
			},
		},
		{
			name: "a share larger than a card does not fit", profile: "pcie-l4", sharing: true,
			steps: []step{{claim: share("a", q("25Gi"), none)}},
		},
		{
			name: "NVLink pair on pcie-a100-pairs", profile: "pcie-a100-pairs", sharing: true,
			steps: []step{
				{claim: dra.Claim("pair", []resourceapi.DeviceConstraint{dra.MatchAttribute(device.AttrNVLinkDomain)},
					dra.WholeGPUs("gpus", 2)), wantDevices: []string{"gpu-0", "gpu-1"}},
				{claim: whole("single"), wantDevices: []string{"gpu-2"}},
				// gpu-3 is free but its partner is taken: the next pair is 4-5.
				{claim: dra.Claim("pair-2", []resourceapi.DeviceConstraint{dra.MatchAttribute(device.AttrNVLinkDomain)},
					dra.WholeGPUs("gpus", 2)), wantDevices: []string{"gpu-4", "gpu-5"}},
			},
		},
		{
			name: "no NVLink domain holds four cards on pcie-a100-pairs", profile: "pcie-a100-pairs", sharing: true,
			steps: []step{
				{claim: dra.Claim("four", []resourceapi.DeviceConstraint{dra.MatchAttribute(device.AttrNVLinkDomain)},
					dra.WholeGPUs("gpus", 4))},
				// Without the constraint four cards are fine.
				{claim: dra.Claim("four-anywhere", nil, dra.WholeGPUs("gpus", 4)),
					wantDevices: []string{"gpu-0", "gpu-1", "gpu-2", "gpu-3"}},
			},
		},
		{
			name: "four NVLink-connected cards on dgx-h100", profile: "dgx-h100", sharing: false,
			steps: []step{
				{claim: dra.Claim("four", []resourceapi.DeviceConstraint{dra.MatchAttribute(device.AttrNVLinkDomain)},
					dra.WholeGPUs("gpus", 4)), wantDevices: []string{"gpu-0", "gpu-1", "gpu-2", "gpu-3"}},
			},
		},
		{
			name: "no NVLink pair on pcie-l4", profile: "pcie-l4", sharing: true,
			steps: []step{
				{claim: dra.Claim("pair", []resourceapi.DeviceConstraint{dra.MatchAttribute(device.AttrNVLinkDomain)},
					dra.WholeGPUs("gpus", 2))},
			},
		},
		{
			name: "sharing disabled: a card is never given twice", profile: "pcie-l4", sharing: false,
			steps: []step{
				{claim: whole("a"), wantDevices: []string{"gpu-0"}},
				{claim: dra.Claim("b-on-gpu-0", nil, dra.WholeGPUs("gpu", 1, `device.attributes["gpu.tangram.dev"].index == 0`))},
				{claim: whole("c"), wantDevices: []string{"gpu-1"}},
				// The shared class matches no card of a whole-card node.
				{claim: share("d", q("1Gi"), none)},
			},
		},
		{
			name: "sharing enabled: a whole card claim blocks further whole card claims on it", profile: "pcie-l4", sharing: true,
			steps: []step{
				{claim: whole("a"), wantDevices: []string{"gpu-0"}},
				{claim: dra.Claim("b-on-gpu-0", nil, dra.WholeGPUs("gpu", 1, `device.attributes["gpu.tangram.dev"].index == 0`))},
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			node := publishedNode(t, tc.profile, tc.sharing)
			for i, s := range tc.steps {
				allocated, err := node.Allocate(ctx, s.claim)
				if s.wantDevices == nil {
					if !errors.Is(err, dra.ErrUnschedulable) {
						t.Fatalf("step %d (%s): want ErrUnschedulable, got %v, %v", i, s.claim.Name, allocated, err)
					}
					continue
				}
				if err != nil {
					t.Fatalf("step %d (%s): %v", i, s.claim.Name, err)
				}
				result := allocated.Status.Allocation
				if got := dra.Devices(result); !cmp.Equal(s.wantDevices, got) {
					t.Fatalf("step %d (%s): want devices %v, got %v", i, s.claim.Name, s.wantDevices, got)
				}
				for _, r := range result.Devices.Results {
					if r.Driver != device.DriverName || r.Pool != nodeName {
						t.Errorf("step %d: want driver %s pool %s, got %s %s", i, device.DriverName, nodeName, r.Driver, r.Pool)
					}
					if tc.sharing != (r.ShareID != nil) {
						t.Errorf("step %d: sharing=%v but shareID=%v", i, tc.sharing, r.ShareID)
					}
				}
				if s.wantConsumed != nil {
					got := result.Devices.Results[0].ConsumedCapacity
					if diff := cmp.Diff(s.wantConsumed, got, cmp.Comparer(func(a, b resource.Quantity) bool { return a.Cmp(b) == 0 })); diff != "" {
						t.Errorf("step %d (%s): consumed capacity differs (-want +got):\n%s", i, s.claim.Name, diff)
					}
				}
			}
		})
	}
}

func TestAllocateDoesNotModifyClaim(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	node := publishedNode(t, "pcie-l4", true)
	claim := whole("a")
	if _, err := node.Allocate(ctx, claim); err != nil {
		t.Fatal(err)
	}
	if claim.Status.Allocation != nil {
		t.Error("Allocate changed the claim passed in")
	}
	if len(node.Allocated) != 1 || node.Allocated[0].Status.Allocation == nil {
		t.Errorf("want the allocated copy recorded, got %d claims", len(node.Allocated))
	}
}

func TestTryDoesNotRecord(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	node := publishedNode(t, "pcie-l4", true)
	for range 2 {
		result, err := node.Try(ctx, whole("a"))
		if err != nil {
			t.Fatal(err)
		}
		if got := dra.Devices(result); !cmp.Equal([]string{"gpu-0"}, got) {
			t.Fatalf("want gpu-0 every time, got %v", got)
		}
	}
	if len(node.Allocated) != 0 {
		t.Errorf("Try recorded %d claims", len(node.Allocated))
	}
}

func TestBadInputIsNotUnschedulable(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	node := publishedNode(t, "pcie-l4", true)
	_, err := node.Allocate(ctx, dra.Claim("bad", nil, dra.WholeGPUs("gpu", 1, `device.attributes["gpu.tangram.dev"].index ==`)))
	if err == nil || errors.Is(err, dra.ErrUnschedulable) {
		t.Fatalf("want a hard error for a broken CEL expression, got %v", err)
	}
	if len(node.Allocated) != 0 {
		t.Error("a failed allocation was recorded")
	}
}

func TestManySharesAcrossSlices(t *testing.T) {
	// 300 cards span three slices; shares must still pack card by card.
	gpus := make([]gpu.GPU, 300)
	for i := range gpus {
		gpus[i] = gpu.GPU{Index: i, MemoryBytes: 1 << 30}
	}
	res, err := resourceslices.DriverResources(gpus, resourceslices.Options{NodeName: nodeName, Sharing: true, Logger: ktesting.NewLogger(t, ktesting.NewConfig())})
	if err != nil {
		t.Fatal(err)
	}
	node := &dra.Node{Name: nodeName, Slices: resourceslices.ResourceSlices(nodeName, res), Classes: device.DeviceClasses()}
	_, ctx := ktesting.NewTestContext(t)
	for i := range 8 {
		allocated, err := node.Allocate(ctx, share(fmt.Sprintf("s%d", i), q("512Mi"), none))
		if err != nil {
			t.Fatal(err)
		}
		if want, got := fmt.Sprintf("gpu-%d", i/2), dra.Devices(allocated.Status.Allocation)[0]; got != want {
			t.Fatalf("share %d: want %s, got %s", i, want, got)
		}
	}
	// The last card lives in the third slice.
	last, err := node.Try(ctx, dra.Claim("last", nil, dra.WholeGPUs("gpu", 1, `device.attributes["gpu.tangram.dev"].index == 299`)))
	if err != nil || !strings.HasSuffix(dra.Devices(last)[0], "299") {
		t.Fatalf("want gpu-299 from the third slice, got %v, %v", dra.Devices(last), err)
	}
}

func BenchmarkAllocateShareDGX(b *testing.B) {
	node := publishedNode(b, "dgx-h100", true)
	ctx := context.Background()
	claim := share("a", q("20Gi"), q("10"))
	for b.Loop() {
		if _, err := node.Try(ctx, claim); err != nil {
			b.Fatal(err)
		}
	}
}

// TestDocumentedSelectors runs the CEL expressions of
// docs/resourceslices.md through the allocator.
func TestDocumentedSelectors(t *testing.T) {
	tests := []struct {
		profile  string
		selector string
		want     []string // nil: nothing matches
	}{
		{"dgx-h100", `device.attributes["gpu.tangram.dev"].productName.startsWith("NVIDIA H100")`, []string{"gpu-0"}},
		{"pcie-l4", `device.attributes["gpu.tangram.dev"].productName.startsWith("NVIDIA H100")`, nil},
		{"dgx-h100", `device.attributes["gpu.tangram.dev"].cudaComputeCapability.isGreaterThan(semver("8.9.0"))`, []string{"gpu-0"}},
		{"pcie-l4", `device.attributes["gpu.tangram.dev"].cudaComputeCapability.isGreaterThan(semver("8.9.0"))`, nil},
		{"pcie-l4", `device.attributes["gpu.tangram.dev"].driverVersion.isGreaterThan(semver("550.0.0"))`, []string{"gpu-0"}},
		{"pcie-l4", `device.capacity["gpu.tangram.dev"].memory.compareTo(quantity("40Gi")) >= 0`, nil},
		{"pcie-a100-pairs", `device.capacity["gpu.tangram.dev"].memory.compareTo(quantity("40Gi")) >= 0`, []string{"gpu-0"}},
		{"pcie-l4", `device.attributes["resource.kubernetes.io"].numaNode == 1`, []string{"gpu-2"}},
		{"pcie-l4", `device.attributes["resource.kubernetes.io"].pciBusID == "0000:21:00.0"`, []string{"gpu-1"}},
		{"pcie-l4", `device.attributes["gpu.tangram.dev"].nvlinkPeers > 0`, nil},
		{"pcie-a100-pairs", `device.attributes["gpu.tangram.dev"].nvlinkPeers > 0`, []string{"gpu-0"}},
		{"dgx-h100", `device.attributes["gpu.tangram.dev"].uuid == "` + fakegpu.FakeGPUUUID(nodeName, 5) + `"`, []string{"gpu-5"}},
	}
	for _, tc := range tests {
		t.Run(tc.profile+" "+tc.selector, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			node := publishedNode(t, tc.profile, true)
			result, err := node.Try(ctx, dra.Claim("c", nil, dra.WholeGPUs("gpu", 1, tc.selector)))
			if tc.want == nil {
				if !errors.Is(err, dra.ErrUnschedulable) {
					t.Fatalf("want no match, got %v, %v", dra.Devices(result), err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := dra.Devices(result); !cmp.Equal(tc.want, got) {
				t.Errorf("want %v, got %v", tc.want, got)
			}
		})
	}
}

func TestNodeLabelAttributeSelectors(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	gpus := []gpu.GPU{{Index: 0, MemoryBytes: 1 << 30}}
	res, err := resourceslices.DriverResources(gpus, resourceslices.Options{NodeName: nodeName, Sharing: true,
		NodeLabels:          map[string]string{"topology.kubernetes.io/zone": "eu-1a", "rack": "r7"},
		NodeLabelAttributes: []string{"topology.kubernetes.io/zone", "rack"}})
	if err != nil {
		t.Fatal(err)
	}
	node := &dra.Node{Name: nodeName, Slices: resourceslices.ResourceSlices(nodeName, res), Classes: device.DeviceClasses()}
	for _, sel := range []string{`device.attributes["topology.kubernetes.io"].zone == "eu-1a"`, `device.attributes["gpu.tangram.dev"].rack == "r7"`} {
		if _, err := node.Try(ctx, dra.Claim("c", nil, dra.WholeGPUs("gpu", 1, sel))); err != nil {
			t.Errorf("%s: %v", sel, err)
		}
	}
	if _, err := node.Try(ctx, dra.Claim("c", nil, dra.WholeGPUs("gpu", 1, `device.attributes["topology.kubernetes.io"].zone == "us-1a"`))); !errors.Is(err, dra.ErrUnschedulable) {
		t.Errorf("want no match for another zone, got %v", err)
	}
}

// A monitoring claim (admin access, memory 0) reaches a card held whole and
// one held in shares, on nodes that share and nodes that do not, and takes
// nothing from the holders: a further share still fits.
func TestAdminAccessOnBusyCards(t *testing.T) {
	onCard := func(i int) string { return fmt.Sprintf(`device.attributes["gpu.tangram.dev"].index == %d`, i) }
	admin := func(name string, card int) *resourceapi.ResourceClaim {
		return dra.Claim(name, nil, dra.AdminGPU("monitor", onCard(card)))
	}
	for _, sharing := range []bool{true, false} {
		t.Run(fmt.Sprintf("sharing=%v", sharing), func(t *testing.T) {
			ctx := context.Background()
			n := publishedNode(t, "dgx-h100", sharing)
			if _, err := n.Allocate(ctx, whole("holder")); err != nil {
				t.Fatal(err)
			}
			if sharing {
				for _, name := range []string{"s1", "s2"} {
					if _, err := n.Allocate(ctx, share(name, q("40Gi"), q("50"))); err != nil {
						t.Fatal(err)
					}
				}
			}
			cards := []int{0}
			if sharing {
				cards = append(cards, 1) // gpu-1 is full: 2 × 40Gi, 100 % compute
			}
			for _, card := range cards {
				claim, err := n.Allocate(ctx, admin(fmt.Sprintf("admin-%d", card), card))
				if err != nil {
					t.Fatalf("admin access to busy gpu-%d: %v", card, err)
				}
				r := claim.Status.Allocation.Devices.Results[0]
				if want := fmt.Sprintf("gpu-%d", card); r.Device != want || !ptr.Deref(r.AdminAccess, false) {
					t.Errorf("admin result = %s (adminAccess %v), want %s with admin access", r.Device, ptr.Deref(r.AdminAccess, false), want)
				}
				if mem, ok := r.ConsumedCapacity["memory"]; ok && !mem.IsZero() {
					t.Errorf("admin access consumed memory %s, want none", mem.String())
				}
			}
			if sharing {
				// The admin claim took nothing: a share still fits on gpu-2,
				// and a non-admin claim cannot land on the full gpu-1.
				got, err := n.Allocate(ctx, dra.Claim("after", nil, dra.SharedGPU("gpu", q("40Gi"), q("50"), onCard(1))))
				if err == nil {
					t.Errorf("a share landed on the full gpu-1: %v", dra.Devices(got.Status.Allocation))
				}
			}
		})
	}
}

// TestClassesSelectTheNodesBackendAndLevel: the allocator, with the
// chart's classes, never puts a share of one backend on a card of the
// other (a tenant's none share beside other tenants' MPS shares, refused
// at prepare only, was the bug), and the hard class takes only hard nodes
// while the default shared class takes every level.
func TestClassesSelectTheNodesBackendAndLevel(t *testing.T) {
	const noneClass = "none-shared-gpu.example.com"
	classes := append(device.DeviceClasses(), device.SharedDeviceClass(noneClass, device.ShareBackendNone, false))
	shareOf := func(class string) *resourceapi.ResourceClaim {
		r := dra.SharedGPU("gpu", q("10Gi"), none)
		r.Exactly.DeviceClassName = class
		return dra.Claim("c", nil, r)
	}
	tests := []struct {
		backend, level string // the node's shareBackend and shareEnforcement
		class          string
		want           bool
	}{
		{"mps", "advisory", device.SharedDeviceClassName, true},
		{"mps", "advisory", device.HardSharedDeviceClassName, false},
		{"mps", "advisory", noneClass, false},
		{"mps", "hard", device.HardSharedDeviceClassName, true},
		{"mps", "hard", noneClass, false},
		{"none", "advisory", device.SharedDeviceClassName, false},
		{"none", "hard", device.HardSharedDeviceClassName, false},
		{"none", "advisory", noneClass, true},
		{"", "advisory", device.SharedDeviceClassName, true}, // an older plugin: mps
		{"", "advisory", noneClass, false},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%s node, %s, %s", tt.backend, tt.level, tt.class), func(t *testing.T) {
			gpus := []gpu.GPU{{Index: 0, MemoryBytes: 80 << 30}, {Index: 1, MemoryBytes: 80 << 30}}
			res, err := resourceslices.DriverResources(gpus, resourceslices.Options{NodeName: nodeName, Sharing: true,
				ShareBackend: tt.backend, ShareEnforcement: tt.level, Logger: ktesting.NewLogger(t, ktesting.NewConfig())})
			if err != nil {
				t.Fatal(err)
			}
			node := &dra.Node{Name: nodeName, Slices: resourceslices.ResourceSlices(nodeName, res), Classes: classes}
			_, ctx := ktesting.NewTestContext(t)
			_, err = node.Try(ctx, shareOf(tt.class))
			if got := err == nil; got != tt.want {
				t.Errorf("allocated %v (err %v), want %v", got, err, tt.want)
			}
		})
	}
}
