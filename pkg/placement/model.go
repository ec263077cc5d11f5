// Package placement chooses a node and the cards on it for a GPU request,
// over the same state the DRA allocator sees (ResourceSlice devices and the
// capacity allocated claims consume). It holds an exact, incremental model
// of every node's free CPU/memory and every card's free compute/memory, so
// that a policy can rate all nodes of a large cluster in microseconds; the
// chosen placement is then checked by the real structured allocator
// (Validator). Policies are shared by the trace simulator and the scheduler
// score plugin.
package placement

import (
	"slices"

	"github.com/tangram-gpu/tangram/pkg/placement/consumable"
	"github.com/tangram-gpu/tangram/pkg/placement/mig"
)

// Card is the model of one GPU device of a node.
type Card struct {
	// Device is the ResourceSlice device name, e.g. "gpu-0"; UUID and Model
	// are its uuid and productName attributes.
	Device string
	UUID   string
	Model  string
	// Shareable cards allow several allocations (consumable capacity).
	Shareable bool
	Memory    consumable.Capacity // bytes
	Compute   consumable.Capacity // percent of the card

	usedMemory  int64
	usedCompute int64
	// whole is set while an exclusive claim holds the card.
	whole bool
	// allocatedMilli is the GPU handed out on this card, in milli-GPU, for
	// the allocation ratio.
	allocatedMilli int64

	// mig is set for a card in MIG mode, published as its partitions
	// (migcard.go, package placement/mig); migUsed is what it has handed
	// out.
	mig     *mig.Layout
	migUsed mig.State
}

// FreeMilli is the part of the card still free, in milli-GPU: the smaller of
// its free compute and free memory fractions.
func (c *Card) FreeMilli() int64 {
	if c.mig != nil {
		return c.migUsed.FreeMilli(c.mig)
	}
	if c.whole || c.Memory.Value <= 0 {
		return 0
	}
	free := (c.Memory.Value - c.usedMemory) * 1000 / c.Memory.Value
	if c.Compute.Value > 0 {
		free = min(free, (c.Compute.Value-c.usedCompute)*1000/c.Compute.Value)
	}
	return max(free, 0)
}

// Unused reports whether nothing is allocated on the card.
func (c *Card) Unused() bool {
	if c.mig != nil {
		return c.migUsed.Taken() == 0
	}
	return !c.whole && c.usedMemory == 0 && c.usedCompute == 0
}

// AllocatedMilli is the GPU handed out on the card, in milli-GPU.
func (c *Card) AllocatedMilli() int64 { return c.allocatedMilli }

// Request is what one pod asks for: node CPU/memory plus, optionally, whole
// cards or a share of one card.
type Request struct {
	Name      string
	CPUMilli  int64
	MemoryMiB int64
	// WholeCards is the number of exclusive cards; 0 with ShareMilli 0 means
	// no GPU.
	WholeCards int
	// ShareMilli (1..999) is a share of one card in milli-GPU: that much
	// compute and the same fraction of the card's memory.
	ShareMilli int64
	// Models restricts the cards' productName; empty means any.
	Models []string
	// MIGProfile asks for one MIG partition of that profile ("3g.40gb")
	// of a card in MIG mode, instead of whole cards or a share.
	MIGProfile string
}

// GPUMilli is the GPU the request takes, in milli-GPU (a MIG partition:
// its compute slices in sevenths of a card, mig.Milli).
func (r Request) GPUMilli() int64 {
	if r.MIGProfile != "" {
		return mig.Milli(r.MIGProfile)
	}
	return int64(r.WholeCards)*1000 + r.ShareMilli
}

// Share is the capacity a share request asks of a card.
type Share struct {
	Compute int64 // percent
	Memory  int64 // bytes
}

// ShareOn is what a share of milli asks of card c: compute in percent
// (rounded up), and the same fraction of the card's memory rounded DOWN to
// the memory step (at least one step) so that memory never runs out
// before compute does and shares pack like the trace's milli-GPU.
func ShareOn(c *Card, milli int64) Share {
	s := Share{Compute: (milli*max(c.Compute.Value, 0) + 999) / 1000}
	mem := c.Memory.Value * milli / 1000
	if c.Memory.HasPolicy && c.Memory.Step > 0 && mem > c.Memory.Min {
		mem = c.Memory.Min + (mem-c.Memory.Min)/c.Memory.Step*c.Memory.Step
	}
	smallest := c.Memory.Min
	if c.Memory.HasPolicy {
		// The published range starts at 0 for admin access only; a
		// workload's share is at least one step (the plugin refuses 0).
		smallest = max(smallest, c.Memory.Step)
	}
	s.Memory = max(mem, smallest)
	return s
}

// Node is the model of one node: allocatable CPU/memory and its cards in
// the allocator's device order.
type Node struct {
	Name      string
	CPUMilli  int64
	MemoryMiB int64
	Cards     []Card

	usedCPU    int64
	usedMemory int64
}

// FreeCPUMilli and FreeMemoryMiB are what is left for pods.
func (n *Node) FreeCPUMilli() int64  { return n.CPUMilli - n.usedCPU }
func (n *Node) FreeMemoryMiB() int64 { return n.MemoryMiB - n.usedMemory }

// FreeMilli is the free GPU of the node in milli-GPU.
func (n *Node) FreeMilli() int64 {
	var f int64
	for i := range n.Cards {
		f += n.Cards[i].FreeMilli()
	}
	return f
}

