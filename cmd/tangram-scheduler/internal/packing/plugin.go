// Package packing is Tangram's kube-scheduler score plugin: it rates the
// nodes that passed filtering with a pkg/placement policy over the DRA state
// (ResourceSlices and allocated claims), so GPU shares are packed across
// nodes. Filtering and the allocation itself stay with the stock DRA
// plugin; inside the chosen node the allocator's first fit picks the card.
package packing

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	resourcehelper "k8s.io/component-helpers/resource"
	"k8s.io/dynamic-resource-allocation/resourceclaim"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"

	"github.com/tangram-gpu/tangram/pkg/names"
	"github.com/tangram-gpu/tangram/pkg/placement"
)

// Name is the plugin name in KubeSchedulerConfiguration.
const Name = "TangramPacking"

const stateKey fwk.StateKey = Name

// Args are the plugin's arguments (pluginConfig[].args).
type Args struct {
	// Policy is one of placement.PolicyNames; empty means "tangram".
	Policy string `json:"policy,omitempty"`
}

// Plugin implements PreScore, Score and NormalizeScore.
type Plugin struct {
	handle fwk.Handle
	policy string

	// cards keeps each node's cards as read from its ResourceSlices, so a
	// scheduling cycle only applies the claims again (most of a node
	// model's cost, and slices change rarely).
	cardsMu sync.Mutex
	cards   map[string]cachedCards

	// allocs keeps each allocated claim's results, read once per
	// resourceVersion.
	allocMu sync.Mutex
	allocs  map[types.UID]cachedAllocation
}

type cachedAllocation struct {
	resourceVersion string
	allocation      placement.Allocation
	// ours is false for a claim that holds none of our devices.
	ours bool
}

// cachedCards is a node's cards and the slices (UID and resourceVersion)
// they were read from.
type cachedCards struct {
	key   string
	cards *placement.NodeCards
}

// nodeCards returns the node's cards, reading its slices again only when
// they changed. It also forgets nodes that no longer publish slices.
func (p *Plugin) nodeCards(node string, nodeSlices []*resourceapi.ResourceSlice) (*placement.NodeCards, error) {
	var key strings.Builder
	for _, s := range nodeSlices {
		key.WriteString(string(s.UID))
		key.WriteByte('/')
		key.WriteString(s.ResourceVersion)
		key.WriteByte(';')
	}
	p.cardsMu.Lock()
	defer p.cardsMu.Unlock()
	if c, ok := p.cards[node]; ok && c.key == key.String() {
		return c.cards, nil
	}
	cards, err := placement.CardsFromSlices(node, nodeSlices)
	if err != nil {
		return nil, err
	}
	if p.cards == nil {
		p.cards = map[string]cachedCards{}
	}
	p.cards[node] = cachedCards{key: key.String(), cards: cards}
	return cards, nil
}

// forgetNodesWithout drops cached cards of nodes that publish no slices.
func (p *Plugin) forgetNodesWithout(slicesByNode map[string][]*resourceapi.ResourceSlice) {
	p.cardsMu.Lock()
	defer p.cardsMu.Unlock()
	for node := range p.cards {
		if len(slicesByNode[node]) == 0 {
			delete(p.cards, node)
		}
	}
}

var (
	_ fwk.PreScorePlugin = (*Plugin)(nil)
	_ fwk.ScorePlugin    = (*Plugin)(nil)
)

// New is the plugin factory registered with the scheduler.
func New(ctx context.Context, obj runtime.Object, h fwk.Handle) (fwk.Plugin, error) {
	args := Args{Policy: "tangram"}
	if u, ok := obj.(*runtime.Unknown); ok && u != nil && len(u.Raw) > 0 {
		if err := decodeArgs(u.Raw, &args); err != nil {
			return nil, fmt.Errorf("%s args: %w", Name, err)
		}
	}
	if args.Policy == "" {
		args.Policy = "tangram"
	}
	if _, err := placement.New(args.Policy, placement.NewWorkload([]placement.Request{{WholeCards: 1}})); err != nil {
		return nil, fmt.Errorf("%s args: %w", Name, err)
	}
	return &Plugin{handle: h, policy: args.Policy}, nil
}

func (*Plugin) Name() string { return Name }

// cycleState is what PreScore prepares for Score.
type cycleState struct {
	nodes  map[string]*placement.Node
	claims []*resourceapi.ResourceClaim // the pod's pending claims
	cpu    int64
	memMiB int64
	policy placement.Policy
	pod    string
}

