package preemption_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/utils/ptr"

	"github.com/tangram-gpu/tangram/pkg/device"
	"github.com/tangram-gpu/tangram/pkg/dra"
	"github.com/tangram-gpu/tangram/pkg/gpu/fakegpu"
	"github.com/tangram-gpu/tangram/pkg/preemption"
	devslices "github.com/tangram-gpu/tangram/pkg/resourceslices"
)

const nodeName = "node-a"

// testPod is a pod on the node (or the preemptor).
type testPod struct {
	name        string
	priority    int32
	labels      map[string]string
	terminating bool
	never       bool // preemptionPolicy: Never
}

// testClaim is a claim allocated on the node before the preemptor comes.
type testClaim struct {
	// users are the pods it is reserved for; a PodGroup holds it instead
	// when podGroup is set.
	users    []string
	podGroup bool
	// card pins it to gpu-<card>; memory makes it a share of that size.
	card        int
	memory      string
	adminAccess bool
}

func whole(card int, users ...string) testClaim { return testClaim{users: users, card: card} }
func share(card int, memory string, users ...string) testClaim {
	return testClaim{users: users, card: card, memory: memory}
}

func pod(name string, priority int32) testPod { return testPod{name: name, priority: priority} }

// fullNode is eight whole cards, each held by its own pod of the given
// priority: pods w0..w7.
func fullNode(priorities ...int32) ([]testPod, []testClaim) {
	var pods []testPod
	var claims []testClaim
	for i, p := range priorities {
		name := fmt.Sprintf("w%d", i)
		pods = append(pods, pod(name, p))
		claims = append(claims, whole(i, name))
	}
	return pods, claims
}

func pdb(name string, allowed int32, selector map[string]string) *policyv1.PodDisruptionBudget {
	return &policyv1.PodDisruptionBudget{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		Spec: policyv1.PodDisruptionBudgetSpec{
			MinAvailable: ptr.To(intstr.FromInt32(1)),
			Selector:     &metav1.LabelSelector{MatchLabels: selector},
		},
		Status: policyv1.PodDisruptionBudgetStatus{DisruptionsAllowed: allowed},
	}
}

