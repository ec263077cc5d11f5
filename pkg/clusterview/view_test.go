package clusterview_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/tangram-gpu/tangram/pkg/cluster"
	"github.com/tangram-gpu/tangram/pkg/cluster/fixture"
	"github.com/tangram-gpu/tangram/pkg/clusterview"
	"github.com/tangram-gpu/tangram/pkg/device"
	"github.com/tangram-gpu/tangram/pkg/diagnosis"
)

const gi = int64(1) << 30

func findCard(t *testing.T, v *clusterview.View, node, device string) clusterview.CardView {
	t.Helper()
	for _, n := range v.Nodes {
		for _, c := range n.Cards {
			if n.Name == node && c.Device == device {
				return c
			}
		}
	}
	t.Fatalf("no card %s/%s in the view", node, device)
	return clusterview.CardView{}
}

func TestBuildCards(t *testing.T) {
	c := demo(t)
	v := clusterview.Build(&c.Snap, clusterview.Options{})
	tests := []struct {
		node, device string
		state        string
		memUsed      int64
		computeUsed  int64
		allocations  int
		firstWhole   bool
		firstMem     int64
		firstPods    []string
	}{
		// Whole card on a shareable card: the allocator records a share
		// with all the memory, which is a whole card.
		{"dgx-a", "gpu-4", clusterview.CardFull, 80 * gi, 100, 1, true, 80 * gi, []string{"ml/eval-pod"}},
		// Three shares packed on one card.
		{"dgx-a", "gpu-5", clusterview.CardPartial, 50 * gi, 80, 3, false, 10 * gi, []string{"lab/notebook-pod"}},
		{"dgx-a", "gpu-7", clusterview.CardFree, 0, 0, 0, false, 0, nil},
		// Whole-card-only node: results without share IDs.
		{"a100-a", "gpu-2", clusterview.CardFull, 40 * gi, 100, 1, true, 40 * gi, []string{"lab/solo-pod"}},
		{"dgx-b", "gpu-0", clusterview.CardPartial, 30 * gi, 50, 1, false, 30 * gi, []string{"serve/infer-c-pod"}},
		// A gang member's claim on two NVLink-connected cards.
		{"dgx-b", "gpu-2", clusterview.CardFull, 80 * gi, 100, 1, true, 80 * gi, []string{"ml/trainer-0-pod"}},
		// Reserved for the gang's PodGroup, not a pod.
		{"dgx-b", "gpu-5", clusterview.CardFull, 80 * gi, 100, 1, true, 80 * gi, nil},
	}
	for _, tc := range tests {
		t.Run(tc.node+"/"+tc.device, func(t *testing.T) {
			card := findCard(t, v, tc.node, tc.device)
			if card.State != tc.state || card.MemoryUsedBytes != tc.memUsed || card.ComputeUsedPercent != tc.computeUsed || len(card.Allocations) != tc.allocations {
				t.Fatalf("got state %s mem %d compute %d allocations %d, want %s %d %d %d",
					card.State, card.MemoryUsedBytes, card.ComputeUsedPercent, len(card.Allocations), tc.state, tc.memUsed, tc.computeUsed, tc.allocations)
			}
			if tc.allocations == 0 {
				return
			}
			a := card.Allocations[0]
			if a.Whole != tc.firstWhole || a.MemoryBytes != tc.firstMem || strings.Join(a.Pods, ",") != strings.Join(tc.firstPods, ",") {
				t.Errorf("first allocation %+v, want whole %v mem %d pods %v", a, tc.firstWhole, tc.firstMem, tc.firstPods)
			}
			if tc.firstPods == nil && strings.Join(a.OtherConsumers, ",") != "podgroups.scheduling.k8s.io/ml/trainer" {
				t.Errorf("consumers %v, want the gang's PodGroup", a.OtherConsumers)
			}
			if !a.Whole && a.ShareID == "" {
				t.Errorf("share without share ID: %+v", a)
			}
		})
	}
	want := clusterview.Totals{Cards: 24, Free: 9, Partial: 2, Full: 13, MemoryBytes: 1600 * gi, MemoryUsedBytes: 1000 * gi}
	if v.Totals != want {
		t.Errorf("cluster totals %+v, want %+v", v.Totals, want)
	}
	var pending []string
	for _, p := range v.Pending {
		pending = append(pending, p.String())
	}
	if strings.Join(pending, ",") != "ml/train-8x,serve/big-share" {
		t.Errorf("pending %v", pending)
	}
	if only := clusterview.Build(&c.Snap, clusterview.Options{Node: "dgx-b"}); len(only.Nodes) != 1 || only.Totals.Cards != 8 || len(only.Pending) != 0 {
		t.Errorf("--node dgx-b: %d nodes, %d cards, %d pending", len(only.Nodes), only.Totals.Cards, len(only.Pending))
	}
}

