// Package clusterstate is tangram-scheduler's incremental model of the DRA
// state (every node's cards with the allocated claims applied, and the
// workload's GPU shapes), with the scores memoised per node and the policy
// kept between pods.
//
// It is the scheduler plugin's concurrent part: informer events, Reserve and
// Unreserve write it while the scheduler scores nodes in parallel. It lives
// in this module, not in the tangram-scheduler module, so that make unit
// tests it under the race detector; the plugin around it is framework glue
// with no state of its own, tested without it (docs/testing.md).
package clusterstate

import (
	"cmp"
	"slices"
	"sort"
	"sync"
	"sync/atomic"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/tangram-gpu/tangram/pkg/device"
	"github.com/tangram-gpu/tangram/pkg/placement"
)

// State is the plugin's incremental model of the DRA state: every
// node's cards with the allocated claims applied, and the live workload as
// a histogram of GPU shapes. It is updated per object event (informer adds,
// updates and deletes of ResourceSlices and ResourceClaims) and per
// assumed or unreserved pod, so that scoring a pod costs a look-up per node
// instead of re-reading every slice and applying every claim: only the node
// an event touches is rebuilt.
//
// A node model is never modified after it is published; a rebuild replaces
// it, so a scheduling cycle can keep using the models it took.
type State struct {
	mu sync.RWMutex

	nodes map[string]*nodeState
	// sliceNode is the node of each of our slices, for deletes.
	sliceNode map[types.UID]string
	// poolNode is the node that publishes each pool.
	poolNode map[string]string

	claims map[types.UID]*claimState
	// claimsByPool lists the claims whose effective allocation holds a
	// device of the pool.
	claimsByPool map[string]map[types.UID]struct{}

	// shapes is the sum of every modelled node's shapes: the workload
	// sample the policy measures fragmentation against, as a histogram.
	shapes map[Shape]int
	// modelled counts the nodes with a model; mark is the generation of the
	// last Snapshot (see Snapshot).
	modelled int
	mark     uint64
}

// nodeState is one node of State.
type nodeState struct {
	name   string
	slices map[types.UID]*resourceapi.ResourceSlice
	// pools are the pools of slices, in slice name order.
	pools []string
	// cards is read from slices, again only after a slice changed.
	cards *placement.NodeCards
	// model has the claims applied; nil when the node cannot be modelled
	// (err says why), and then it counts in no workload either.
	model  *placement.Node
	err    error
	shapes map[Shape]int
	mark   uint64
	// cardMemory is the memory of the model's first card (a share's size
	// is relative to it).
	cardMemory int64
	// memo is the last score of the model, for a pod scored again while
	// nothing it depends on changed.
	memo atomic.Pointer[scoreMemo]
}

// Shape is a GPU demand of the workload sample, as WorkloadSample reports
// allocations (no CPU or memory, any model).
type Shape struct {
	Whole int
	Share int64
}

// ShapeOf is the shape of a request.
func ShapeOf(r placement.Request) Shape { return Shape{Whole: r.WholeCards, Share: r.ShareMilli} }

// claimState is what the plugin knows of one claim: the allocation the
// informer shows and the one a pod's Reserve assumed before the API server
// has it. The informer's wins once it shows one.
type claimState struct {
	informer, assumed *placement.Allocation
	// pools are the pools of the effective allocation, as indexed in
	// claimsByPool.
	pools []string
}

func (c *claimState) effective() *placement.Allocation {
	if c.informer != nil {
		return c.informer
	}
	return c.assumed
}

func New() *State {
	return &State{
		nodes:        map[string]*nodeState{},
		sliceNode:    map[types.UID]string{},
		poolNode:     map[string]string{},
		claims:       map[types.UID]*claimState{},
		claimsByPool: map[string]map[types.UID]struct{}{},
		shapes:       map[Shape]int{},
	}
}

// ours reports whether a slice is one of our driver's node-local slices,
// the only ones the model reads.
func ours(s *resourceapi.ResourceSlice) bool {
	return s.Spec.Driver == device.DriverName && s.Spec.NodeName != nil && *s.Spec.NodeName != ""
}

