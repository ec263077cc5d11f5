package preemption

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"

	v1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
)

// Member is one gang member still to be placed, with its pending claims.
type Member struct {
	Pod    *v1.Pod
	Claims []*resourceapi.ResourceClaim
}

// GangDecision is the outcome for a whole gang.
type GangDecision struct {
	// Fits is true when every member's claims can be allocated once
	// Victims are gone; then Nodes gives each member's node (by pod UID).
	Fits  bool
	Nodes map[types.UID]string
	// Victims are the pods to evict; Gangs the running gangs among them,
	// each evicted whole (see Decision).
	Victims []*v1.Pod
	Gangs   []*Gang
	// Freed are the victims' claims their eviction frees.
	Freed []Freed
	// Reason says why the gang cannot be placed even with evictions.
	Reason string
}

// SelectGangVictims places a gang's members one after the other, each on
// the node where it needs the fewest, lowest-priority victims (as
// SelectVictims chooses them, so a member asking for NVLinked cards frees
// a whole NVLink domain), counting the members placed before it as
// nominated there and their victims as gone. It returns victims only when
// every member fits: a gang that cannot be placed even with every
// lower-priority pod gone evicts nobody. PodDisruptionBudgets hold across
// the whole gang: the victims of all members together stay within each
// budget. A running gang evicted for one member (see Gang) goes whole, and
// what its members free on other nodes counts as freed for the members
// placed after.
//
// The search is greedy (members in the given order, each on its best node
// then); it can miss a placement that a different assignment of members to
// nodes would find, and then evicts nobody.
func SelectGangVictims(ctx context.Context, nodes []Node, members []Member, pdbs []*policyv1.PodDisruptionBudget, limits Limits) (GangDecision, error) {
	if len(members) == 0 {
		return GangDecision{Reason: "the gang has no member to place"}, nil
	}
	for _, m := range members {
		if !MayPreempt(m.Pod) {
			return GangDecision{Reason: fmt.Sprintf("member %s/%s has preemptionPolicy Never", m.Pod.Namespace, m.Pod.Name)}, nil
		}
	}
	out := GangDecision{Nodes: map[types.UID]string{}}
	evicted := map[types.UID]bool{}
	placed := map[string][]Nominated{} // by node
	budgets := slices.Clone(pdbs)
	for _, m := range members {
		var best *NodeChoice
		var reasons []string
		for _, n := range nodes {
			n.Evicted = mergeEvicted(n.Evicted, evicted)
			// Members placed before count as nominated: they keep the
			// devices they were given, whatever this member's priority.
			n.Nominated = append(slices.Clone(n.Nominated), withPriorityOf(placed[n.Name], m.Pod)...)
			d, err := SelectVictims(ctx, n, m.Pod, m.Claims, budgets, limits)
			if err != nil {
				return GangDecision{}, fmt.Errorf("placing gang member %s/%s: %w", m.Pod.Namespace, m.Pod.Name, err)
			}
			if !d.Fits {
				reasons = append(reasons, n.Name+": "+d.Reason)
				continue
			}
			if slices.ContainsFunc(placed[n.Name], func(p Nominated) bool { return slices.Contains(d.Displaced, p.Pod.Name) }) {
				// A member placed before would lose its devices.
				reasons = append(reasons, n.Name+": the members placed before would not fit any more")
				continue
			}
			c := &NodeChoice{Node: n.Name, Decision: d}
			if best == nil || c.Better(best) {
				best = c
			}
		}
		if best == nil {
			slices.Sort(reasons)
			return GangDecision{Reason: fmt.Sprintf("member %s/%s cannot be placed even with evictions (%d of %d members placed): %v",
				m.Pod.Namespace, m.Pod.Name, len(out.Nodes), len(members), reasons)}, nil
		}
		out.Nodes[m.Pod.UID] = best.Node
		placed[best.Node] = append(placed[best.Node], Nominated(m))
		for _, v := range best.Decision.Victims {
			evicted[v.UID] = true
			out.Victims = append(out.Victims, v)
		}
		out.Gangs = append(out.Gangs, best.Decision.Gangs...)
		out.Freed = append(out.Freed, best.Decision.Freed...)
		var err error
		if budgets, err = consumeBudgets(budgets, best.Decision.Victims); err != nil {
			return GangDecision{}, err
		}
	}
	out.Fits = true
	return out, nil
}