func TestSelectVictims(t *testing.T) {
	const high = 1000
	wholeRequest := dra.WholeGPUs("gpu", 1)
	shareRequest := dra.SharedGPU("gpu", resource.MustParse("40Gi"), resource.Quantity{})
	type testCase struct {
		name    string
		pods    []testPod
		claims  []testClaim
		pdbs    []*policyv1.PodDisruptionBudget
		limits  preemption.Limits
		request resourceapi.DeviceRequest
		// preemptor defaults to pod("high", 1000).
		preemptor   *testPod
		wantFits    bool
		wantVictims []string
		// nominated are pods nominated to the node earlier, each with
		// one claim of its request.
		nominated     []nominee
		wantDisplaced []string
	}
	with := func(pods []testPod, claims []testClaim, extraPods []testPod, extraClaims ...testClaim) ([]testPod, []testClaim) {
		return append(slices.Clone(pods), extraPods...), append(slices.Clone(claims), extraClaims...)
	}
	// Seven cards held by pods the preemptor may not evict; card 7 is left
	// to each test.
	stayPods, stayClaims := fullNode(high, high, high, high, high, high, high)
	// A full node of priority-10 pods where w2 is terminating (evicted for
	// an earlier preemptor).
	leavingPods, leavingClaims := fullNode(10, 10, 10, 10, 10, 10, 10, 10)
	leavingPods[2].terminating = true
	share60 := dra.SharedGPU("gpu", resource.MustParse("60Gi"), resource.Quantity{})
	tests := []testCase{
		{
			name: "whole card: the one lowest-priority pod of a full node", request: wholeRequest,
			pods:     func() []testPod { p, _ := fullNode(10, 10, 5, 10, 10, 10, 10, 10); return p }(),
			claims:   func() []testClaim { _, c := fullNode(10, 10, 5, 10, 10, 10, 10, 10); return c }(),
			wantFits: true, wantVictims: []string{"w2"},
		},
		{
			name: "whole card, equal priorities: exactly one, the newest", request: wholeRequest,
			pods:     func() []testPod { p, _ := fullNode(10, 10, 10, 10, 10, 10, 10, 10); return p }(),
			claims:   func() []testClaim { _, c := fullNode(10, 10, 10, 10, 10, 10, 10, 10); return c }(),
			wantFits: true, wantVictims: []string{"w7"},
		},
		{
			name: "nothing lower-priority: no eviction", request: wholeRequest,
			pods:   func() []testPod { p, _ := fullNode(high, high, high, high, high, high, high, 2000); return p }(),
			claims: func() []testClaim { _, c := fullNode(high, high, high, high, high, high, high, 2000); return c }(),
		},
		{
			name: "preemptionPolicy Never: no eviction", request: wholeRequest,
			pods:      func() []testPod { p, _ := fullNode(10, 10, 10, 10, 10, 10, 10, 10); return p }(),
			claims:    func() []testClaim { _, c := fullNode(10, 10, 10, 10, 10, 10, 10, 10); return c }(),
			preemptor: &testPod{name: "high", priority: high, never: true},
		},
		func() testCase {
			pods, claims := with(stayPods, stayClaims,
				[]testPod{{name: "protected", priority: 1, labels: map[string]string{"app": "db"}}, pod("free", 5)})
			claims[6] = whole(6, "free") // card 6 from w6 to "free"
			claims = append(claims, whole(7, "protected"))
			return testCase{
				name: "PDB-protected victim is skipped for the next one", request: wholeRequest,
				pods: pods, claims: claims, pdbs: []*policyv1.PodDisruptionBudget{pdb("db", 0, map[string]string{"app": "db"})},
				wantFits: true, wantVictims: []string{"free"},
			}
		}(),
		func() testCase {
			pods, claims := with(stayPods, stayClaims,
				[]testPod{{name: "protected", priority: 1, labels: map[string]string{"app": "db"}}}, whole(7, "protected"))
			return testCase{
				name: "PDB-protected victim and nobody else: no eviction", request: wholeRequest,
				pods: pods, claims: claims, pdbs: []*policyv1.PodDisruptionBudget{pdb("db", 0, map[string]string{"app": "db"})},
			}
		}(),
		func() testCase {
			db := map[string]string{"app": "db"}
			pods, claims := with(stayPods, stayClaims,
				[]testPod{{name: "a", priority: 1, labels: db}, {name: "b", priority: 1, labels: db}},
				share(7, "40Gi", "a"), share(7, "40Gi", "b"))
			return testCase{
				name: "a PDB allowing one disruption cannot free a card two of its pods share", request: wholeRequest,
				pods: pods, claims: claims, pdbs: []*policyv1.PodDisruptionBudget{pdb("db", 1, db)},
			}
		}(),
		func() testCase {
			pods, claims := with(stayPods, stayClaims, []testPod{pod("a", 1), pod("b", 1)},
				share(7, "40Gi", "a"), share(7, "40Gi", "b"))
			return testCase{
				name: "whole card from two shares: both go", request: wholeRequest,
				pods: pods, claims: claims, wantFits: true, wantVictims: []string{"a", "b"},
			}
		}(),
		func() testCase {
			pods, claims := with(stayPods[:6], stayClaims[:6], []testPod{pod("a", 1), pod("b", 1), pod("w", 5)},
				share(7, "40Gi", "a"), share(7, "40Gi", "b"), whole(6, "w"))
			return testCase{
				name: "mixed: one whole-card pod rather than two shares of lower priority", request: wholeRequest,
				pods: pods, claims: claims, wantFits: true, wantVictims: []string{"w"},
			}
		}(),
		func() testCase {
			pods, claims := with(stayPods[:6], stayClaims[:6], []testPod{pod("s", 1), pod("x", high), pod("w", 1)},
				share(7, "40Gi", "s"), share(7, "40Gi", "x"), whole(6, "w"))
			return testCase{
				name: "share: one 40Gi share frees room on its card, not the whole card", request: shareRequest,
				pods: pods, claims: claims, wantFits: true, wantVictims: []string{"s"},
			}
		}(),
		func() testCase {
			// Card 6: "a" 60Gi (newest, so first in line) next to a staying
			// 20Gi; card 7: "b" 40Gi next to a staying 40Gi. Evicting a
			// leaves 20Gi stranded on card 6, evicting b fills card 7.
			pods, claims := with(stayPods[:6], stayClaims[:6], []testPod{pod("x", high), pod("y", high), pod("b", 1), pod("a", 1)},
				share(6, "20Gi", "x"), share(6, "60Gi", "a"), share(7, "40Gi", "y"), share(7, "40Gi", "b"))
			return testCase{
				name: "share: the victim whose card is left least fragmented", request: shareRequest,
				pods: pods, claims: claims, wantFits: true, wantVictims: []string{"b"},
			}
		}(),
		func() testCase {
			pods, claims := with(stayPods, stayClaims, []testPod{pod("a", 1), pod("b", 1), pod("x", high)},
				share(7, "20Gi", "a"), share(7, "20Gi", "b"), share(7, "40Gi", "x"))
			return testCase{
				name: "share: two shares adding up to 40Gi", request: shareRequest,
				pods: pods, claims: claims, wantFits: true, wantVictims: []string{"a", "b"},
			}
		}(),
		func() testCase {
			pods, claims := with(stayPods, stayClaims, []testPod{pod("low", 1), pod("x", high)}, whole(7, "low", "x"))
			return testCase{
				name: "a claim shared with a pod that stays is not freed", request: wholeRequest,
				pods: pods, claims: claims,
			}
		}(),
		func() testCase {
			pods, claims := with(stayPods, stayClaims, []testPod{pod("a", 1), pod("b", 2)}, whole(7, "a", "b"))
			return testCase{
				name: "a claim shared by two lower-priority pods is freed when both go", request: wholeRequest,
				pods: pods, claims: claims, wantFits: true, wantVictims: []string{"a", "b"},
			}
		}(),
		func() testCase {
			pods, claims := with(stayPods, stayClaims, []testPod{pod("member", 1)},
				testClaim{users: []string{"member"}, podGroup: true, card: 7})
			return testCase{
				name: "a PodGroup-reserved claim is never freed", request: wholeRequest,
				pods: pods, claims: claims,
			}
		}(),
		func() testCase {
			pods, claims := with(stayPods[:7], stayClaims[:7], []testPod{pod("admin", 1), pod("x", high)},
				testClaim{users: []string{"admin"}, card: 7, adminAccess: true}, whole(7, "x"))
			return testCase{
				name: "an admin-access pod is never a victim", request: wholeRequest,
				pods: pods, claims: claims,
			}
		}(),
		func() testCase {
			pods, claims := with(stayPods, stayClaims, []testPod{{name: "leaving", priority: 1, terminating: true}}, whole(7, "leaving"))
			return testCase{
				name: "a terminating pod's card: fits without evicting anyone else", request: wholeRequest,
				pods: pods, claims: claims, wantFits: true,
			}
		}(),
		func() testCase {
			pods, claims := with(stayPods, stayClaims, nil, whole(7, "deleted-pod"))
			return testCase{
				name: "a claim whose pod is gone is being deallocated: fits without eviction", request: wholeRequest,
				pods: pods, claims: claims, wantFits: true,
			}
		}(),
		func() testCase {
			pods, claims := with(stayPods[:4], stayClaims[:4], []testPod{pod("a", 1), pod("b", 2), pod("c", 3), pod("d", 4)},
				whole(4, "a"), whole(5, "b"), whole(6, "c"), whole(7, "d"))
			return testCase{
				name: "the search budget spent: reprieving still evicts one lowest", request: wholeRequest,
				limits: preemption.Limits{Simulations: 2},
				pods:   pods, claims: claims, wantFits: true, wantVictims: []string{"a"},
			}
		}(),
		{
			name: "a terminating victim's card is not counted twice: the preemptor evicts another", request: wholeRequest,
			pods: leavingPods, claims: leavingClaims, nominated: []nominee{{"first", high, wholeRequest}},
			wantFits: true, wantVictims: []string{"w7"},
		},
		{
			name: "a terminating victim's card alone: fits without evicting", request: wholeRequest,
			pods: leavingPods, claims: leavingClaims,
			wantFits: true,
		},
		{
			name: "a whole card nominated first: a share evicts another", request: shareRequest,
			pods: leavingPods, claims: leavingClaims, nominated: []nominee{{"first", high, wholeRequest}},
			wantFits: true, wantVictims: []string{"w7"},
		},
		{
			name: "two 40Gi shares share one freed card", request: shareRequest,
			pods: leavingPods, claims: leavingClaims, nominated: []nominee{{"first", high, shareRequest}},
			wantFits: true,
		},
		{
			name: "a 60Gi share nominated first: a 40Gi share evicts another", request: shareRequest,
			pods: leavingPods, claims: leavingClaims, nominated: []nominee{{"first", high, share60}},
			wantFits: true, wantVictims: []string{"w7"},
		},
		{
			name: "a lower-priority nominated pod does not hold the freed card", request: wholeRequest,
			pods: leavingPods, claims: leavingClaims, nominated: []nominee{{"earlier", 500, wholeRequest}},
			wantFits: true,
		},
		{
			name: "higher priority first: of two nominated pods the one that no longer fits is displaced", request: wholeRequest,
			pods: leavingPods, claims: leavingClaims,
			nominated: []nominee{{"second", high, wholeRequest}, {"urgent", 2000, wholeRequest}},
			wantFits:  true, wantVictims: []string{"w7"}, wantDisplaced: []string{"second"},
		},
		{
			name: "nothing lower-priority and the freed card taken: no eviction", request: wholeRequest,
			pods: func() []testPod {
				p, _ := with(stayPods, stayClaims, []testPod{{name: "leaving", priority: 1, terminating: true}})
				return p
			}(),
			claims:    func() []testClaim { _, c := with(stayPods, stayClaims, nil, whole(7, "leaving")); return c }(),
			nominated: []nominee{{"first", high, wholeRequest}},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			node := buildNode(ctx, t, tc.pods, tc.claims)
			for i, n := range tc.nominated {
				p := newPod(testPod{name: n.name, priority: n.priority}, 50+i)
				p.Spec.NodeName = ""
				node.Nominated = append(node.Nominated, preemption.Nominated{Pod: p,
					Claims: []*resourceapi.ResourceClaim{dra.Claim(n.name+"-gpu", nil, n.request)}})
			}
			preemptor := pod("high", high)
			if tc.preemptor != nil {
				preemptor = *tc.preemptor
			}
			claim := dra.Claim("high-gpu", nil, tc.request)
			got, err := preemption.SelectVictims(ctx, node, newPod(preemptor, 100), []*resourceapi.ResourceClaim{claim}, tc.pdbs, tc.limits)
			if err != nil {
				t.Fatal(err)
			}
			var victims []string
			for _, v := range got.Victims {
				victims = append(victims, v.Name)
			}
			slices.Sort(victims)
			if got.Fits != tc.wantFits || !cmp.Equal(victims, tc.wantVictims) {
				t.Errorf("fits %v, victims %v (reason %q); want fits %v, victims %v", got.Fits, victims, got.Reason, tc.wantFits, tc.wantVictims)
			}
			// Each victim's freed claims are named, whole cards told from
			// shares.
			freed := map[string]bool{}
			for _, f := range got.Freed {
				freed[f.Pod.Name] = true
				var i int
				if _, err := fmt.Sscanf(f.Claim.Name, "claim-%d", &i); err != nil {
					t.Fatalf("freed claim %s is not one of the node's", f.Claim.Name)
				}
				if wantWhole := tc.claims[i].memory == ""; f.Whole != wantWhole || len(f.Devices) != 1 {
					t.Errorf("freed %s (%v): whole %v, want %v", f.Claim.Name, f.Devices, f.Whole, wantWhole)
				}
			}
			for _, v := range victims {
				if !freed[v] {
					t.Errorf("victim %s frees no claim in the decision", v)
				}
			}
			if !cmp.Equal(got.Displaced, tc.wantDisplaced) {
				t.Errorf("displaced nominated pods %v, want %v", got.Displaced, tc.wantDisplaced)
			}
			if !got.Fits && got.Reason == "" {
				t.Error("no reason given for a node where preemption cannot help")
			}
		})
	}
}

