// Package preemption chooses which lower-priority pods to evict from a node
// so that a pod's pending ResourceClaims can be allocated there. It works on
// the same state the DRA allocator sees: it removes the claims the victims
// alone hold from the node's allocated claims and runs the real structured
// allocator (pkg/dra) for the preemptor's claims. Kubernetes
// 1.37's own preemption cannot do this: its DRA filter does not take removed
// pods into account, so it reports that preemption is not helpful.
//
// A running gang (a PodGroup of disruptionMode All, units.go) is one victim,
// evicted whole or not at all. The package is pure: it reads objects and
// returns a decision; evicting and nominating is the scheduler plugin's
// job, which EvictAll (evict.go) orders: every victim's PodDisruptionBudget
// is checked, for all of them together, before the first eviction.
package preemption

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	v1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/tangram-gpu/tangram/pkg/device"
	"github.com/tangram-gpu/tangram/pkg/dra"
)

// Node is one node as preemption sees it.
type Node struct {
	Name    string
	Slices  []*resourceapi.ResourceSlice
	Classes []*resourceapi.DeviceClass
	// Pods are the pods bound (or being bound) to the node.
	Pods []*v1.Pod
	// Claims are the allocated claims holding devices of the node,
	// including allocations the scheduler is still writing (in flight).
	Claims []*resourceapi.ResourceClaim
	// Nominated are the pods nominated to the node by an earlier
	// preemption and not bound yet. Those of at least the preemptor's
	// priority keep first claim on the devices being freed (see
	// SelectVictims).
	Nominated []Nominated
	// Evicted are pods (by UID) evicted already whose deletion the
	// caller's view of Pods does not show yet; they count as terminating.
	Evicted map[types.UID]bool
	// Gangs are the running pod groups whose members may only be disrupted
	// together (see Gang); the cluster's, or at least those with a member
	// among Pods. A pod of none of them is a victim on its own.
	Gangs []*Gang
}

// Nominated is a pod nominated to a node with its pending claims.
type Nominated struct {
	Pod    *v1.Pod
	Claims []*resourceapi.ResourceClaim
}

// Freed is one claim evicting a victim frees.
type Freed struct {
	Pod     *v1.Pod
	Claim   *resourceapi.ResourceClaim
	Devices []string
	// Whole is true when the claim holds some card whole (no share, or
	// all of the card's memory), false when it holds only shares.
	Whole bool
}

// Decision is the outcome for one node.
type Decision struct {
	// Fits is true when the preemptor's claims can be allocated on the node
	// once Victims are gone. It can be true with no victims: the claims of
	// pods that are already terminating or gone are being freed.
	Fits bool
	// Victims are the pods to evict: each victim on its own, and every
	// running member of each gang in Gangs, on whatever node it runs.
	Victims []*v1.Pod
	// Gangs are the gangs among the victims, each evicted whole; a gang
	// counts as one victim when decisions are compared.
	Gangs []*Gang
	// Freed are the victims' claims that their eviction frees (a gang's on
	// every node), for the events saying which devices go to whom.
	Freed []Freed
	// Reserved names the nominated pods whose claims were counted first;
	// Displaced those of them whose claims no longer fit on the node (their
	// devices went to someone else): they preempt again when next tried.
	Reserved, Displaced []string
	// Score is the placement score (pkg/placement's tangram policy) of the
	// preemptor on the node after the victims are gone; higher means the
	// cards are left less fragmented.
	Score float64
	// Reason says why preemption cannot help on the node when Fits is
	// false, for the pod's events.
	Reason string
}

// Limits bounds the search. The zero value means DefaultLimits.
type Limits struct {
	// Simulations is how many allocator runs the exhaustive search over
	// small victim sets may take on one node; beyond it the search falls
	// back to reprieving candidates one at a time (which still finds a
	// minimal set, but not always the smallest one).
	Simulations int
}

// DefaultLimits allow every single victim and pair among ~40 candidates.
var DefaultLimits = Limits{Simulations: 800}

// PodPriority is the pod's priority; pods without one have 0, as in the
// scheduler.
func PodPriority(pod *v1.Pod) int32 { return ptr.Deref(pod.Spec.Priority, 0) }

// MayPreempt says whether pod may evict others at all.
func MayPreempt(pod *v1.Pod) bool {
	return ptr.Deref(pod.Spec.PreemptionPolicy, v1.PreemptLowerPriority) != v1.PreemptNever
}

