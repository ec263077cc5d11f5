package placement

import (
	"slices"
	"strings"
)

// Workload is the distribution of task shapes a cluster expects, the
// reference against which fragmentation is measured (Weng et al., ATC '23:
// free GPU is a fragment for a task shape if that shape cannot use it).
type Workload struct {
	// cpuPerMilli and memPerMilli are the CPU (milli) and memory (MiB) the
	// workload's GPU tasks ask per milli-GPU, on average.
	cpuPerMilli, memPerMilli float64
	// residue[f] is the GPU a card with f milli free is expected to leave
	// unused if it keeps taking tasks drawn from the workload that fit it.
	residue []float64
	// shapes are the distinct GPU demands; types refer to them by index.
	shapes []gpuShape
	types  []taskType
	// typical are the task types FGD measures against, built the way its
	// reference implementation builds them (typical.go).
	typical []typicalPod
}

type gpuShape struct {
	whole  int
	share  int64
	models []string
}

type taskType struct {
	cpu, mem int64
	shape    int // -1: no GPU
	weight   float64
}

// NewWorkload builds the distribution from sample requests (e.g. the task
// list being replayed): each distinct (CPU, memory, GPU) demand is a type
// weighted by how often it occurs.
func NewWorkload(sample []Request) *Workload { return NewWeightedWorkload(sample, nil) }

// NewWeightedWorkload is NewWorkload for a sample in which sample[i] occurs
// counts[i] times (nil counts: once each). It gives the same Workload as
// NewWorkload on the expanded sample, so a caller that keeps a histogram of
// the live workload (the scheduler plugin) needs not expand it for every pod.
func NewWeightedWorkload(sample []Request, counts []int) *Workload {
	count := func(i int) int {
		if counts == nil {
			return 1
		}
		return counts[i]
	}
	total := 0
	for i := range sample {
		total += count(i)
	}
	w := &Workload{}
	shapeIndex := map[string]int{}
	type typeKey struct {
		cpu, mem int64
		shape    int
	}
	typeIndex := map[typeKey]int{}
	for j, r := range sample {
		shape := -1
		if r.GPUMilli() > 0 && r.MIGProfile == "" {
			key := shapeKey(r)
			i, ok := shapeIndex[key]
			if !ok {
				i = len(w.shapes)
				shapeIndex[key] = i
				w.shapes = append(w.shapes, gpuShape{whole: r.WholeCards, share: r.ShareMilli, models: slices.Clone(r.Models)})
			}
			shape = i
		}
		k := typeKey{r.CPUMilli, r.MemoryMiB, shape}
		i, ok := typeIndex[k]
		if !ok {
			i = len(w.types)
			typeIndex[k] = i
			w.types = append(w.types, taskType{cpu: r.CPUMilli, mem: r.MemoryMiB, shape: shape})
		}
		w.types[i].weight += float64(count(j))
	}
	for i := range w.types {
		w.types[i].weight /= float64(total)
	}
	var cpu, mem, gpu float64
	for j, r := range sample {
		if g := r.GPUMilli(); g > 0 {
			c := float64(count(j))
			cpu += c * float64(r.CPUMilli)
			mem += c * float64(r.MemoryMiB)
			gpu += c * float64(g)
		}
	}
	if gpu > 0 {
		w.cpuPerMilli, w.memPerMilli = cpu/gpu, mem/gpu
	}
	w.residue = residueTable(sample, count)
	w.typical = typicalPods(sample, count, fgdTypicalCoverage, func(r Request) int {
		if r.GPUMilli() == 0 || r.MIGProfile != "" {
			return -1
		}
		return shapeIndex[shapeKey(r)]
	}, w.shapes)
	return w
}

func shapeKey(r Request) string {
	var b strings.Builder
	b.WriteString(strings.Join(r.Models, "|"))
	b.WriteByte('/')
	b.WriteString(itoa(int64(r.WholeCards)))
	b.WriteByte('/')
	b.WriteString(itoa(r.ShareMilli))
	return b.String()
}

func itoa(v int64) string {
	if v == 0 {
		return "0"
	}
	var buf [20]byte
	i := len(buf)
	for v > 0 {
		i--
		buf[i] = byte('0' + v%10)
		v /= 10
	}
	return string(buf[i:])
}

// Types is the number of distinct task types.
func (w *Workload) Types() int { return len(w.types) }

// nodeState is a node's free resources, possibly after a hypothetical
// placement: what fragmentation is computed from.
type nodeState struct {
	node *Node
	cpu  int64
	mem  int64
	free []int64 // per card, milli-GPU
}

func stateOf(n *Node, buf []int64) nodeState {
	buf = buf[:0]
	for i := range n.Cards {
		if n.Cards[i].mig != nil {
			// Free compute of a card in MIG mode serves MIG partitions
			// only, never the whole cards and shares measured here.
			buf = append(buf, 0)
			continue
		}
		buf = append(buf, n.Cards[i].FreeMilli())
	}
	return nodeState{node: n, cpu: n.FreeCPUMilli(), mem: n.FreeMemoryMiB(), free: buf}
}

