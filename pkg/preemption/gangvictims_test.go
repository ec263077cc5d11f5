package preemption_test

import (
	"fmt"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	resourceapi "k8s.io/api/resource/v1"
	schedulingv1beta1 "k8s.io/api/scheduling/v1beta1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ktypes "k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/utils/ptr"

	"github.com/tangram-gpu/tangram/pkg/device"
	"github.com/tangram-gpu/tangram/pkg/dra"
	"github.com/tangram-gpu/tangram/pkg/preemption"
)

// runningGang is a PodGroup whose members run on the test's nodes.
type runningGang struct {
	name     string
	priority int32
	// single: disruptionMode Single (members are victims one by one);
	// otherwise All.
	single  bool
	members []string
}

// gangsOf sets the members' spec.schedulingGroup and returns what
// preemption.Gangs makes of the nodes' pods and claims with these
// PodGroups: the gangs of disruptionMode All.
func gangsOf(gangs []runningGang, nodes ...preemption.Node) []*preemption.Gang {
	groups := map[string]*schedulingv1beta1.PodGroup{}
	memberOf := map[string]string{}
	for _, g := range gangs {
		mode := &schedulingv1beta1.DisruptionMode{All: &schedulingv1beta1.AllDisruptionMode{}}
		if g.single {
			mode = &schedulingv1beta1.DisruptionMode{Single: &schedulingv1beta1.SingleDisruptionMode{}}
		}
		groups[g.name] = &schedulingv1beta1.PodGroup{
			ObjectMeta: metav1.ObjectMeta{Name: g.name, Namespace: "default"},
			Spec:       schedulingv1beta1.PodGroupSpec{Priority: ptr.To(g.priority), DisruptionMode: mode},
		}
		for _, m := range g.members {
			memberOf[m] = g.name
		}
	}
	var pods []*v1.Pod
	var claims []*resourceapi.ResourceClaim
	for _, n := range nodes {
		for _, p := range n.Pods {
			if g, ok := memberOf[p.Name]; ok {
				p.Spec.SchedulingGroup = &v1.PodSchedulingGroup{PodGroupName: ptr.To(g)}
			}
			pods = append(pods, p)
		}
		claims = append(claims, n.Claims...)
	}
	return preemption.Gangs(pods, func(ns, name string) *schedulingv1beta1.PodGroup { return groups[name] }, claims)
}