// SelectVictims finds the fewest, lowest-priority victims on node whose
// eviction lets claims (the preemptor's pending claims) be allocated there.
//
// A victim is a pod on its own or a gang (see Gang): a gang member is never
// evicted alone. All of the gang's running members go, on every node; the
// gang counts as one victim of the group's priority, and the claims of all
// its members count as freed. Sets of pods on their own are preferred over
// any set with a gang when both would do; among sets with gangs, the fewest
// victims, then the fewest gangs.
//
// Devices that are being freed (claims of terminating or gone pods) are
// counted once: the pods nominated to the node with at least the
// preemptor's priority, most important first, have their claims allocated
// before the preemptor's in every simulation, on the node as it is without
// further evictions; a nominated pod whose claims do not fit any more is
// left out (it preempts again when the scheduler next tries it). So two
// preemptors never count on the same victim, a victim is never evicted
// twice, and a higher-priority preemptor may take devices a lower one was
// waiting for.
// Among equally good sets it prefers the one whose removal leaves the cards
// least fragmented. A victim is of lower priority than preemptor, not
// terminating, and its eviction, with the other victims', stays within
// every PodDisruptionBudget (a victim the Eviction API would refuse even on
// its own, see CheckEvictions, is none); evicting it frees only the claims
// reserved for victims alone, so a claim shared with a pod that stays, a
// claim reserved for a PodGroup (or anything but pods) and admin-access
// results are never freed.
func SelectVictims(ctx context.Context, node Node, preemptor *v1.Pod, claims []*resourceapi.ResourceClaim,
	pdbs []*policyv1.PodDisruptionBudget, limits Limits) (Decision, error) {
	if limits.Simulations <= 0 {
		limits = DefaultLimits
	}
	if !MayPreempt(preemptor) {
		return Decision{Reason: "the pod's preemptionPolicy is Never"}, nil
	}
	s, err := newSearch(ctx, node, preemptor, claims, pdbs)
	if err != nil {
		return Decision{}, err
	}
	if fits, err := s.fits(nil); err != nil {
		return Decision{}, err
	} else if fits {
		return s.decision(nil)
	}
	if len(s.candidates) == 0 {
		return Decision{Reason: "no lower-priority pod on the node holds devices only it uses"}, nil
	}
	all := make([]int, len(s.candidates))
	var alone []int // the pods on their own
	for i := range all {
		all[i] = i
		if s.candidates[i].gang == nil {
			alone = append(alone, i)
		}
	}
	if fits, err := s.fits(all); err != nil {
		return Decision{}, err
	} else if !fits {
		reason := "the claims cannot be allocated even with every lower-priority pod gone"
		if len(s.reserved) > 0 {
			reason += fmt.Sprintf(" and the claims of %s (nominated to the node, of at least the same priority) allocated first", strings.Join(s.reserved, ", "))
		}
		return Decision{Reason: reason, Reserved: s.reserved, Displaced: s.displaced}, nil
	}
	// Pods on their own first: a gang goes only when they cannot make room.
	var best []int
	if len(alone) > 0 && len(alone) < len(all) {
		if fits, err := s.fits(alone); err != nil {
			return Decision{}, err
		} else if fits {
			if best, err = s.choose(alone, limits.Simulations); err != nil {
				return Decision{}, err
			}
		}
	}
	if best == nil {
		if best, err = s.choose(all, limits.Simulations); err != nil {
			return Decision{}, err
		}
	}
	if best == nil {
		return Decision{Reason: "evicting the lower-priority pods that would make room violates a PodDisruptionBudget"}, nil
	}
	return s.decision(best)
}

// choose finds a fitting set of the candidates in pool (their indices,
// ascending): the smallest within the simulation budget, else a minimal one
// by reprieving; nil if none stays within the budgets.
func (s *search) choose(pool []int, maxRuns int) ([]int, error) {
	best, err := s.smallest(pool, maxRuns)
	if err != nil || best != nil {
		return best, err
	}
	return s.reprieve(pool)
}