// upsertSlice records an added or updated slice.
func (cs *State) UpsertSlice(s *resourceapi.ResourceSlice) {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	if old, ok := cs.sliceNode[s.UID]; ok && (!ours(s) || old != *s.Spec.NodeName) {
		cs.removeSliceLocked(s.UID)
	}
	if !ours(s) {
		return
	}
	name := *s.Spec.NodeName
	ns := cs.nodes[name]
	if ns == nil {
		ns = &nodeState{name: name, slices: map[types.UID]*resourceapi.ResourceSlice{}}
		cs.nodes[name] = ns
	}
	ns.slices[s.UID] = s
	cs.sliceNode[s.UID] = name
	ns.cards = nil
	cs.rebuildLocked(ns)
}

// deleteSlice forgets a slice.
func (cs *State) DeleteSlice(s *resourceapi.ResourceSlice) {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	cs.removeSliceLocked(s.UID)
}

func (cs *State) removeSliceLocked(uid types.UID) {
	name, ok := cs.sliceNode[uid]
	if !ok {
		return
	}
	delete(cs.sliceNode, uid)
	ns := cs.nodes[name]
	delete(ns.slices, uid)
	ns.cards = nil
	cs.rebuildLocked(ns)
}

// upsertClaim records a claim as the informer shows it.
func (cs *State) UpsertClaim(c *resourceapi.ResourceClaim) {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	st := cs.claims[c.UID]
	if st == nil {
		st = &claimState{}
	}
	st.informer = nil
	if a, ok := placement.AllocationOf(c); ok {
		st.informer = &a
		// The API server has it now; the assumption is spent.
		st.assumed = nil
	}
	cs.setClaimLocked(c.UID, st)
}

// deleteClaim forgets a claim, assumed or not.
func (cs *State) DeleteClaim(uid types.UID) {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	if st := cs.claims[uid]; st != nil {
		st.informer, st.assumed = nil, nil
		cs.setClaimLocked(uid, st)
	}
}

// assume records the allocation a pod's Reserve made before the API server
// has it. It reports whether the claim was new to the state: only then may
// the pod's Unreserve take it back (another pod sharing the claim may hold
// it).
func (cs *State) Assume(c *resourceapi.ResourceClaim) bool {
	a, ok := placement.AllocationOf(c)
	if !ok {
		return false
	}
	cs.mu.Lock()
	defer cs.mu.Unlock()
	st := cs.claims[c.UID]
	if st != nil && st.effective() != nil {
		return false
	}
	if st == nil {
		st = &claimState{}
	}
	st.assumed = &a
	cs.setClaimLocked(c.UID, st)
	return true
}

// unassume takes back an assumed allocation the informer has not confirmed.
func (cs *State) Unassume(uid types.UID) {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	if st := cs.claims[uid]; st != nil && st.assumed != nil {
		st.assumed = nil
		cs.setClaimLocked(uid, st)
	}
}

// setClaimLocked re-indexes a claim after its allocation changed and
// rebuilds the nodes whose pools it left or joined.
func (cs *State) setClaimLocked(uid types.UID, st *claimState) {
	var pools []string
	if a := st.effective(); a != nil {
		for _, d := range a.Devices {
			if !slices.Contains(pools, d.Pool) {
				pools = append(pools, d.Pool)
			}
		}
	}
	touched := append(slices.Clone(st.pools), pools...)
	for _, p := range st.pools {
		if m := cs.claimsByPool[p]; m != nil {
			delete(m, uid)
			if len(m) == 0 {
				delete(cs.claimsByPool, p)
			}
		}
	}
	for _, p := range pools {
		m := cs.claimsByPool[p]
		if m == nil {
			m = map[types.UID]struct{}{}
			cs.claimsByPool[p] = m
		}
		m[uid] = struct{}{}
	}
	st.pools = pools
	if st.effective() == nil {
		delete(cs.claims, uid)
	} else {
		cs.claims[uid] = st
	}
	var rebuilt []string
	for _, p := range touched {
		name, ok := cs.poolNode[p]
		if !ok || slices.Contains(rebuilt, name) {
			continue
		}
		rebuilt = append(rebuilt, name)
		cs.rebuildLocked(cs.nodes[name])
	}
}

