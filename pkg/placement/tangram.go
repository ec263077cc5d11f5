package placement

// Tangram is FGD with card- and node-level tie-breaking towards keeping
// whole cards and whole nodes free.
type Tangram struct {
	Workload *Workload
}

func (*Tangram) Name() string    { return "tangram" }
func (*Tangram) PinsCards() bool { return true }

func (p *Tangram) Score(n *Node, r Request, cands []int) Choice {
	f := FGD{Workload: p.Workload}
	return f.Score(n, r, cands)
}
