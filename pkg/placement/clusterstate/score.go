package clusterstate

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"sync"

	"github.com/tangram-gpu/tangram/pkg/placement"
)

// Unrated is the score of a node the policy cannot rate for the pod: no
// model, no GPU of ours asked there, or the pod does not fit.
const Unrated = math.MinInt32

// Resources are a node's CPU (milli) and memory (MiB), allocatable and
// already requested, as the scheduler's node info has them.
type Resources struct {
	AllocatableCPU, AllocatableMemMiB int64
	RequestedCPU, RequestedMemMiB     int64
}

// scoreMemo is a node's score for one model, policy, pod request and CPU
// and memory; the score is a pure function of them.
type scoreMemo struct {
	model              *placement.Node
	policy             placement.Policy
	cpu, memMiB, whole int64
	share              int64
	mig                string // the MIG profile asked for
	res                Resources
	score              int64
}

// sameInputs reports whether o scores the same model, policy, request and
// node resources as m.
func (m *scoreMemo) sameInputs(o scoreMemo) bool {
	o.score = m.score
	return *m == o
}

// Score rates the named node for a pod under policy: the policy's score
// times 1000, or Unrated. requestFor gives the pod's request on cards of a
// memory (a share's size is relative to it); ok false when the pod asks
// for none of our GPUs there. A node scored again with nothing changed
// (same model, policy, request and resources) costs a look-up. Safe to call
// from the scheduler's parallel Score calls while events update the state.
func (cs *State) Score(name string, policy placement.Policy, requestFor func(cardMemory int64) (placement.Request, bool), res Resources) int64 {
	m, mem, ns := cs.node(name)
	if m == nil {
		return Unrated
	}
	r, ok := requestFor(mem)
	if !ok {
		return Unrated
	}
	key := scoreMemo{model: m, policy: policy, cpu: r.CPUMilli, memMiB: r.MemoryMiB, whole: int64(r.WholeCards), share: r.ShareMilli, mig: r.MIGProfile, res: res}
	// A request naming models is never memoised: Models is a slice, not
	// part of the key.
	if memo := ns.memo.Load(); memo != nil && len(r.Models) == 0 && memo.sameInputs(key) {
		return memo.score
	}
	n := m.WithResources(res.AllocatableCPU, res.AllocatableMemMiB, res.RequestedCPU, res.RequestedMemMiB)
	cands, fits := n.Candidates(r, make([]int, 0, len(n.Cards)))
	key.score = Unrated
	if fits {
		key.score = int64(math.Round(policy.Score(n, r, cands).Score * 1000))
	}
	stored := key
	ns.memo.Store(&stored)
	return key.score
}

// PolicyCache keeps the policy of the previous pod: it is built again only
// when the workload histogram (or the pod's own request) changed, so its
// score cache (scores per distinct node state) survives between pods.
type PolicyCache struct {
	name string

	mu   sync.Mutex
	last *cachedPolicy
}

type cachedPolicy struct {
	key    string
	policy placement.Policy
}

// NewPolicyCache returns a cache of policies named name (placement.New).
func NewPolicyCache(name string) *PolicyCache { return &PolicyCache{name: name} }

// For returns the policy for the workload histogram plus the pod's own
// request (so the workload is never empty), reusing the previous one when
// the two are the same.
func (c *PolicyCache) For(shapes map[Shape]int, own *placement.Request) (placement.Policy, error) {
	keys := make([]Shape, 0, len(shapes))
	for k := range shapes {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b Shape) int {
		if c := cmp.Compare(a.Whole, b.Whole); c != 0 {
			return c
		}
		return cmp.Compare(a.Share, b.Share)
	})
	sample := make([]placement.Request, 0, len(keys)+1)
	counts := make([]int, 0, len(keys)+1)
	var key []byte
	for _, k := range keys {
		sample = append(sample, placement.Request{WholeCards: k.Whole, ShareMilli: k.Share})
		counts = append(counts, shapes[k])
		key = fmt.Appendf(key, "%d/%d*%d;", k.Whole, k.Share, shapes[k])
	}
	if own != nil {
		sample = append(sample, *own)
		counts = append(counts, 1)
		key = fmt.Appendf(key, "own:%d/%d/%d/%d/%q/%q", own.CPUMilli, own.MemoryMiB, own.WholeCards, own.ShareMilli, own.Models, own.MIGProfile)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.last != nil && c.last.key == string(key) {
		return c.last.policy, nil
	}
	policy, err := placement.New(c.name, placement.NewWeightedWorkload(sample, counts))
	if err != nil {
		return nil, fmt.Errorf("building policy %q for the workload: %w", c.name, err)
	}
	c.last = &cachedPolicy{key: string(key), policy: policy}
	return policy, nil
}