// search holds one node's simulation inputs.
type search struct {
	ctx       context.Context
	node      Node
	preemptor *v1.Pod
	claims    []*resourceapi.ResourceClaim
	// candidates are the possible victims, least important first.
	candidates []unit
	// kept are the node's claims no eviction can free; freeable are the
	// others with the pods (UIDs) that must all go to free them.
	kept     []*resourceapi.ResourceClaim
	freeable []freeableClaim
	// budgets are the PodDisruptionBudgets covering candidates: how many
	// more of its pods may go, and how many pods of each candidate it
	// covers.
	budgets []budget
	runs    int
	model   *scoreModel
	// reserved and displaced are the nominated pods counted first and
	// those whose claims no longer fit.
	reserved, displaced []string
}

type freeableClaim struct {
	claim *resourceapi.ResourceClaim
	pods  []types.UID
}

type budget struct {
	allowed int32
	covers  []int32 // pods covered, by candidate index
}

func newSearch(ctx context.Context, node Node, preemptor *v1.Pod, claims []*resourceapi.ResourceClaim, pdbs []*policyv1.PodDisruptionBudget) (*search, error) {
	s := &search{ctx: ctx, node: node, preemptor: preemptor, claims: claims}
	gone := func(p *v1.Pod) bool { return p.DeletionTimestamp != nil || node.Evicted[p.UID] }
	running := map[types.UID]*v1.Pod{}
	for _, p := range node.Pods {
		if !gone(p) {
			running[p.UID] = p
		}
	}
	// A claim is freeable when every consumer is a pod; consumers that are
	// terminating or no longer on the node count as gone already.
	holders := map[types.UID]bool{}
	for _, c := range node.Claims {
		if c.Status.Allocation == nil {
			continue
		}
		pods, ok := podConsumers(c, running)
		if !ok || adminAccessOnly(c) {
			s.kept = append(s.kept, c)
			continue
		}
		s.freeable = append(s.freeable, freeableClaim{claim: c, pods: pods})
		for _, uid := range pods {
			holders[uid] = true
		}
	}
	gangOf := map[types.UID]*Gang{}
	for _, g := range node.Gangs {
		for _, p := range g.Pods {
			gangOf[p.UID] = g
		}
	}
	priority := PodPriority(preemptor)
	seen := map[*Gang]bool{}
	for _, p := range running {
		if !holders[p.UID] || p.UID == preemptor.UID {
			continue
		}
		g := gangOf[p.UID]
		if g == nil {
			if PodPriority(p) < priority {
				s.candidates = append(s.candidates, podUnit(p))
			}
			continue
		}
		if seen[g] {
			continue
		}
		seen[g] = true
		// The gang's running members: on this node as Pods shows them, on
		// the others as the gang does.
		var members []*v1.Pod
		for _, m := range g.Pods {
			if r, here := running[m.UID]; here {
				members = append(members, r)
			} else if m.Spec.NodeName != node.Name && !gone(m) {
				members = append(members, m)
			}
		}
		if u := gangUnit(g, members); u.priority < priority && !slices.ContainsFunc(members, func(m *v1.Pod) bool { return m.UID == preemptor.UID }) {
			s.candidates = append(s.candidates, u)
		}
	}
	slices.SortFunc(s.candidates, lessImportantFirst)
	// A budget that allows no disruption protects every pod it covers, and
	// a pod the Eviction API would refuse on its own (CheckEvictions: two
	// budgets, one the disruption controller has not processed) is
	// protected too; a candidate with a protected pod is none at all.
	protected := map[int]bool{}
	for _, pdb := range pdbs {
		b, err := budgetOf(pdb, s.candidates)
		if err != nil {
			return nil, err
		}
		if b != nil && b.allowed <= 0 {
			for i, n := range b.covers {
				if n > 0 {
					protected[i] = true
				}
			}
		}
	}
	for i, u := range s.candidates {
		if CheckEvictions(pdbs, u.pods) != nil {
			protected[i] = true
		}
	}
	if len(protected) > 0 {
		kept := s.candidates[:0:0]
		for i, u := range s.candidates {
			if !protected[i] {
				kept = append(kept, u)
			}
		}
		s.candidates = kept
	}
	for _, pdb := range pdbs {
		b, _ := budgetOf(pdb, s.candidates) // its selector parsed above
		if b != nil {
			s.budgets = append(s.budgets, *b)
		}
	}
	if err := s.reserve(); err != nil {
		return nil, err
	}
	return s, nil
}

