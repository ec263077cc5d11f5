package preemption

import (
	"github.com/tangram-gpu/tangram/pkg/placement"
)

// score is the placement score (pkg/placement's tangram policy, as the
// TangramPacking plugin rates nodes) of the preemptor on the node once the
// candidates in set are gone: the higher, the less the cards are left
// fragmented. One workload, drawn from every claim on the node and the
// preemptor, rates all sets, so their scores compare. It is 0 when the node
// or the request is not one the model knows (e.g. another driver's devices).
func (s *search) score(set []int) float64 {
	if s.model == nil {
		s.model = newScoreModel(s)
	}
	m := s.model
	if m.policy == nil {
		return 0
	}
	n, err := m.cards.Node(unlimited, unlimited, 0, 0, placement.AllocationsOf(s.remaining(set)))
	if err != nil {
		return 0
	}
	cands, fits := n.Candidates(m.request, nil)
	if !fits {
		return 0
	}
	return m.policy.Score(n, m.request, cands).Score
}

// unlimited CPU and memory: preemption frees devices, node CPU and memory
// are the other filters' business.
const unlimited = 1 << 40

type scoreModel struct {
	cards   *placement.NodeCards
	request placement.Request
	policy  placement.Policy
}

func newScoreModel(s *search) *scoreModel {
	m := &scoreModel{}
	cards, err := placement.CardsFromSlices(s.node.Name, s.node.Slices)
	if err != nil {
		return m
	}
	all := placement.AllocationsOf(s.node.Claims)
	n, err := cards.Node(unlimited, unlimited, 0, 0, all)
	if err != nil || len(n.Cards) == 0 {
		return m
	}
	r, ok := placement.RequestFromClaims(s.preemptor.Name, 0, 0, s.claims, n.Cards[0].Memory.Value)
	if !ok {
		return m
	}
	sample := append(placement.WorkloadSample(all, map[string]*placement.Node{s.node.Name: n}), r)
	m.cards, m.request, m.policy = cards, r, placement.NewTangram(placement.NewWorkload(sample))
	return m
}
