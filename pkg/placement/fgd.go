package placement

// FGD is Fragmentation Gradient Descent (Weng et al., ATC '23): place the
// request where the node's expected fragmentation, measured against the
// workload, grows least. Inside the node it tries every distinct card and
// keeps the one with the smallest growth.
type FGD struct {
	Workload *Workload
	cache    scoreCache
}

func (*FGD) Name() string    { return "fgd" }
func (*FGD) PinsCards() bool { return true }

func (p *FGD) Score(n *Node, r Request, cands []int) Choice {
	return p.cache.scoreCached(n, r, cands, func() Choice { return p.score(n, r, cands) })
}

func (p *FGD) score(n *Node, r Request, cands []int) Choice {
	var freeBuf, afterBuf, shapeBuf [16]int64
	before := stateOf(n, freeBuf[:0])
	fragBefore := p.Workload.fragmentation(before, shapeBuf[:0])
	best := Choice{}
	for i, cards := range cardOptions(n, r, cands) {
		fragAfter := p.Workload.fragmentation(before.after(r, cards, afterBuf[:0]), shapeBuf[:0])
		score := -(fragAfter - fragBefore)
		if i == 0 || score > best.Score {
			best = Choice{Score: score, Cards: cards}
		}
	}
	return best
}

// cardOptions are the placements inside n worth evaluating: one per
// distinct free level for a share, the first fitting whole cards otherwise
// (fully free cards of one model are interchangeable).
func cardOptions(n *Node, r Request, cands []int) [][]int {
	if r.GPUMilli() == 0 {
		return [][]int{nil}
	}
	if r.ShareMilli == 0 {
		return [][]int{firstFit(r, cands)}
	}
	var out [][]int
	for _, i := range distinctShareCards(n, cands) {
		out = append(out, []int{i})
	}
	return out
}
