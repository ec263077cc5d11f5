package placement

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
)

// Scheduler places requests one after another on a set of nodes: the model
// filters and the policy scores every node, the real allocator validates the
// best-scored placement, and the next best is tried if it refuses.
type Scheduler struct {
	Nodes     []*Node
	Policy    Policy
	Validator Validator
	// rng breaks score ties at random, as kube-scheduler does.
	rng *rand.Rand
	// Stats counts how the model and the allocator agreed.
	Stats Stats

	cands  []candidate
	cardsB []int
}

// Stats are counters over a Scheduler's life.
type Stats struct {
	Placed, Failed int
	// Refused counts placements the model deemed possible but the
	// allocator refused; Disagreed counts allocations whose cards or
	// consumed capacity differ from the model's prediction. Both should be 0.
	Refused, Disagreed int
}

type candidate struct {
	node   int
	choice Choice
	tie    uint64
}

// NewScheduler returns a scheduler; seed drives tie-breaking.
func NewScheduler(nodes []*Node, policy Policy, validator Validator, seed uint64) *Scheduler {
	return &Scheduler{Nodes: nodes, Policy: policy, Validator: validator, rng: rand.New(rand.NewPCG(seed, seed+1))}
}

// Placement is where a request went.
type Placement struct {
	Node  *Node
	Cards []int
}

// Place finds a node for r and commits it. ok is false when no node fits.
func (s *Scheduler) Place(ctx context.Context, r Request) (Placement, bool, error) {
	s.cands = s.cands[:0]
	for i, n := range s.Nodes {
		cands, fits := n.Candidates(r, s.cardsB)
		s.cardsB = cands
		if !fits {
			continue
		}
		c := s.Policy.Score(n, r, cands)
		// Policies may return a slice of cands, which is reused.
		c.Cards = slices.Clone(c.Cards)
		s.cands = append(s.cands, candidate{node: i, choice: c, tie: s.rng.Uint64()})
	}
	sort.Slice(s.cands, func(a, b int) bool {
		ca, cb := &s.cands[a], &s.cands[b]
		if ca.choice.Score != cb.choice.Score {
			return ca.choice.Score > cb.choice.Score
		}
		return ca.tie < cb.tie
	})
	for _, c := range s.cands {
		n := s.Nodes[c.node]
		var consumed []Consumed
		if r.GPUMilli() > 0 {
			var err error
			consumed, err = s.Validator.Allocate(ctx, n, r, c.choice.Cards, s.Policy.PinsCards())
			if err != nil {
				return Placement{}, false, fmt.Errorf("placing %s: %w", r.Name, err)
			}
			if consumed == nil {
				s.Stats.Refused++
				continue
			}
			if !sameConsumption(consumed, n.Expect(r, c.choice.Cards)) {
				s.Stats.Disagreed++
			}
		}
		n.Commit(r, consumed)
		s.Stats.Placed++
		cards := make([]int, len(consumed))
		for i, k := range consumed {
			cards[i] = k.Card
		}
		return Placement{Node: n, Cards: cards}, true, nil
	}
	s.Stats.Failed++
	return Placement{}, false, nil
}

func sameConsumption(got, want []Consumed) bool {
	if len(got) != len(want) {
		return false
	}
	sort.Slice(got, func(a, b int) bool { return got[a].Card < got[b].Card })
	for i := range got {
		if got[i] != want[i] {
			return false
		}
	}
	return true
}