// after returns the state once r is placed on cards (buf is reused).
func (s nodeState) after(r Request, cards []int, buf []int64) nodeState {
	buf = append(buf[:0], s.free...)
	for _, k := range s.node.Expect(r, cards) {
		c := &s.node.Cards[k.Card]
		if k.Whole {
			buf[k.Card] = 0
			continue
		}
		free := int64(1000)
		if c.Memory.Value > 0 {
			free = (c.Memory.Value - c.usedMemory - k.Memory) * 1000 / c.Memory.Value
		}
		if c.Compute.Value > 0 {
			free = min(free, (c.Compute.Value-c.usedCompute-k.Compute)*1000/c.Compute.Value)
		}
		buf[k.Card] = max(free, 0)
	}
	return nodeState{node: s.node, cpu: s.cpu - r.CPUMilli, mem: s.mem - r.MemoryMiB, free: buf}
}

// shapeFragment is the free GPU (milli) of s that a task of shape g could
// not use, assuming its CPU and memory fit.
func (s nodeState) shapeFragment(g *gpuShape, total int64) int64 {
	if g.share > 0 {
		var frag int64
		for i, f := range s.free {
			if f < g.share || !modelAllowed(g.models, s.node.Cards[i].Model) {
				frag += f
			}
		}
		return frag
	}
	var fullyFree int
	var partial int64
	for i, f := range s.free {
		if f >= 1000 && modelAllowed(g.models, s.node.Cards[i].Model) {
			fullyFree++
		} else {
			partial += f
		}
	}
	if fullyFree < g.whole {
		return total
	}
	return partial
}

// Fragmentation is the expected free GPU (milli) of s that a task drawn from
// the workload could not use: all of it for a task whose CPU or memory does
// not fit or that needs no GPU, otherwise the cards too small for it.
func (w *Workload) fragmentation(s nodeState, shapeBuf []int64) float64 {
	total, shapeBuf := w.shapeFragments(s, shapeBuf)
	if total == 0 {
		return 0
	}
	var frag float64
	for i := range w.types {
		t := &w.types[i]
		if t.shape < 0 || t.cpu > s.cpu || t.mem > s.mem {
			frag += t.weight * float64(total)
			continue
		}
		frag += t.weight * float64(shapeBuf[t.shape])
	}
	return frag
}

// shapeFragments returns the free GPU (milli) of s and, per GPU shape of
// the workload, the part of it a task of that shape could not use (buf is
// reused); with nothing free the list is empty.
func (w *Workload) shapeFragments(s nodeState, buf []int64) (int64, []int64) {
	var total int64
	for _, f := range s.free {
		total += f
	}
	buf = buf[:0]
	if total == 0 {
		return 0, buf
	}
	for i := range w.shapes {
		buf = append(buf, s.shapeFragment(&w.shapes[i], total))
	}
	return total, buf
}

// stranded is the free GPU (milli) of s that the node's free CPU or memory
// cannot feed, if tasks come at the workload's average CPU and memory per
// milli-GPU.
func (w *Workload) stranded(s nodeState) float64 {
	var total int64
	for _, f := range s.free {
		total += f
	}
	free := float64(total)
	usable := free
	if w.cpuPerMilli > 0 {
		usable = min(usable, float64(s.cpu)/w.cpuPerMilli)
	}
	if w.memPerMilli > 0 {
		usable = min(usable, float64(s.mem)/w.memPerMilli)
	}
	return max(free-usable, 0)
}

// residueHorizon is how many more GPU tasks the residue lookahead lets a
// card be offered. A card is not filled by whatever fits it eventually: in a
// cluster that fills up, it is offered a limited number of tasks, and a free
// level that only rare tasks fit (the 190 milli next to an 810 share) mostly
// stays unused. The sweep in docs/placement.md is flat from 20 to 160.
const residueHorizon = 40

// residueTable computes, for every free level 0..1000 of a card (in units
// of 10 milli), the expected GPU left unused after the card is offered
// residueHorizon tasks drawn from the sample's GPU tasks, taking each that
// fits it (a share of at most its free level, or one whole card on a free
// card). Tasks that never fit one card (several whole cards) still take
// their turn, as they do in the arrival stream.
func residueTable(sample []Request, count func(int) int) []float64 {
	const levels = 101
	var p [levels]float64
	var gpuTasks float64
	for i, r := range sample {
		c := float64(count(i))
		switch {
		case r.ShareMilli > 0:
			p[(r.ShareMilli+9)/10] += c
		case r.WholeCards == 1:
			p[100] += c
		}
		if r.GPUMilli() > 0 {
			gpuTasks += c
		}
	}
	type demand struct {
		level int
		prob  float64
	}
	var demands []demand
	for d := 1; d < levels; d++ {
		if p[d] > 0 {
			demands = append(demands, demand{d, p[d] / gpuTasks})
		}
	}
	v := make([]float64, levels)
	next := make([]float64, levels)
	for f := range v {
		v[f] = float64(f * 10)
	}
	for range residueHorizon {
		for f := range next {
			stay := 1.0
			var moved float64
			for _, d := range demands {
				if d.level > f {
					break
				}
				moved += d.prob * v[f-d.level]
				stay -= d.prob
			}
			next[f] = moved + stay*v[f]
		}
		v, next = next, v
	}
	return v
}

// expectedResidue sums the expected residue of the cards of s.
func (w *Workload) expectedResidue(s nodeState) float64 {
	var sum float64
	for _, f := range s.free {
		sum += w.residue[min(max(f, 0), 1000)/10]
	}
	return sum
}