// rebuildLocked models a node again from its slices (read again only when
// one changed) and the claims on its pools, and moves its share of the
// workload histogram.
func (cs *State) rebuildLocked(ns *nodeState) {
	cs.addShapesLocked(ns, -1)
	if ns.model != nil {
		cs.modelled--
	}
	ns.model, ns.err, ns.shapes = nil, nil, nil
	for _, p := range ns.pools {
		if cs.poolNode[p] == ns.name {
			delete(cs.poolNode, p)
		}
	}
	ns.pools = nil
	if len(ns.slices) == 0 {
		delete(cs.nodes, ns.name)
		return
	}
	nodeSlices := make([]*resourceapi.ResourceSlice, 0, len(ns.slices))
	for _, s := range ns.slices {
		nodeSlices = append(nodeSlices, s)
	}
	// Any order gives the same cards (CardsFromSlices sorts by name);
	// sorting keeps the pool order, and so the claims', deterministic.
	sort.Slice(nodeSlices, func(a, b int) bool { return nodeSlices[a].Name < nodeSlices[b].Name })
	for _, s := range nodeSlices {
		if !slices.Contains(ns.pools, s.Spec.Pool.Name) {
			ns.pools = append(ns.pools, s.Spec.Pool.Name)
		}
		cs.poolNode[s.Spec.Pool.Name] = ns.name
	}
	if ns.cards == nil {
		cards, err := placement.CardsFromSlices(ns.name, nodeSlices)
		if err != nil {
			ns.err = err
			return
		}
		ns.cards = cards
	}
	var uids []types.UID
	for _, p := range ns.pools {
		for uid := range cs.claimsByPool[p] {
			if !slices.Contains(uids, uid) {
				uids = append(uids, uid)
			}
		}
	}
	slices.SortFunc(uids, func(a, b types.UID) int { return cmp.Compare(a, b) })
	allocations := make([]placement.Allocation, len(uids))
	for i, uid := range uids {
		allocations[i] = *cs.claims[uid].effective()
	}
	model, err := ns.cards.Node(0, 0, 0, 0, allocations)
	if err != nil {
		ns.err = err
		return
	}
	ns.model = model
	ns.cardMemory = cardMemory(model)
	cs.modelled++
	ns.shapes = map[Shape]int{}
	for _, r := range placement.WorkloadSample(allocations, map[string]*placement.Node{ns.name: model}) {
		ns.shapes[ShapeOf(r)]++
	}
	cs.addShapesLocked(ns, 1)
}

func (cs *State) addShapesLocked(ns *nodeState, sign int) {
	for k, v := range ns.shapes {
		cs.shapes[k] += sign * v
		if cs.shapes[k] == 0 {
			delete(cs.shapes, k)
		}
	}
}

// Snapshot is what one scheduling cycle reads of the state: the histogram
// of the workload on the filtered nodes, and the card sizes among them.
type Snapshot struct {
	Shapes map[Shape]int
	// CardMemories are the distinct card memories of the modelled nodes,
	// the first node's first.
	CardMemories []int64
}

// Snapshot takes the workload over the named nodes: nodes that did not
// pass filtering take no part in it, as their allocations are not seen by
// the pod.
func (cs *State) Snapshot(nodeNames []string) Snapshot {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	cs.mark++
	var s Snapshot
	seen := 0
	for _, name := range nodeNames {
		ns := cs.nodes[name]
		if ns == nil || ns.model == nil || ns.mark == cs.mark {
			continue
		}
		ns.mark = cs.mark
		if !slices.Contains(s.CardMemories, ns.cardMemory) {
			s.CardMemories = append(s.CardMemories, ns.cardMemory)
		}
		seen++
	}
	s.Shapes = make(map[Shape]int, len(cs.shapes))
	for k, v := range cs.shapes {
		s.Shapes[k] = v
	}
	if seen < cs.modelled {
		for _, ns := range cs.nodes {
			if ns.model != nil && ns.mark != cs.mark {
				for k, v := range ns.shapes {
					if s.Shapes[k] -= v; s.Shapes[k] == 0 {
						delete(s.Shapes, k)
					}
				}
			}
		}
	}
	return s
}

// Model returns the node's current model (nil when it has none) and the
// memory of its cards.
func (cs *State) Model(name string) (*placement.Node, int64) {
	model, mem, _ := cs.node(name)
	return model, mem
}

func (cs *State) node(name string) (*placement.Node, int64, *nodeState) {
	cs.mu.RLock()
	defer cs.mu.RUnlock()
	ns := cs.nodes[name]
	if ns == nil {
		return nil, 0, nil
	}
	return ns.model, ns.cardMemory, ns
}

// cardMemory is the memory of the node's first card: a share's size is
// relative to it.
func cardMemory(n *placement.Node) int64 {
	if len(n.Cards) == 0 {
		return 0
	}
	return n.Cards[0].Memory.Value
}
