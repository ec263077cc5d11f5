package placement

// Tangram is Tangram's own policy: FGD's fragmentation gradient plus three
// terms FGD lacks.
//
//   - Stranding: free GPU a node's remaining CPU or memory cannot feed, at
//     the workload's average CPU and memory per milli-GPU. FGD only asks
//     whether the next single task fits; this sees GPUs stranded by many.
//   - Residue lookahead: the expected GPU a card leaves unused after it is
//     offered a limited number of further tasks drawn from the workload (a
//     small dynamic program over the card's free level), so shares go where
//     the rest of the card is likely to be filled by tasks that are common,
//     not merely possible.
//   - Packing: a small preference for the node with less free GPU left,
//     which breaks FGD's many ties towards keeping whole nodes free.
//
// Inside the node it keeps FGD's card choice, breaking ties towards the
// fuller card, and pins the claim to that card.
type Tangram struct {
	Workload *Workload
	// Stranding, Residue and Packing weigh the three terms (milli-GPU of
	// the term per milli-GPU of fragmentation).
	Stranding, Residue, Packing float64

	cache scoreCache
}

// NewTangram returns the policy with the weights measured best on the
// openb traces (docs/placement.md).
func NewTangram(w *Workload) *Tangram {
	return &Tangram{Workload: w, Stranding: 1, Residue: 0.6, Packing: 0.01}
}

func (*Tangram) Name() string    { return "tangram" }
func (*Tangram) PinsCards() bool { return true }

func (p *Tangram) Score(n *Node, r Request, cands []int) Choice {
	return p.cache.scoreCached(n, r, cands, func() Choice { return p.score(n, r, cands) })
}

func (p *Tangram) score(n *Node, r Request, cands []int) Choice {
	if r.MIGProfile != "" {
		// A MIG partition: onto the card already split the most
		// (fragmentation of MIG placements is not modelled beyond that).
		return migPackingScore(n, r, cands)
	}
	w := p.Workload
	var freeBuf, afterBuf, shapeBuf [16]int64
	before := stateOf(n, freeBuf[:0])
	costBefore := w.fragmentation(before, shapeBuf[:0]) + p.Stranding*w.stranded(before) + p.Residue*w.expectedResidue(before)
	best := Choice{}
	var bestFree int64
	for i, cards := range cardOptions(n, r, cands) {
		after := before.after(r, cards, afterBuf[:0])
		cost := w.fragmentation(after, shapeBuf[:0]) + p.Stranding*w.stranded(after) + p.Residue*w.expectedResidue(after)
		score := costBefore - cost
		var cardFree int64
		if len(cards) == 1 {
			cardFree = n.Cards[cards[0]].FreeMilli()
		}
		if i == 0 || score > best.Score || (score == best.Score && cardFree < bestFree) {
			best = Choice{Score: score, Cards: cards}
			bestFree = cardFree
		}
	}
	best.Score -= p.Packing * float64(n.FreeMilli()-r.GPUMilli())
	return best
}
