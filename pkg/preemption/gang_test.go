package preemption_test

import (
	"fmt"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	policyv1 "k8s.io/api/policy/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/klog/v2/ktesting"

	"github.com/tangram-gpu/tangram/pkg/device"
	"github.com/tangram-gpu/tangram/pkg/dra"
	"github.com/tangram-gpu/tangram/pkg/preemption"
)

// pairsNode is a pcie-a100-pairs node (NVLink pairs 0-1, 2-3, 4-5, 6-7)
// whose eight cards are each held by a pod <prefix>w<i> of the given
// priority and labels.
func pairsNode(prefix string, labels map[string]string, priorities ...int32) ([]testPod, []testClaim) {
	var pods []testPod
	var claims []testClaim
	for i, p := range priorities {
		name := fmt.Sprintf("%sw%d", prefix, i)
		pods = append(pods, testPod{name: name, priority: p, labels: labels})
		claims = append(claims, whole(i, name))
	}
	return pods, claims
}

func TestSelectGangVictims(t *testing.T) {
	const high = 1000
	db := map[string]string{"app": "db"}
	type nodeSpec struct {
		name   string
		pods   []testPod
		claims []testClaim
	}
	node := func(name string, labels map[string]string, priorities ...int32) nodeSpec {
		pods, claims := pairsNode(name+"-", labels, priorities...)
		return nodeSpec{name: name, pods: pods, claims: claims}
	}
	for _, tc := range []struct {
		name        string
		nodes       []nodeSpec
		members     int
		pdbs        []*policyv1.PodDisruptionBudget
		wantFits    bool
		wantVictims []string
		// wantNodes is each member's node, in member order.
		wantNodes []string
	}{
		{
			name:    "two members of two NVLinked cards: the two lowest whole NVLink pairs",
			nodes:   []nodeSpec{node("a", nil, 1, 1, 1, 10, 5, 5, 10, 10)},
			members: 2, wantFits: true,
			wantVictims: []string{"a-w0", "a-w1", "a-w4", "a-w5"}, wantNodes: []string{"a", "a"},
		},
		{
			name:    "a gang that still would not fit evicts nobody",
			nodes:   []nodeSpec{node("a", nil, 1, 1, 1, 1, high, high, high, high)},
			members: 3,
		},
		{
			name:    "members on two nodes, one free-able pair each",
			nodes:   []nodeSpec{node("a", nil, 1, 1, high, high, high, high, high, high), node("b", nil, high, high, 2, 2, high, high, high, high)},
			members: 2, wantFits: true,
			wantVictims: []string{"a-w0", "a-w1", "b-w2", "b-w3"}, wantNodes: []string{"a", "b"},
		},
		{
			name:    "a PodDisruptionBudget holds across the members: two disruptions allowed, four needed",
			nodes:   []nodeSpec{node("a", db, 1, 1, 1, 1, high, high, high, high)},
			members: 2, pdbs: []*policyv1.PodDisruptionBudget{pdb("db", 2, db)},
		},
		{
			name:    "a PodDisruptionBudget allowing four",
			nodes:   []nodeSpec{node("a", db, 1, 1, 1, 1, high, high, high, high)},
			members: 2, pdbs: []*policyv1.PodDisruptionBudget{pdb("db", 4, db)}, wantFits: true,
			wantVictims: []string{"a-w0", "a-w1", "a-w2", "a-w3"}, wantNodes: []string{"a", "a"},
		},
		{
			name:    "equal priority is no victim",
			nodes:   []nodeSpec{node("a", nil, high, high, high, high, high, high, high, high)},
			members: 1,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			var nodes []preemption.Node
			for _, n := range tc.nodes {
				nodes = append(nodes, buildProfileNode(ctx, t, n.name, "pcie-a100-pairs", n.pods, n.claims))
			}
			var members []preemption.Member
			for i := range tc.members {
				name := fmt.Sprintf("member-%d", i)
				p := newPod(testPod{name: name, priority: high}, 100+i)
				p.Spec.NodeName = ""
				members = append(members, preemption.Member{Pod: p, Claims: []*resourceapi.ResourceClaim{
					dra.Claim(name+"-gpus", []resourceapi.DeviceConstraint{dra.MatchAttribute(device.AttrNVLinkDomain, "gpus")}, dra.WholeGPUs("gpus", 2)),
				}})
			}
			got, err := preemption.SelectGangVictims(ctx, nodes, members, tc.pdbs, preemption.Limits{})
			if err != nil {
				t.Fatal(err)
			}
			var victims []string
			for _, v := range got.Victims {
				victims = append(victims, v.Name)
			}
			slices.Sort(victims)
			var placed []string
			if got.Fits {
				for _, m := range members {
					placed = append(placed, got.Nodes[m.Pod.UID])
				}
			}
			if got.Fits != tc.wantFits || !cmp.Equal(victims, tc.wantVictims) || !cmp.Equal(placed, tc.wantNodes) {
				t.Errorf("fits %v, victims %v, nodes %v (reason %q); want fits %v, victims %v, nodes %v",
					got.Fits, victims, placed, got.Reason, tc.wantFits, tc.wantVictims, tc.wantNodes)
			}
			if !got.Fits && got.Reason == "" {
				t.Error("no reason given for a gang that cannot be placed")
			}
			if got.Fits && len(got.Freed) != len(got.Victims) {
				t.Errorf("freed claims %d for %d victims", len(got.Freed), len(got.Victims))
			}
		})
	}
}