// Slices of an older pool generation, other drivers' devices, admin
// access and claims on devices no slice publishes.
func TestBuildEdgeCases(t *testing.T) {
	dev := func(name string) resourceapi.Device {
		return resourceapi.Device{Name: name, Capacity: map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{
			device.CapacityMemory: {Value: resource.MustParse("16Gi")},
		}}
	}
	slice := func(name, driver string, gen int64, devs ...resourceapi.Device) *resourceapi.ResourceSlice {
		return &resourceapi.ResourceSlice{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: resourceapi.ResourceSliceSpec{
			Driver: driver, NodeName: ptr.To("n1"), Devices: devs,
			Pool: resourceapi.ResourcePool{Name: "n1", Generation: gen, ResourceSliceCount: 1},
		}}
	}
	claim := func(name string, admin bool, deviceName string) *resourceapi.ResourceClaim {
		return &resourceapi.ResourceClaim{
			ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: "u-" + "name"},
			Status: resourceapi.ResourceClaimStatus{Allocation: &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{
				Results: []resourceapi.DeviceRequestAllocationResult{{Request: "r", Driver: device.DriverName, Pool: "n1", Device: deviceName, AdminAccess: ptr.To(admin)}},
			}}},
		}
	}
	snap := &cluster.Snapshot{
		Slices: []*resourceapi.ResourceSlice{
			slice("old", device.DriverName, 1, dev("gpu-0"), dev("gpu-1"), dev("gpu-2")),
			slice("new", device.DriverName, 2, dev("gpu-0"), dev("gpu-10"), dev("gpu-2")),
			slice("nic", "nic.example.com", 7, dev("eth0")),
		},
		Claims: []*resourceapi.ResourceClaim{claim("watcher", true, "gpu-0"), claim("stale", false, "gpu-1")},
	}
	v := clusterview.Build(snap, clusterview.Options{})
	var devices []string
	for _, c := range v.Nodes[0].Cards {
		devices = append(devices, c.Device)
	}
	if len(v.Nodes) != 1 || strings.Join(devices, ",") != "gpu-0,gpu-2,gpu-10" {
		t.Fatalf("want only the newest generation of our pool in natural order, got %v", devices)
	}
	if c := v.Nodes[0].Cards[0]; c.State != clusterview.CardFree || len(c.Allocations) != 1 || !c.Allocations[0].AdminAccess {
		t.Errorf("admin access must be shown but not count as use: %+v", c)
	}
	if len(v.Warnings) != 1 || !strings.Contains(v.Warnings[0], "claim ns/stale holds n1/gpu-1, which no current ResourceSlice publishes") {
		t.Errorf("warnings %q", v.Warnings)
	}
}

func TestDisagreements(t *testing.T) {
	c := demo(t)
	clean := func() *clusterview.View {
		// Through JSON, as the e2e check sees it.
		data, err := json.Marshal(clusterview.Build(&c.Snap, clusterview.Options{}))
		if err != nil {
			t.Fatal(err)
		}
		var v clusterview.View
		if err := json.Unmarshal(data, &v); err != nil {
			t.Fatal(err)
		}
		return &v
	}
	if d := clusterview.Disagreements(clean(), c.Snap.Claims); len(d) != 0 {
		t.Fatalf("view of the demo disagrees with its own claims: %q", d)
	}
	tests := []struct {
		name   string
		change func(v *clusterview.View)
		want   string
	}{
		{"memory", func(v *clusterview.View) { cardOf(v, "dgx-b", "gpu-0").Allocations[0].MemoryBytes = 1 },
			"claim serve/infer-c on dgx-b/gpu-0: memory 1 bytes in the view, 32212254720 consumed"},
		{"compute", func(v *clusterview.View) { cardOf(v, "dgx-b", "gpu-0").Allocations[0].ComputePercent = 5 },
			"claim serve/infer-c on dgx-b/gpu-0: compute 5% in the view, 50% consumed"},
		{"missing", func(v *clusterview.View) { cardOf(v, "a100-a", "gpu-2").Allocations = nil },
			"claim lab/solo holds a100-a/gpu-2 (request gpu) but the view does not show it there"},
		{"extra", func(v *clusterview.View) {
			card := cardOf(v, "dgx-b", "gpu-7")
			card.Allocations = append(card.Allocations, clusterview.AllocationView{Claim: cluster.ClaimRef{Namespace: "x", Name: "ghost", UID: "g"}, Request: "gpu"})
		}, "the view shows claim x/ghost on dgx-b/gpu-7 (request gpu), but no claim result says so"},
		{"whole shown as share", func(v *clusterview.View) { cardOf(v, "a100-a", "gpu-2").Allocations[0].Whole = false },
			"claim lab/solo on a100-a/gpu-2: the view shows a share, but the result holds the card whole"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			v := clean()
			tc.change(v)
			d := clusterview.Disagreements(v, c.Snap.Claims)
			if len(d) != 1 || d[0] != tc.want {
				t.Errorf("got %q\nwant [%q]", d, tc.want)
			}
		})
	}
}