// reserve allocates the claims of the nominated pods of at least the
// preemptor's priority on the node with no further eviction and keeps them
// for every simulation.
func (s *search) reserve() error {
	priority := PodPriority(s.preemptor)
	var nominated []Nominated
	for _, n := range s.node.Nominated {
		if n.Pod.UID != s.preemptor.UID && PodPriority(n.Pod) >= priority {
			nominated = append(nominated, n)
		}
	}
	slices.SortStableFunc(nominated, func(a, b Nominated) int { return cmp.Compare(PodPriority(b.Pod), PodPriority(a.Pod)) })
	base := &dra.Node{Name: s.node.Name, Slices: s.node.Slices, Classes: s.node.Classes, Allocated: s.remaining(nil)}
	for _, n := range nominated {
		try := &dra.Node{Name: base.Name, Slices: base.Slices, Classes: base.Classes, Allocated: slices.Clone(base.Allocated)}
		fits := true
		for _, c := range n.Claims {
			if _, err := try.Allocate(s.ctx, c); err != nil {
				if !errors.Is(err, dra.ErrUnschedulable) {
					return fmt.Errorf("simulating the claims of pod %s/%s, nominated to node %s: %w", n.Pod.Namespace, n.Pod.Name, s.node.Name, err)
				}
				fits = false
				break
			}
		}
		if !fits {
			s.displaced = append(s.displaced, n.Pod.Name)
			continue
		}
		s.kept = append(s.kept, try.Allocated[len(base.Allocated):]...)
		s.reserved = append(s.reserved, n.Pod.Name)
		base = try
	}
	return nil
}

// podConsumers lists the pods a claim is reserved for that are still
// running; ok is false when something other than a pod (e.g. a PodGroup)
// holds it or it is reserved for nobody (a claim being allocated).
func podConsumers(c *resourceapi.ResourceClaim, running map[types.UID]*v1.Pod) ([]types.UID, bool) {
	if len(c.Status.ReservedFor) == 0 {
		return nil, false
	}
	var pods []types.UID
	for _, ref := range c.Status.ReservedFor {
		if ref.APIGroup != "" || ref.Resource != "pods" {
			return nil, false
		}
		if _, ok := running[ref.UID]; ok {
			pods = append(pods, ref.UID)
		}
	}
	return pods, true
}

// adminAccessOnly: admin access takes no device away from others, so
// evicting its pod frees nothing.
func adminAccessOnly(c *resourceapi.ResourceClaim) bool {
	for _, r := range c.Status.Allocation.Devices.Results {
		if !ptr.Deref(r.AdminAccess, false) {
			return false
		}
	}
	return true
}

// budgetOf returns what pdb allows of the candidates it covers, or nil when
// it covers none. Like the stock scheduler, a nil or empty selector covers
// nothing and pods the budget already counts as disrupted are free to go.
func budgetOf(pdb *policyv1.PodDisruptionBudget, candidates []unit) (*budget, error) {
	if pdb.Spec.Selector == nil {
		return nil, nil
	}
	selector, err := metav1.LabelSelectorAsSelector(pdb.Spec.Selector)
	if err != nil {
		return nil, fmt.Errorf("reading the selector of PodDisruptionBudget %s/%s: %w", pdb.Namespace, pdb.Name, err)
	}
	if selector.Empty() {
		return nil, nil
	}
	b := &budget{allowed: pdb.Status.DisruptionsAllowed, covers: make([]int32, len(candidates))}
	any := false
	for i, u := range candidates {
		for _, p := range u.pods {
			if p.Namespace != pdb.Namespace || !selector.Matches(labels.Set(p.Labels)) {
				continue
			}
			if _, disrupted := pdb.Status.DisruptedPods[p.Name]; disrupted {
				continue
			}
			b.covers[i]++
			any = true
		}
	}
	if !any {
		return nil, nil
	}
	return b, nil
}

func startTime(p *v1.Pod) metav1.Time {
	if p.Status.StartTime != nil {
		return *p.Status.StartTime
	}
	return p.CreationTimestamp
}

// withinBudgets says whether evicting the candidates set keeps every PDB.
func (s *search) withinBudgets(set []int) bool {
	for _, b := range s.budgets {
		n := int32(0)
		for _, i := range set {
			n += b.covers[i]
		}
		if n > b.allowed {
			return false
		}
	}
	return true
}