// TestSelectVictimsGangs: a running gang of disruptionMode All is one
// victim. Node a is a dgx-h100 node; node b, where the gangs' other
// members run, another. Before, victims were chosen pod by pod: each case
// marked "split" evicted one member of the gang alone.
func TestSelectVictimsGangs(t *testing.T) {
	const high = 1000
	db := map[string]string{"app": "db"}
	// Seven cards of node a held by pods the preemptor may not evict.
	stayPods, stayClaims := fullNode(high, high, high, high, high, high, high)
	// The train gang: g-0 on card 7 of node a, g-1 on card 0 of node b.
	member := func(name string, labels map[string]string, terminating bool) testPod {
		return testPod{name: name, priority: 10, labels: labels, terminating: terminating}
	}
	train := func(labels map[string]string, secondTerminating bool) ([]testPod, []testClaim, []testPod, []testClaim) {
		a := append(slices.Clone(stayPods), member("g-0", labels, false))
		b := []testPod{member("g-1", labels, secondTerminating), pod("b-other", high)}
		return a, append(slices.Clone(stayClaims), whole(7, "g-0")), b, []testClaim{whole(0, "g-1"), whole(1, "b-other")}
	}
	gang := func(priority int32, members ...string) []runningGang {
		return []runningGang{{name: "train", priority: priority, members: members}}
	}
	type testCase struct {
		name             string
		podsA, podsB     []testPod
		claimsA, claimsB []testClaim
		gangs            []runningGang
		pdbs             []*policyv1.PodDisruptionBudget
		request          resourceapi.DeviceRequest
		wantVictims      []string
		wantGangs        []string
		// wantFreed are the claims freed (all of them, on both nodes).
		wantFreed []string
	}
	tests := []testCase{
		func() testCase {
			a, ca, b, cb := train(nil, false)
			return testCase{
				name:  "split: a member is never evicted alone; its peer on node b goes too and its card counts as freed",
				podsA: a, claimsA: ca, podsB: b, claimsB: cb, gangs: gang(10, "g-0", "g-1"),
				wantVictims: []string{"g-0", "g-1"}, wantGangs: []string{"default/train"},
				wantFreed: []string{"claim-7", "node-b-claim-0"},
			}
		}(),
		func() testCase {
			a, ca, b, cb := train(nil, false)
			return testCase{
				name:  "disruptionMode Single: a member is a victim on its own, as upstream",
				podsA: a, claimsA: ca, podsB: b, claimsB: cb,
				gangs:       []runningGang{{name: "train", priority: 10, single: true, members: []string{"g-0", "g-1"}}},
				wantVictims: []string{"g-0"}, wantFreed: []string{"claim-7"},
			}
		}(),
		func() testCase {
			a, ca, b, cb := train(nil, false)
			a[6], ca[6] = pod("alone", 500), whole(6, "alone")
			return testCase{
				name:  "split: a pod on its own goes rather than a gang, even one of lower priority",
				podsA: a, claimsA: ca, podsB: b, claimsB: cb, gangs: gang(10, "g-0", "g-1"),
				wantVictims: []string{"alone"}, wantFreed: []string{"claim-6"},
			}
		}(),
		func() testCase {
			// l0..l5 then the gang's two members, the newest pods.
			pods, claims := fullNode(10, 10, 10, 10, 10, 10)
			for i := range pods {
				pods[i].name = fmt.Sprintf("l%d", i)
				claims[i] = whole(i, pods[i].name)
			}
			pods = append(pods, member("g-0", nil, false), member("g-1", nil, false))
			claims = append(claims, whole(6, "g-0"), whole(7, "g-1"))
			return testCase{
				name:  "split: equal priorities, the newest pod on its own rather than the newest gang member",
				podsA: pods, claimsA: claims, gangs: gang(10, "g-0", "g-1"),
				wantVictims: []string{"l5"}, wantFreed: []string{"claim-5"},
			}
		}(),
		func() testCase {
			pods := append(slices.Clone(stayPods[:5]), pod("alone", 1), member("g-0", nil, false), member("g-1", nil, false))
			claims := append(slices.Clone(stayClaims[:5]), whole(5, "alone"), whole(6, "g-0"), whole(7, "g-1"))
			return testCase{
				name:  "split: a gang counts as one victim with both its cards, rather than a lower pod and one member",
				podsA: pods, claimsA: claims, gangs: gang(10, "g-0", "g-1"), request: dra.WholeGPUs("gpu", 2),
				wantVictims: []string{"g-0", "g-1"}, wantGangs: []string{"default/train"},
				wantFreed: []string{"claim-6", "claim-7"},
			}
		}(),
		func() testCase {
			a, ca, b, cb := train(nil, false)
			b[0].labels = db
			return testCase{
				name:  "split: a budget that allows no disruption of one member protects the whole gang",
				podsA: a, claimsA: ca, podsB: b, claimsB: cb, gangs: gang(10, "g-0", "g-1"),
				pdbs: []*policyv1.PodDisruptionBudget{pdb("db", 0, db)},
			}
		}(),
		func() testCase {
			a, ca, b, cb := train(db, false)
			return testCase{
				name:  "split: a budget allowing one disruption cannot take a gang of two",
				podsA: a, claimsA: ca, podsB: b, claimsB: cb, gangs: gang(10, "g-0", "g-1"),
				pdbs: []*policyv1.PodDisruptionBudget{pdb("db", 1, db)},
			}
		}(),
		func() testCase {
			a, ca, b, cb := train(db, false)
			return testCase{
				name:  "a budget allowing two takes the gang",
				podsA: a, claimsA: ca, podsB: b, claimsB: cb, gangs: gang(10, "g-0", "g-1"),
				pdbs:        []*policyv1.PodDisruptionBudget{pdb("db", 2, db)},
				wantVictims: []string{"g-0", "g-1"}, wantGangs: []string{"default/train"},
				wantFreed: []string{"claim-7", "node-b-claim-0"},
			}
		}(),
		func() testCase {
			a, ca, b, cb := train(nil, false)
			return testCase{
				name:  "split: the PodGroup's priority counts: a gang of the preemptor's priority is no victim though its pods have less",
				podsA: a, claimsA: ca, podsB: b, claimsB: cb, gangs: gang(high, "g-0", "g-1"),
			}
		}(),
		func() testCase {
			a, ca, b, cb := train(nil, true)
			return testCase{
				name:  "a member already terminating: the running rest of the gang goes",
				podsA: a, claimsA: ca, podsB: b, claimsB: cb, gangs: gang(10, "g-0", "g-1"),
				wantVictims: []string{"g-0"}, wantGangs: []string{"default/train"}, wantFreed: []string{"claim-7"},
			}
		}(),
		func() testCase {
			pods := append(slices.Clone(stayPods), testPod{name: "double", priority: 1, labels: db})
			claims := append(slices.Clone(stayClaims), whole(7, "double"))
			return testCase{
				name: "a pod two budgets cover is no victim: the Eviction API would refuse it", podsA: pods, claimsA: claims,
				pdbs: []*policyv1.PodDisruptionBudget{pdb("db", 5, db), pdb("db-too", 5, db)},
			}
		}(),
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			a := buildNode(ctx, t, tc.podsA, tc.claimsA)
			nodes := []preemption.Node{a}
			if tc.podsB != nil {
				nodes = append(nodes, buildProfileNode(ctx, t, "node-b", "dgx-h100", tc.podsB, tc.claimsB))
			}
			a.Gangs = gangsOf(tc.gangs, nodes...)
			request := tc.request
			if request.Name == "" {
				request = dra.WholeGPUs("gpu", 1)
			}
			got, err := preemption.SelectVictims(ctx, a, newPod(pod("high", high), 100), []*resourceapi.ResourceClaim{dra.Claim("high-gpu", nil, request)}, tc.pdbs, preemption.Limits{})
			if err != nil {
				t.Fatal(err)
			}
			victims := names(got.Victims)
			var gangs, freed []string
			for _, g := range got.Gangs {
				gangs = append(gangs, g.Key())
			}
			for _, f := range got.Freed {
				freed = append(freed, f.Claim.Name)
				if !slices.Contains(victims, f.Pod.Name) {
					t.Errorf("claim %s freed by %s, which is no victim", f.Claim.Name, f.Pod.Name)
				}
			}
			slices.Sort(freed)
			if got.Fits != (tc.wantVictims != nil) || !cmp.Equal(victims, tc.wantVictims) || !cmp.Equal(gangs, tc.wantGangs) || !cmp.Equal(freed, tc.wantFreed) {
				t.Errorf("fits %v, victims %v, gangs %v, freed %v (reason %q); want victims %v, gangs %v, freed %v",
					got.Fits, victims, gangs, freed, got.Reason, tc.wantVictims, tc.wantGangs, tc.wantFreed)
			}
		})
	}
}