func cardOf(v *clusterview.View, node, device string) *clusterview.CardView {
	for i := range v.Nodes {
		for j := range v.Nodes[i].Cards {
			if v.Nodes[i].Name == node && v.Nodes[i].Cards[j].Device == device {
				return &v.Nodes[i].Cards[j]
			}
		}
	}
	panic("no card " + node + "/" + device)
}

// TestStatusJSONSchema pins the shape of `status -o json`: every field path
// with its JSON type. Scripts and the e2e suite rely on it; a change here
// must be additive and documented in docs/kubectl-tangram.md.
func TestStatusJSONSchema(t *testing.T) {
	c := demo(t)
	data, err := json.Marshal(clusterview.Build(&c.Snap, clusterview.Options{}))
	if err != nil {
		t.Fatal(err)
	}
	var doc any
	if err := json.Unmarshal(data, &doc); err != nil {
		t.Fatal(err)
	}
	paths := map[string]string{}
	walkSchema(".", doc, paths)
	// The demo has no warnings; their element type is fixed by the Go type.
	paths[".warnings[]"] = "string"
	var lines []string
	for p, typ := range paths {
		lines = append(lines, p+" "+typ)
	}
	sort.Strings(lines)
	checkGolden(t, "status.schema.golden", []byte(strings.Join(lines, "\n")+"\n"))
}

func walkSchema(path string, v any, out map[string]string) {
	switch x := v.(type) {
	case map[string]any:
		out[path] = "object"
		for k, val := range x {
			walkSchema(strings.TrimSuffix(path, ".")+"."+k, val, out)
		}
	case []any:
		out[path] = "array"
		for _, val := range x {
			walkSchema(strings.TrimSuffix(path, ".")+"[]", val, out)
		}
	case string:
		out[path] = "string"
	case float64:
		out[path] = "number"
	case bool:
		out[path] = "boolean"
	default:
		out[path] = fmt.Sprintf("%T", x)
	}
}

func TestFormatting(t *testing.T) {
	tests := []struct{ got, want string }{
		{cluster.FormatBytes(80 * gi), "80 GiB"},
		{cluster.FormatBytes(7680 << 20), "7.5 GiB"},
		{cluster.FormatBytes(512 << 20), "512 MiB"},
		{cluster.FormatBytes(0), "0 GiB"},
		{clusterview.Bar(0, 80), "░░░░░░░░░░"},
		{clusterview.Bar(1, 80), "█░░░░░░░░░"},
		{clusterview.Bar(40, 80), "█████░░░░░"},
		{clusterview.Bar(80, 80), "██████████"},
		{clusterview.Bar(5, 0), "░░░░░░░░░░"},
		{fmt.Sprint(cluster.NaturalLess("gpu-2", "gpu-10")), "true"},
		{fmt.Sprint(cluster.NaturalLess("gpu-10", "gpu-2")), "false"},
		{fmt.Sprint(cluster.NaturalLess("a100-a", "dgx-a")), "true"},
		{fmt.Sprint(cluster.NaturalLess("node", "node-1")), "true"},
	}
	for i, tc := range tests {
		if tc.got != tc.want {
			t.Errorf("case %d: got %q, want %q", i, tc.got, tc.want)
		}
	}
}

// The demo's pending gang carries the diagnosis pkg/diagnosis computes for
// the demo cluster, so the golden output shows real text.
func TestDemoGangDiagnosisIsReal(t *testing.T) {
	c := demo(t)
	members, claim, key := fixture.BigRunGang()
	d, err := diagnosis.GangFeasibility(context.Background(), &c.Snap, diagnosis.Gang{Members: members, Claim: claim, TopologyKey: key})
	if err != nil {
		t.Fatal(err)
	}
	if d.Message != fixture.BigRunDiagnosis {
		t.Errorf("pkg/diagnosis says\n%s\nthe fixture says\n%s", d.Message, fixture.BigRunDiagnosis)
	}
}

// TestNodeShareEnforcement: `kubectl tangram status` says, on each node's
// line, how the node holds its shares, with the reason below hard, from
// the node's shareable cards.
func TestNodeShareEnforcement(t *testing.T) {
	for _, tt := range []struct {
		name                   string
		level, reason, backend string
		want                   string
	}{
		{name: "advisory", level: "advisory", reason: device.ReasonDriverBefore615, backend: "mps",
			want: "  shares: advisory (" + device.ShareEnforcementReasonText(device.ReasonDriverBefore615) + ")"},
		{name: "hard", level: "hard", backend: "mps", want: "  shares: hard"},
		{name: "backend none", level: "hard", backend: "none", want: "  shares: accounted only (sharing backend none)"},
		{name: "nothing published", want: ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := clusterview.SharesText(clusterview.NodeView{ShareEnforcement: tt.level, ShareEnforcementReason: tt.reason, ShareBackend: tt.backend}, clusterview.Style{}); got != tt.want {
				t.Errorf("got %q, want %q", got, tt.want)
			}
		})
	}
}
