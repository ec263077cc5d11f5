package placement

import (
	"fmt"
	"slices"
	"sort"
)

// Choice is a policy's verdict on one node: its score (higher is better)
// and the cards it would use, in device order.
type Choice struct {
	Score float64
	Cards []int
}

// Policy rates a node for a request. cands are the cards of n that fit r on
// their own (Node.Candidates), never empty for a GPU request. Score must not
// modify n and must be safe for concurrent use on different nodes.
type Policy interface {
	Name() string
	// PinsCards is true when the policy chooses the cards inside the node;
	// otherwise the allocator's own first fit decides and Choice.Cards is
	// the model's prediction of it.
	PinsCards() bool
	Score(n *Node, r Request, cands []int) Choice
}

// PolicyNames lists the policies New knows, in the order reports use.
var PolicyNames = []string{"stock", "most-allocated", "best-fit", "fgd", "tangram"}

// New returns the named policy; w is the workload the fragmentation-aware
// policies measure against (ignored by the others).
func New(name string, w *Workload) (Policy, error) {
	switch name {
	case "stock":
		return Stock{}, nil
	case "most-allocated":
		return MostAllocated{}, nil
	case "best-fit":
		return BestFit{}, nil
	case "fgd", "tangram":
		if w == nil || w.Types() == 0 {
			return nil, fmt.Errorf("policy %s needs a workload sample (the task list) to measure fragmentation against", name)
		}
		if name == "fgd" {
			return &FGD{Workload: w}, nil
		}
		return NewTangram(w), nil
	}
	return nil, fmt.Errorf("unknown policy %q; choose one of %v", name, PolicyNames)
}

// firstFit is the DRA allocator's own choice inside a node: the first
// fitting devices in slice order.
func firstFit(r Request, cands []int) []int {
	if r.GPUMilli() == 0 {
		return nil
	}
	if r.ShareMilli > 0 || r.MIGProfile != "" {
		return cands[:1]
	}
	return cands[:r.WholeCards]
}

// bestFitCards picks, for a share, the fitting card with the least free GPU
// (first in device order on ties); whole cards are taken first-fit.
func bestFitCards(n *Node, r Request, cands []int) []int {
	if r.ShareMilli == 0 {
		return firstFit(r, cands)
	}
	best := cands[0]
	for _, i := range cands[1:] {
		if n.Cards[i].FreeMilli() < n.Cards[best].FreeMilli() {
			best = i
		}
	}
	return []int{best}
}

// Stock is kube-scheduler 1.37 with its default plugins: NodeResourcesFit
// with LeastAllocated on cpu and memory plus NodeResourcesBalancedAllocation
// (weights 1), the DRA plugin adding no score, and the allocator's first fit
// inside the node.
type Stock struct{}

func (Stock) Name() string    { return "stock" }
func (Stock) PinsCards() bool { return false }

func (Stock) Score(n *Node, r Request, cands []int) Choice {
	cpu := frac(n.usedCPU+r.CPUMilli, n.CPUMilli)
	mem := frac(n.usedMemory+r.MemoryMiB, n.MemoryMiB)
	least := (int64((1-cpu)*100) + int64((1-mem)*100)) / 2
	// BalancedAllocation: 1 - standard deviation of the two fractions.
	balanced := int64((1 - abs(cpu-mem)/2) * 100)
	return Choice{Score: float64(least + balanced), Cards: firstFit(r, cands)}
}

// MostAllocated is NodeResourcesFit's MostAllocated strategy over cpu,
// memory and the DRA-backed extended resource of the GPU class (devices in
// use, a partly shared card counting as one), weights 1: the stock knob for
// bin packing. Inside the node the allocator's first fit decides.
type MostAllocated struct{}

func (MostAllocated) Name() string    { return "most-allocated" }
func (MostAllocated) PinsCards() bool { return false }

func (MostAllocated) Score(n *Node, r Request, cands []int) Choice {
	cards := firstFit(r, cands)
	used := 0
	for i := range n.Cards {
		if !n.Cards[i].Unused() || slices.Contains(cards, i) {
			used++
		}
	}
	score := int64(frac(n.usedCPU+r.CPUMilli, n.CPUMilli)*100) + int64(frac(n.usedMemory+r.MemoryMiB, n.MemoryMiB)*100)
	weights := int64(2)
	if len(n.Cards) > 0 {
		score += int64(used) * 100 / int64(len(n.Cards))
		weights++
	}
	return Choice{Score: float64(score / weights), Cards: cards}
}

// BestFit puts the request where the least GPU stays free afterwards
// (then the least CPU), on the fitting card with the least free GPU.
type BestFit struct{}

func (BestFit) Name() string    { return "best-fit" }
func (BestFit) PinsCards() bool { return true }

func (BestFit) Score(n *Node, r Request, cands []int) Choice {
	if r.MIGProfile != "" {
		return migPackingScore(n, r, cands)
	}
	cards := bestFitCards(n, r, cands)
	freeAfter := n.FreeMilli() - r.GPUMilli()
	cpuAfter := 1 - frac(n.usedCPU+r.CPUMilli, n.CPUMilli)
	return Choice{Score: -float64(freeAfter) - cpuAfter, Cards: cards}
}

func frac(used, capacity int64) float64 {
	if capacity <= 0 {
		return 1
	}
	return min(float64(used)/float64(capacity), 1)
}

func abs(x float64) float64 {
	if x < 0 {
		return -x
	}
	return x
}

// distinctShareCards keeps, of the candidate cards for a share, the first
// card of each free level: cards with the same free GPU are interchangeable
// for fragmentation, so only one of each needs evaluating.
func distinctShareCards(n *Node, cands []int) []int {
	out := make([]int, 0, len(cands))
	seen := make([]int64, 0, len(cands))
	for _, i := range cands {
		f := n.Cards[i].FreeMilli()
		if !slices.Contains(seen, f) {
			seen = append(seen, f)
			out = append(out, i)
		}
	}
	sort.Ints(out)
	return out
}