func (s *cycleState) Clone() fwk.StateData { return s }

// PreScore builds the model of every filtered node once per pod and the
// policy's workload from the claims allocated in the cluster.
func (p *Plugin) PreScore(ctx context.Context, state fwk.CycleState, pod *v1.Pod, nodes []fwk.NodeInfo) *fwk.Status {
	logger := klog.FromContext(ctx)
	dra := p.handle.SharedDRAManager()
	if dra == nil {
		return fwk.NewStatus(fwk.Skip)
	}
	podClaims, err := pendingClaims(pod, dra.ResourceClaims())
	if err != nil {
		return fwk.AsStatus(err)
	}
	if len(podClaims) == 0 {
		return fwk.NewStatus(fwk.Skip)
	}
	slices, err := dra.ResourceSlices().ListWithDeviceTaintRules()
	if err != nil {
		return fwk.AsStatus(fmt.Errorf("listing ResourceSlices: %w", err))
	}
	allClaims, err := dra.ResourceClaims().List()
	if err != nil {
		return fwk.AsStatus(fmt.Errorf("listing ResourceClaims: %w", err))
	}
	slicesByNode := map[string][]*resourceapi.ResourceSlice{}
	for _, s := range slices {
		if s.Spec.Driver == names.DriverName && s.Spec.NodeName != nil {
			slicesByNode[*s.Spec.NodeName] = append(slicesByNode[*s.Spec.NodeName], s)
		}
	}
	allocations := p.allocations(allClaims)
	// Which allocations touch each pool, once per pool.
	allocsByPool := map[string][]int{}
	for i, a := range allocations {
		for j, d := range a.Devices {
			if !poolSeenBefore(a.Devices[:j], d.Pool) {
				allocsByPool[d.Pool] = append(allocsByPool[d.Pool], i)
			}
		}
	}
	p.forgetNodesWithout(slicesByNode)
	s := &cycleState{nodes: make(map[string]*placement.Node, len(nodes)), claims: podClaims, pod: pod.Name}
	requests := resourcehelper.PodRequests(pod, resourcehelper.PodResourcesOptions{})
	s.cpu = requests.Cpu().MilliValue()
	s.memMiB = requests.Memory().Value() >> 20
	for _, ni := range nodes {
		node := ni.Node()
		if node == nil || len(slicesByNode[node.Name]) == 0 {
			continue
		}
		nodeAllocations := onNode(allocations, allocsByPool, slicesByNode[node.Name])
		cards, err := p.nodeCards(node.Name, slicesByNode[node.Name])
		if err != nil {
			logger.V(4).Info("Node left out of GPU packing", "node", node.Name, "err", err)
			continue
		}
		n, err := cards.Node(
			ni.GetAllocatable().GetMilliCPU(), ni.GetAllocatable().GetMemory()>>20,
			ni.GetRequested().GetMilliCPU(), ni.GetRequested().GetMemory()>>20,
			nodeAllocations)
		if err != nil {
			logger.V(4).Info("Node left out of GPU packing", "node", node.Name, "err", err)
			continue
		}
		s.nodes[node.Name] = n
	}
	sample := placement.WorkloadSample(allocations, s.nodes)
	for _, n := range s.nodes {
		// The pod itself is part of the workload, so the sample is never empty.
		if r, ok := placement.RequestFromClaims(pod.Name, s.cpu, s.memMiB, podClaims, cardMemory(n)); ok {
			sample = append(sample, r)
			break
		}
	}
	s.policy, err = placement.New(p.policy, placement.NewWorkload(sample))
	if err != nil {
		return fwk.AsStatus(err)
	}
	state.Write(stateKey, s)
	return nil
}

// poolSeenBefore says whether one of the earlier devices is in pool.
func poolSeenBefore(earlier []placement.AllocatedDevice, pool string) bool {
	for _, d := range earlier {
		if d.Pool == pool {
			return true
		}
	}
	return false
}

// onNode picks the allocations that touch the pools of a node's slices,
// each once (a claim may hold devices of two pools of one node).
func onNode(allocations []placement.Allocation, allocsByPool map[string][]int, nodeSlices []*resourceapi.ResourceSlice) []placement.Allocation {
	var idx []int
	pools := 0
	for i, sl := range nodeSlices {
		pool := sl.Spec.Pool.Name
		if slices.ContainsFunc(nodeSlices[:i], func(o *resourceapi.ResourceSlice) bool { return o.Spec.Pool.Name == pool }) {
			continue
		}
		pools++
		idx = append(idx, allocsByPool[pool]...)
	}
	if pools > 1 {
		slices.Sort(idx)
		idx = slices.Compact(idx)
	}
	out := make([]placement.Allocation, len(idx))
	for i, j := range idx {
		out[i] = allocations[j]
	}
	return out
}