// remaining is the node's allocated claims once the candidates in set are
// gone.
func (s *search) remaining(set []int) []*resourceapi.ResourceClaim {
	gone := make(map[types.UID]bool, len(set))
	for _, i := range set {
		for _, p := range s.candidates[i].pods {
			gone[p.UID] = true
		}
	}
	out := slices.Clone(s.kept)
	for _, f := range s.freeable {
		freed := true
		for _, uid := range f.pods {
			if !gone[uid] {
				freed = false
				break
			}
		}
		if !freed {
			out = append(out, f.claim)
		}
	}
	return out
}

// fits runs the allocator for the preemptor's claims, one after the other
// as the scheduler's DRA plugin does, with the candidates in set gone.
func (s *search) fits(set []int) (bool, error) {
	s.runs++
	n := &dra.Node{Name: s.node.Name, Slices: s.node.Slices, Classes: s.node.Classes, Allocated: s.remaining(set)}
	for _, c := range s.claims {
		if _, err := n.Allocate(s.ctx, c); err != nil {
			if errors.Is(err, dra.ErrUnschedulable) {
				return false, nil
			}
			return false, fmt.Errorf("simulating preemption for pod %s/%s on node %s: %w", s.preemptor.Namespace, s.preemptor.Name, s.node.Name, err)
		}
	}
	return true, nil
}

// rank orders fitting sets of equal size: the fewer gangs, then the lower
// highest priority, then the lower sum of priorities, then the higher
// placement score.
type ranked struct {
	set      []int
	gangs    int
	highest  int32
	sum      int64
	score    float64
	hasScore bool
}

func (s *search) rank(set []int) ranked {
	r := ranked{set: set, highest: -1 << 31}
	for _, i := range set {
		u := s.candidates[i]
		if u.gang != nil {
			r.gangs++
		}
		r.highest = max(r.highest, u.priority)
		r.sum += int64(u.priority)
	}
	return r
}

func (s *search) better(a, b ranked) bool {
	if a.gangs != b.gangs {
		return a.gangs < b.gangs
	}
	if a.highest != b.highest {
		return a.highest < b.highest
	}
	if a.sum != b.sum {
		return a.sum < b.sum
	}
	return a.score > b.score
}

// smallest tries every set of one victim of pool, then of two, ... as long
// as the allocator runs stay within budget, and returns the best fitting
// set of the first size that has one (nil if none was found within budget).
func (s *search) smallest(pool []int, maxRuns int) ([]int, error) {
	n := len(pool)
	set := make([]int, 0, n)
	for k := 1; k <= n; k++ {
		if s.runs+binomial(n, k) > maxRuns {
			return nil, nil
		}
		var best *ranked
		var err error
		combinations(n, k, func(picked []int) bool {
			set = set[:0]
			for _, j := range picked {
				set = append(set, pool[j])
			}
			if !s.withinBudgets(set) {
				return true
			}
			var ok bool
			if ok, err = s.fits(set); err != nil {
				return false
			}
			if !ok {
				return true
			}
			r := s.rank(slices.Clone(set))
			// The placement score is only needed to break ties.
			if best != nil && r.gangs == best.gangs && r.highest == best.highest && r.sum == best.sum {
				if !best.hasScore {
					best.score, best.hasScore = s.score(best.set), true
				}
				r.score, r.hasScore = s.score(r.set), true
			}
			if best == nil || s.better(r, *best) {
				best = &r
			}
			return true
		})
		if err != nil {
			return nil, err
		}
		if best != nil {
			return best.set, nil
		}
	}
	return nil, nil
}

// reprieve starts from every candidate of pool gone and lets the most
// important ones stay while the claims still fit, as the stock scheduler's
// preemption does; candidates a PodDisruptionBudget covers are let stay
// first.
func (s *search) reprieve(pool []int) ([]int, error) {
	order := make([]int, len(pool))
	for i := range order {
		order[i] = pool[len(pool)-1-i] // most important first
	}
	covered := func(i int) bool {
		for _, b := range s.budgets {
			if b.covers[i] > 0 {
				return true
			}
		}
		return false
	}
	slices.SortStableFunc(order, func(a, b int) int {
		switch ca, cb := covered(a), covered(b); {
		case ca && !cb:
			return -1
		case cb && !ca:
			return 1
		}
		return 0
	})
	set := slices.Clone(pool)
	for _, i := range order {
		without := slices.DeleteFunc(slices.Clone(set), func(j int) bool { return j == i })
		ok, err := s.fits(without)
		if err != nil {
			return nil, err
		}
		if ok {
			set = without
		}
	}
	if !s.withinBudgets(set) {
		return nil, nil
	}
	return set, nil
}