// AllocatedMilli is the GPU handed out on the node in milli-GPU.
func (n *Node) AllocatedMilli() int64 {
	var a int64
	for i := range n.Cards {
		a += n.Cards[i].allocatedMilli
	}
	return a
}

// CapacityMilli is the node's GPU capacity in milli-GPU.
func (n *Node) CapacityMilli() int64 { return int64(len(n.Cards)) * 1000 }

func modelAllowed(models []string, model string) bool {
	return len(models) == 0 || slices.Contains(models, model)
}

// podFits reports whether r's CPU and memory fit on n.
func (n *Node) podFits(r Request) bool {
	return r.CPUMilli <= n.FreeCPUMilli() && r.MemoryMiB <= n.FreeMemoryMiB()
}

// cardFits reports whether the GPU part of r fits card i on its own (a
// whole-card request needs one such card per card asked).
func (n *Node) cardFits(i int, r Request) bool {
	c := &n.Cards[i]
	if !modelAllowed(r.Models, c.Model) {
		return false
	}
	if r.MIGProfile != "" {
		return c.migUsed.FirstFit(c.mig, r.MIGProfile) >= 0
	}
	if c.mig != nil {
		return false // whole cards and shares never land on a card in MIG mode
	}
	if r.ShareMilli == 0 {
		return c.Unused()
	}
	if !c.Shareable || c.whole {
		return false
	}
	s := ShareOn(c, r.ShareMilli)
	compute, okC := c.Compute.Consume(&s.Compute)
	memory, okM := c.Memory.Consume(&s.Memory)
	return okC && okM && c.usedCompute+compute <= c.Compute.Value && c.usedMemory+memory <= c.Memory.Value
}

// Candidates lists the cards r could use on n (in device order), and
// whether r fits n at all. For a request without GPU the list is empty.
func (n *Node) Candidates(r Request, buf []int) ([]int, bool) {
	buf = buf[:0]
	if !n.podFits(r) {
		return buf, false
	}
	if r.GPUMilli() == 0 {
		return buf, true
	}
	for i := range n.Cards {
		if n.cardFits(i, r) {
			buf = append(buf, i)
		}
	}
	if r.ShareMilli > 0 || r.MIGProfile != "" {
		return buf, len(buf) > 0
	}
	return buf, len(buf) >= r.WholeCards
}

// Consumed is what an allocation takes from one card.
type Consumed struct {
	Card    int
	Whole   bool
	Compute int64 // percent
	Memory  int64 // bytes
	// MIG is 1 + the index of the MIG partition taken on a card in MIG
	// mode; 0 for anything else.
	MIG int
}

// Expect is what the model predicts r consumes on the given cards of n.
func (n *Node) Expect(r Request, cards []int) []Consumed {
	out := make([]Consumed, 0, len(cards))
	for _, i := range cards {
		c := &n.Cards[i]
		switch {
		case r.MIGProfile != "":
			out = append(out, Consumed{Card: i, MIG: c.migUsed.FirstFit(c.mig, r.MIGProfile) + 1})
		case r.ShareMilli > 0:
			s := ShareOn(c, r.ShareMilli)
			compute, _ := c.Compute.Consume(&s.Compute)
			memory, _ := c.Memory.Consume(&s.Memory)
			out = append(out, Consumed{Card: i, Compute: compute, Memory: memory})
		case c.Shareable:
			// A claim naming no capacity takes the defaults: all memory.
			compute, _ := c.Compute.Consume(nil)
			memory, _ := c.Memory.Consume(nil)
			out = append(out, Consumed{Card: i, Whole: true, Compute: compute, Memory: memory})
		default:
			out = append(out, Consumed{Card: i, Whole: true})
		}
	}
	return out
}

// Commit records r on n with what the allocator says it consumed.
func (n *Node) Commit(r Request, consumed []Consumed) {
	n.usedCPU += r.CPUMilli
	n.usedMemory += r.MemoryMiB
	for _, k := range consumed {
		n.apply(k, r.ShareMilli)
	}
}

// apply records one card's consumption; shareMilli is the GPU it stands
// for when it is a share.
func (n *Node) apply(k Consumed, shareMilli int64) {
	c := &n.Cards[k.Card]
	if k.MIG > 0 && c.mig != nil {
		c.migUsed.Take(c.mig, k.MIG-1)
		c.allocatedMilli += c.mig.Milli(k.MIG - 1)
		return
	}
	c.usedCompute += k.Compute
	c.usedMemory += k.Memory
	if k.Whole {
		c.whole = true
		c.allocatedMilli += 1000
	} else {
		c.allocatedMilli += shareMilli
	}
}

// WithResources returns a model of n with the given CPU and memory
// (allocatable and already requested) that shares n's cards: a caller that
// keeps one model per node with its claims applied (the scheduler plugin)
// gets the pod-level resources of the moment without copying the cards.
// Neither model may be modified afterwards.
func (n *Node) WithResources(cpuMilli, memoryMiB, usedCPUMilli, usedMemoryMiB int64) *Node {
	return &Node{Name: n.Name, CPUMilli: cpuMilli, MemoryMiB: memoryMiB, Cards: n.Cards,
		usedCPU: usedCPUMilli, usedMemory: usedMemoryMiB}
}