// allocations reads our driver's results of every allocated claim, parsing
// a claim's status only when it is new or changed (an allocation does not
// change while the claim exists), and forgets claims that are gone.
func (p *Plugin) allocations(claims []*resourceapi.ResourceClaim) []placement.Allocation {
	p.allocMu.Lock()
	defer p.allocMu.Unlock()
	if p.allocs == nil {
		p.allocs = map[types.UID]cachedAllocation{}
	}
	var out []placement.Allocation
	for _, c := range claims {
		if c.Status.Allocation == nil {
			continue
		}
		cached, ok := p.allocs[c.UID]
		if !ok || cached.resourceVersion != c.ResourceVersion {
			cached.allocation, cached.ours = placement.AllocationOf(c)
			cached.resourceVersion = c.ResourceVersion
			p.allocs[c.UID] = cached
		}
		if cached.ours {
			out = append(out, cached.allocation)
		}
	}
	if len(p.allocs) > len(claims) {
		present := make(map[types.UID]bool, len(claims))
		for _, c := range claims {
			present[c.UID] = true
		}
		for uid := range p.allocs {
			if !present[uid] {
				delete(p.allocs, uid)
			}
		}
	}
	return out
}

// Score rates one node; NormalizeScore maps the policy's scores to 0..100.
func (p *Plugin) Score(ctx context.Context, state fwk.CycleState, pod *v1.Pod, nodeInfo fwk.NodeInfo) (int64, *fwk.Status) {
	data, err := state.Read(stateKey)
	if err != nil {
		return 0, nil
	}
	s := data.(*cycleState)
	n, ok := s.nodes[nodeInfo.Node().Name]
	if !ok {
		return math.MinInt32, nil
	}
	r, ok := placement.RequestFromClaims(s.pod, s.cpu, s.memMiB, s.claims, cardMemory(n))
	if !ok {
		return math.MinInt32, nil
	}
	cands, fits := n.Candidates(r, nil)
	if !fits {
		return math.MinInt32, nil
	}
	c := s.policy.Score(n, r, cands)
	return int64(math.Round(c.Score * 1000)), nil
}

func (p *Plugin) ScoreExtensions() fwk.ScoreExtensions { return p }

// NormalizeScore maps the scores linearly to 0..MaxNodeScore; nodes the
// model could not rate get 0.
func (p *Plugin) NormalizeScore(ctx context.Context, state fwk.CycleState, pod *v1.Pod, scores fwk.NodeScoreList) *fwk.Status {
	lo, hi := int64(math.MaxInt64), int64(math.MinInt64)
	for _, s := range scores {
		if s.Score == math.MinInt32 {
			continue
		}
		lo, hi = min(lo, s.Score), max(hi, s.Score)
	}
	for i := range scores {
		switch {
		case scores[i].Score == math.MinInt32:
			scores[i].Score = 0
		case hi == lo:
			scores[i].Score = fwk.MaxNodeScore
		default:
			scores[i].Score = (scores[i].Score - lo) * fwk.MaxNodeScore / (hi - lo)
		}
	}
	return nil
}

// pendingClaims returns the pod's claims that are not allocated yet.
func pendingClaims(pod *v1.Pod, claims fwk.ResourceClaimTracker) ([]*resourceapi.ResourceClaim, error) {
	var out []*resourceapi.ResourceClaim
	for i := range pod.Spec.ResourceClaims {
		name, _, err := resourceclaim.Name(pod, &pod.Spec.ResourceClaims[i])
		if err != nil {
			return nil, fmt.Errorf("pod %s/%s: %w", pod.Namespace, pod.Name, err)
		}
		if name == nil {
			continue
		}
		c, err := claims.Get(pod.Namespace, *name)
		if err != nil {
			// Not created yet: the DRA plugin's PreFilter waits for it.
			continue
		}
		if c.Status.Allocation == nil {
			out = append(out, c)
		}
	}
	return out, nil
}

func cardMemory(n *placement.Node) int64 {
	if len(n.Cards) == 0 {
		return 0
	}
	return n.Cards[0].Memory.Value
}