func (s *search) decision(set []int) (Decision, error) {
	d := Decision{Fits: true, Score: s.score(set), Reserved: s.reserved, Displaced: s.displaced}
	victims := map[types.UID]*v1.Pod{}
	for _, i := range set {
		u := s.candidates[i]
		for _, p := range u.pods {
			d.Victims = append(d.Victims, p)
			victims[p.UID] = p
		}
		if u.gang != nil {
			d.Gangs = append(d.Gangs, u.gang)
		}
	}
	here := map[string]bool{}
	for _, f := range s.freeable {
		here[f.claim.Namespace+"/"+f.claim.Name] = true
		if len(f.pods) == 0 || slices.ContainsFunc(f.pods, func(uid types.UID) bool { return victims[uid] == nil }) {
			continue
		}
		for _, uid := range f.pods {
			d.Freed = append(d.Freed, Freed{Pod: victims[uid], Claim: f.claim, Devices: dra.Devices(f.claim.Status.Allocation), Whole: s.holdsWhole(f.claim)})
		}
	}
	for _, c := range s.kept {
		here[c.Namespace+"/"+c.Name] = true
	}
	// What a gang's members hold on other nodes is freed as well: a claim
	// there whose consumers are all victims.
	for _, g := range d.Gangs {
		for _, c := range g.Claims {
			if here[c.Namespace+"/"+c.Name] || c.Status.Allocation == nil {
				continue
			}
			here[c.Namespace+"/"+c.Name] = true
			if !slices.ContainsFunc(c.Status.ReservedFor, func(ref resourceapi.ResourceClaimConsumerReference) bool {
				return ref.APIGroup != "" || ref.Resource != "pods" || victims[ref.UID] == nil
			}) {
				for _, ref := range c.Status.ReservedFor {
					d.Freed = append(d.Freed, Freed{Pod: victims[ref.UID], Claim: c, Devices: dra.Devices(c.Status.Allocation), Whole: s.holdsWhole(c)})
				}
			}
		}
	}
	return d, nil
}

// holdsWhole says whether one of the claim's results takes a whole device,
// by the device contract's rule (device.HoldsWholeCard): no share ID, no
// consumed memory, or all of the device's allocatable memory (the request
// policy's maximum, which is below the capacity when the capacity is no
// whole number of steps, as on most real cards).
func (s *search) holdsWhole(c *resourceapi.ResourceClaim) bool {
	for _, r := range c.Status.Allocation.Devices.Results {
		if r.ShareID == nil || device.ConsumedMemory(r.ConsumedCapacity) == device.NoMemoryConsumed {
			return true
		}
		if d := s.sliceDevice(r.Driver, r.Pool, r.Device); d != nil &&
			device.HoldsWholeCard(true, device.ConsumedMemory(r.ConsumedCapacity), device.AllocatableMemory(d)) {
			return true
		}
	}
	return false
}

// sliceDevice finds a published device of the node; nil if none.
func (s *search) sliceDevice(driver, pool, name string) *resourceapi.Device {
	for _, sl := range s.node.Slices {
		if sl.Spec.Driver != driver || sl.Spec.Pool.Name != pool {
			continue
		}
		for i := range sl.Spec.Devices {
			if sl.Spec.Devices[i].Name == name {
				return &sl.Spec.Devices[i]
			}
		}
	}
	return nil
}

// binomial is n choose k, saturating well above any budget.
func binomial(n, k int) int {
	r := 1
	for i := 1; i <= k; i++ {
		r = r * (n - k + i) / i
		if r > 1<<30 {
			return 1 << 30
		}
	}
	return r
}

// combinations calls f with every k-subset of 0..n-1 in lexicographic order
// until f returns false. f must not keep set.
func combinations(n, k int, f func(set []int) bool) {
	set := make([]int, k)
	for i := range set {
		set[i] = i
	}
	for {
		if !f(set) {
			return
		}
		i := k - 1
		for i >= 0 && set[i] == n-k+i {
			i--
		}
		if i < 0 {
			return
		}
		set[i]++
		for j := i + 1; j < k; j++ {
			set[j] = set[j-1] + 1
		}
	}
}
