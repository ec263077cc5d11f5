package placement

import "math"

// FGD is Fragmentation Gradient Descent (Weng et al., ATC '23) as the
// authors' simulator (hkust-adsl/kubernetes-scheduler-simulator, FGDScore
// plugin) runs it in the published experiments:
//
//   - fragmentation is measured against the "typical pods": task types keyed
//     by CPU and GPU demand, CPU-only tasks included; memory is neither part
//     of the type nor checked against the node (typical.go, which also says
//     why we keep every type where the authors keep the 95% most frequent);
//   - the node score is the drop in fragmentation d (milli-GPU) squashed to
//     an integer, floor(100 * sigmoid(d/1000)), the only score plugin
//     enabled: nodes within a few tens of milli-GPU tie, and kube-scheduler
//     picks among tied nodes at random (Scheduler does the same);
//   - inside the node a share goes to the first card, in device order, with
//     the highest integer score; whole cards are taken first fit.
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
	if r.MIGProfile != "" {
		return migPackingScore(n, r, cands)
	}
	var freeBuf, afterBuf, shapeBuf [16]int64
	before := stateOf(n, freeBuf[:0])
	fragBefore := p.Workload.typicalFragmentation(before, shapeBuf[:0])
	best := Choice{}
	// cardOptions lists shares' cards in device order, so strict > keeps
	// the first card among equal integer scores.
	for i, cards := range cardOptions(n, r, cands) {
		fragAfter := p.Workload.typicalFragmentation(before.after(r, cards, afterBuf[:0]), shapeBuf[:0])
		score := fgdScore(fragBefore - fragAfter)
		if i == 0 || score > best.Score {
			best = Choice{Score: score, Cards: cards}
		}
	}
	return best
}

// fgdScore maps a drop in fragmentation (milli-GPU; negative when it grows)
// to the reference's 0..100 integer node score.
func fgdScore(drop float64) float64 {
	return math.Floor(100 / (1 + math.Exp(-drop/1000)))
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