// NodeChoice is a node and what preempting on it would take, for choosing
// between nodes (the per-pod PostFilter and each gang member alike).
type NodeChoice struct {
	Node     string
	Decision Decision
}

// Better orders nodes by their victims, a gang counting as one victim: no
// gang before any gang, then fewer victims, then fewer gangs, then (as the
// stock preemption) a lower highest priority and a lower sum of
// priorities; then by the placement score after eviction and by name for
// determinism.
func (a *NodeChoice) Better(b *NodeChoice) bool {
	pa, ga := victimUnits(a.Decision.Victims, a.Decision.Gangs)
	pb, gb := victimUnits(b.Decision.Victims, b.Decision.Gangs)
	if (ga > 0) != (gb > 0) {
		return ga == 0
	}
	if c := cmp.Compare(len(pa), len(pb)); c != 0 {
		return c < 0
	}
	if ga != gb {
		return ga < gb
	}
	ha, sa := prioritiesOf(pa)
	hb, sb := prioritiesOf(pb)
	if ha != hb {
		return ha < hb
	}
	if sa != sb {
		return sa < sb
	}
	if a.Decision.Score != b.Decision.Score {
		return a.Decision.Score > b.Decision.Score
	}
	return a.Node < b.Node
}

func prioritiesOf(priorities []int32) (highest int32, sum int64) {
	highest = -1 << 31
	for _, p := range priorities {
		highest = max(highest, p)
		sum += int64(p)
	}
	return highest, sum
}

func mergeEvicted(a, b map[types.UID]bool) map[types.UID]bool {
	out := maps.Clone(a)
	if out == nil {
		out = map[types.UID]bool{}
	}
	maps.Copy(out, b)
	return out
}

// withPriorityOf gives the members placed before at least pod's priority,
// so SelectVictims counts them first.
func withPriorityOf(placed []Nominated, pod *v1.Pod) []Nominated {
	out := make([]Nominated, 0, len(placed))
	for _, n := range placed {
		if PodPriority(n.Pod) < PodPriority(pod) {
			p := n.Pod.DeepCopy()
			p.Spec.Priority = pod.Spec.Priority
			n.Pod = p
		}
		out = append(out, n)
	}
	return out
}

// consumeBudgets returns copies of pdbs with the victims they cover taken
// from their allowed disruptions.
func consumeBudgets(pdbs []*policyv1.PodDisruptionBudget, victims []*v1.Pod) ([]*policyv1.PodDisruptionBudget, error) {
	out := make([]*policyv1.PodDisruptionBudget, 0, len(pdbs))
	for _, pdb := range pdbs {
		taken := int32(0)
		if pdb.Spec.Selector != nil {
			selector, err := metav1.LabelSelectorAsSelector(pdb.Spec.Selector)
			if err != nil {
				return nil, fmt.Errorf("reading the selector of PodDisruptionBudget %s/%s: %w", pdb.Namespace, pdb.Name, err)
			}
			for _, v := range victims {
				if _, disrupted := pdb.Status.DisruptedPods[v.Name]; disrupted {
					continue
				}
				if v.Namespace == pdb.Namespace && !selector.Empty() && selector.Matches(labels.Set(v.Labels)) {
					taken++
				}
			}
		}
		if taken == 0 {
			out = append(out, pdb)
			continue
		}
		c := pdb.DeepCopy()
		c.Status.DisruptionsAllowed -= taken
		out = append(out, c)
	}
	return out, nil
}