type nominee struct {
	name     string
	priority int32
	request  resourceapi.DeviceRequest
}

// buildNode publishes a dgx-h100 node with shareable cards and allocates
// the claims with the real allocator, each pinned to its card.
func buildNode(ctx context.Context, t testing.TB, pods []testPod, claims []testClaim) preemption.Node {
	t.Helper()
	return buildProfileNode(ctx, t, nodeName, "dgx-h100", pods, claims)
}

// buildProfileNode is buildNode for another node name and fake profile.
func buildProfileNode(ctx context.Context, t testing.TB, nodeName, profileName string, pods []testPod, claims []testClaim) preemption.Node {
	t.Helper()
	profile, err := fakegpu.BuiltinProfile(profileName)
	if err != nil {
		t.Fatal(err)
	}
	gpus, err := fakegpu.NewFakeSource(nodeName, profile).GPUs(ctx)
	if err != nil {
		t.Fatal(err)
	}
	res, err := devslices.DriverResources(gpus, devslices.Options{NodeName: nodeName, Sharing: true})
	if err != nil {
		t.Fatal(err)
	}
	an := &dra.Node{Name: nodeName, Slices: devslices.ResourceSlices(nodeName, res), Classes: device.DeviceClasses()}
	node := preemption.Node{Name: nodeName, Slices: an.Slices, Classes: an.Classes}
	for i, p := range pods {
		pod := newPod(p, i)
		pod.Spec.NodeName = nodeName
		node.Pods = append(node.Pods, pod)
	}
	for i, c := range claims {
		onCard := fmt.Sprintf(`device.attributes["gpu.tangram.dev"].index == %d`, c.card)
		req := dra.WholeGPUs("gpu", 1, onCard)
		if c.memory != "" {
			req = dra.SharedGPU("gpu", resource.MustParse(c.memory), resource.Quantity{}, onCard)
		}
		allocated, err := an.Allocate(ctx, dra.Claim(fmt.Sprintf("%sclaim-%d", claimPrefix(nodeName), i), nil, req))
		if err != nil {
			t.Fatalf("setting up claim %d: %v", i, err)
		}
		for _, u := range c.users {
			ref := resourceapi.ResourceClaimConsumerReference{Resource: "pods", Name: u, UID: types.UID(u)}
			if c.podGroup {
				ref = resourceapi.ResourceClaimConsumerReference{APIGroup: "scheduling.k8s.io", Resource: "podgroups", Name: "gang", UID: "gang"}
			}
			allocated.Status.ReservedFor = append(allocated.Status.ReservedFor, ref)
		}
		if c.adminAccess {
			for j := range allocated.Status.Allocation.Devices.Results {
				allocated.Status.Allocation.Devices.Results[j].AdminAccess = ptr.To(true)
			}
		}
		node.Claims = append(node.Claims, allocated)
	}
	return node
}

// newPod makes a pod on the node; a higher age index means a newer pod.
func newPod(p testPod, age int) *v1.Pod {
	pod := &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: p.name, Namespace: "default", UID: types.UID(p.name), Labels: p.labels,
			CreationTimestamp: metav1.NewTime(time.Date(2026, 1, 1, 0, age, 0, 0, time.UTC)),
		},
		Spec: v1.PodSpec{NodeName: nodeName, Priority: ptr.To(p.priority)},
	}
	if p.terminating {
		pod.DeletionTimestamp = ptr.To(metav1.Now())
	}
	if p.never {
		pod.Spec.PreemptionPolicy = ptr.To(v1.PreemptNever)
	}
	return pod
}

// claimPrefix keeps claim names apart across nodes; empty for the default
// node, whose claims the tests name claim-<i>.
func claimPrefix(node string) string {
	if node == nodeName {
		return ""
	}
	return node + "-"
}