// TestSelectGangVictimsRunningGangs: a gang preempting for its members
// (SelectGangVictims) evicts a running gang of disruptionMode All whole
// and counts what its members free on other nodes for the members placed
// after. Nodes a and b are pcie-a100-pairs nodes; on each, the pair 0-1 is
// held by one member of the running gang "old" (priority 5), the other
// cards by pods of the preemptors' priority.
func TestSelectGangVictimsRunningGangs(t *testing.T) {
	const high = 1000
	nodeWith := func(member string) ([]testPod, []testClaim) {
		pods := []testPod{pod(member, 5)}
		claims := []testClaim{whole(0, member), whole(1, member)}
		for i := 2; i < 8; i++ {
			name := fmt.Sprintf("%s-w%d", member, i)
			pods = append(pods, pod(name, high))
			claims = append(claims, whole(i, name))
		}
		return pods, claims
	}
	for _, tc := range []struct {
		name        string
		members     int
		wantVictims []string
		wantNodes   []string
	}{
		// Before: only old-a was evicted, old-b kept running alone.
		{"split: one member evicts the running gang whole", 1, []string{"old-a", "old-b"}, []string{"node-a"}},
		{"the pair the gang frees on node b is the second member's, nobody evicted twice", 2, []string{"old-a", "old-b"}, []string{"node-a", "node-b"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			podsA, claimsA := nodeWith("old-a")
			podsB, claimsB := nodeWith("old-b")
			a := buildProfileNode(ctx, t, "node-a", "pcie-a100-pairs", podsA, claimsA)
			b := buildProfileNode(ctx, t, "node-b", "pcie-a100-pairs", podsB, claimsB)
			gangs := gangsOf([]runningGang{{name: "old", priority: 5, members: []string{"old-a", "old-b"}}}, a, b)
			a.Gangs, b.Gangs = gangs, gangs
			var members []preemption.Member
			for i := range tc.members {
				name := fmt.Sprintf("member-%d", i)
				p := newPod(testPod{name: name, priority: high}, 100+i)
				p.Spec.NodeName = ""
				members = append(members, preemption.Member{Pod: p, Claims: []*resourceapi.ResourceClaim{
					dra.Claim(name+"-gpus", []resourceapi.DeviceConstraint{dra.MatchAttribute(device.AttrNVLinkDomain, "gpus")}, dra.WholeGPUs("gpus", 2)),
				}})
			}
			got, err := preemption.SelectGangVictims(ctx, []preemption.Node{a, b}, members, nil, preemption.Limits{})
			if err != nil {
				t.Fatal(err)
			}
			var placed []string
			for _, m := range members {
				placed = append(placed, got.Nodes[m.Pod.UID])
			}
			victims := names(got.Victims)
			if !got.Fits || !cmp.Equal(victims, tc.wantVictims) || !cmp.Equal(placed, tc.wantNodes) || len(got.Gangs) != 1 {
				t.Errorf("fits %v, victims %v, gangs %d, nodes %v (reason %q); want victims %v, one gang, nodes %v",
					got.Fits, victims, len(got.Gangs), placed, got.Reason, tc.wantVictims, tc.wantNodes)
			}
			// Four cards freed: both of each member's claims.
			if len(got.Freed) != 4 {
				t.Errorf("%d claims freed, want the four of the gang's two members", len(got.Freed))
			}
		})
	}
}

func TestGangs(t *testing.T) {
	member := func(name, group, node string) *v1.Pod {
		p := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ml", UID: ktypes.UID("uid-" + name)}, Spec: v1.PodSpec{NodeName: node}}
		if group != "" {
			p.Spec.SchedulingGroup = &v1.PodSchedulingGroup{PodGroupName: ptr.To(group)}
		}
		return p
	}
	all := &schedulingv1beta1.DisruptionMode{All: &schedulingv1beta1.AllDisruptionMode{}}
	groups := map[string]*schedulingv1beta1.PodGroup{
		"train":  {Spec: schedulingv1beta1.PodGroupSpec{DisruptionMode: all, Priority: ptr.To[int32](7)}},
		"serve":  {Spec: schedulingv1beta1.PodGroupSpec{DisruptionMode: &schedulingv1beta1.DisruptionMode{Single: &schedulingv1beta1.SingleDisruptionMode{}}}},
		"legacy": {Spec: schedulingv1beta1.PodGroupSpec{}}, // defaulted to Single by the API server
	}
	pods := []*v1.Pod{member("t0", "train", "a"), member("t1", "train", "b"), member("s0", "serve", "a"),
		member("l0", "legacy", "a"), member("u0", "unknown", "a"), member("alone", "", "a")}
	claim := func(name string, refs ...resourceapi.ResourceClaimConsumerReference) *resourceapi.ResourceClaim {
		return &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ml"},
			Status: resourceapi.ResourceClaimStatus{Allocation: &resourceapi.AllocationResult{}, ReservedFor: refs}}
	}
	podRef := func(name string) resourceapi.ResourceClaimConsumerReference {
		return resourceapi.ResourceClaimConsumerReference{Resource: "pods", Name: name, UID: ktypes.UID("uid-" + name)}
	}
	claims := []*resourceapi.ResourceClaim{claim("t0-gpu", podRef("t0")), claim("t1-gpu", podRef("t1")), claim("s0-gpu", podRef("s0")),
		claim("shared", podRef("t0"), podRef("t1")), {ObjectMeta: metav1.ObjectMeta{Name: "pending"}, Status: resourceapi.ResourceClaimStatus{ReservedFor: []resourceapi.ResourceClaimConsumerReference{podRef("t0")}}}}
	got := preemption.Gangs(pods, func(_, name string) *schedulingv1beta1.PodGroup { return groups[name] }, claims)
	if len(got) != 1 || got[0].Key() != "ml/train" || got[0].Priority != 7 ||
		!cmp.Equal(names(got[0].Pods), []string{"t0", "t1"}) || !cmp.Equal(claimNames(got[0].Claims), []string{"shared", "t0-gpu", "t1-gpu"}) {
		t.Errorf("Gangs = %+v; want only ml/train (priority 7) with t0, t1 and the claims t0-gpu, t1-gpu, shared", got)
	}
}

func names(pods []*v1.Pod) []string {
	var out []string
	for _, p := range pods {
		out = append(out, p.Name)
	}
	slices.Sort(out)
	return out
}

func claimNames(claims []*resourceapi.ResourceClaim) []string {
	var out []string
	for _, c := range claims {
		out = append(out, c.Name)
	}
	slices.Sort(out)
	return out
}
