package placement

import (
	"encoding/binary"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"

	resourceapi "k8s.io/api/resource/v1"

	"github.com/tangram-gpu/tangram/pkg/device"
)

// A card in MIG mode is published as its MIG partitions, which consume the
// card's counter set (pkg/resourceslices, docs/resourceslices.md "MIG
// partitions"). The model gathers a card's partitions into one Card with a
// migLayout: the counters' capacities and what each partition consumes, as
// the allocator reads them, so "does this partition still fit" is the
// allocator's own rule. What a card has handed out is the set of its taken
// partitions and the counters they use, kept by value in the Card, so
// copies of a model never share it.

// maxMIGCounters bounds a counter set (the API allows 32 counters).
const maxMIGCounters = resourceapi.ResourceSliceMaxCountersPerCounterSet

// migLayout is the immutable MIG description of a card.
type migLayout struct {
	counterSet string
	capacity   []int64 // by counter index
	// computeSlices is the capacity of device.MIGCounterComputeSlices.
	computeSlices int64
	partitions    []MIGPartition
	// id names the layout's content (capacities and partitions, not the
	// counter set's name) in the score cache's key: equal cards of
	// different nodes share it (internMIGLayout).
	id int64
}

// migLayoutIDs interns MIG layouts by content: a cluster has a few
// distinct ones (one per card model and driver), so the table stays small.
var (
	migLayoutIDs    sync.Map // string -> int64
	migLayoutNextID atomic.Int64
)

// internMIGLayout returns the id of l's content.
func internMIGLayout(l *migLayout) int64 {
	var b []byte
	b = binary.AppendVarint(b, l.computeSlices)
	b = binary.AppendUvarint(b, uint64(len(l.capacity)))
	for _, v := range l.capacity {
		b = binary.AppendVarint(b, v)
	}
	for _, p := range l.partitions {
		b = append(b, p.Profile...)
		b = append(b, 0)
		b = binary.AppendVarint(b, int64(p.ProfileID))
		b = binary.AppendVarint(b, int64(p.Start))
		b = binary.AppendVarint(b, p.ComputeSlices)
		b = binary.AppendUvarint(b, uint64(len(p.uses)))
		for _, u := range p.uses {
			b = binary.AppendVarint(b, int64(u.counter))
			b = binary.AppendVarint(b, u.amount)
		}
	}
	if id, ok := migLayoutIDs.Load(string(b)); ok {
		return id.(int64)
	}
	id, _ := migLayoutIDs.LoadOrStore(string(b), migLayoutNextID.Add(1))
	return id.(int64)
}

// MIGPartition is one partition device of a card in MIG mode.
type MIGPartition struct {
	Device        string
	Profile       string
	ProfileID     int
	Start         int
	ComputeSlices int64
	uses          []counterUse
}

type counterUse struct {
	counter int
	amount  int64
}

// migState is what a card in MIG mode has handed out: the partitions taken
// (bit i: partition i) and the counters they consume.
type migState struct {
	taken uint64
	used  [maxMIGCounters]int64
}

// IsMIG reports whether the card is in MIG mode (published as partitions).
func (c *Card) IsMIG() bool { return c.mig != nil }

// MIGPartitions are the card's partitions in the allocator's order.
func (c *Card) MIGPartitions() []MIGPartition {
	if c.mig == nil {
		return nil
	}
	return c.mig.partitions
}

// migFits reports whether partition p of the card fits beside the taken ones.
func (c *Card) migFits(p int) bool {
	if c.migUsed.taken&(1<<p) != 0 {
		return false
	}
	for _, u := range c.mig.partitions[p].uses {
		if c.migUsed.used[u.counter]+u.amount > c.mig.capacity[u.counter] {
			return false
		}
	}
	return true
}

// migFirstFit is the partition of profile the allocator takes on the card:
// the first in device order that fits; -1 if none does.
func (c *Card) migFirstFit(profile string) int {
	if c.mig == nil {
		return -1
	}
	for i, p := range c.mig.partitions {
		if p.Profile == profile && c.migFits(i) {
			return i
		}
	}
	return -1
}

// migTake records partition p as handed out.
func (c *Card) migTake(p int) {
	c.migUsed.taken |= 1 << p
	for _, u := range c.mig.partitions[p].uses {
		c.migUsed.used[u.counter] += u.amount
	}
}

// migFreeMilli is the card's free compute slices in milli-GPU.
func (c *Card) migFreeMilli() int64 {
	if c.mig.computeSlices <= 0 {
		return 0
	}
	used := int64(0)
	for i, p := range c.mig.partitions {
		if c.migUsed.taken&(1<<i) != 0 {
			used += p.ComputeSlices
		}
	}
	return max(c.mig.computeSlices-used, 0) * 1000 / c.mig.computeSlices
}

// MIGMilli is the GPU a MIG profile named "<n>g.<mem>" stands for, in
// milli-GPU: n sevenths of a card (the MIG cards Tangram knows have seven
// compute slices); 0 for a name without the "<n>g." prefix.
func MIGMilli(profile string) int64 {
	m := migProfileSlices.FindStringSubmatch(profile)
	if m == nil {
		return 0
	}
	n, _ := strconv.ParseInt(m[1], 10, 64)
	return min(n*1000/7, 1000)
}

var migProfileSlices = regexp.MustCompile(`^([1-9][0-9]*)g\.`)

// migCards gathers the node's MIG partition devices into one Card per
// parent card, in the order the partitions appear, with the capacities of
// the counter sets.
func migCards(name string, devices []resourceapi.Device, sets []resourceapi.CounterSet) ([]Card, error) {
	capacity := map[string]map[string]int64{}
	for _, s := range sets {
		m := map[string]int64{}
		for c, v := range s.Counters {
			m[c] = v.Value.Value()
		}
		capacity[s.Name] = m
	}
	var cards []Card
	byParent := map[string]int{}
	counterIndex := map[string]map[string]int{}
	for _, d := range devices {
		if stringAttr(d, device.AttrType) != device.TypeMIG {
			continue
		}
		if len(d.ConsumesCounters) != 1 {
			return nil, fmt.Errorf("node %s, MIG partition %s consumes %d counter sets; the placement model knows one per card", name, d.Name, len(d.ConsumesCounters))
		}
		cc := d.ConsumesCounters[0]
		caps, ok := capacity[cc.CounterSet]
		if !ok {
			return nil, fmt.Errorf("node %s, MIG partition %s consumes counter set %s, which the node does not publish", name, d.Name, cc.CounterSet)
		}
		i, ok := byParent[cc.CounterSet]
		if !ok {
			i = len(cards)
			byParent[cc.CounterSet] = i
			counterIndex[cc.CounterSet] = map[string]int{}
			cards = append(cards, Card{
				Device: cc.CounterSet,
				UUID:   stringAttr(d, device.AttrParentUUID),
				Model:  stringAttr(d, device.AttrProductName),
				mig:    &migLayout{counterSet: cc.CounterSet, computeSlices: caps[device.MIGCounterComputeSlices]},
			})
		}
		layout := cards[i].mig
		idx := counterIndex[cc.CounterSet]
		p := MIGPartition{Device: d.Name, Profile: stringAttr(d, device.AttrMIGProfile), ProfileID: int(intAttr(d, device.AttrMIGProfileID)),
			Start: int(intAttr(d, device.AttrMIGPlacementStart))}
		// In name order, so that equal cards number their counters
		// alike and share a layout id (internMIGLayout).
		for _, c := range slices.Sorted(maps.Keys(cc.Counters)) {
			v := cc.Counters[c]
			limit, ok := caps[c]
			if !ok {
				return nil, fmt.Errorf("node %s, MIG partition %s consumes counter %s, which counter set %s lacks", name, d.Name, c, cc.CounterSet)
			}
			k, ok := idx[c]
			if !ok {
				if len(layout.capacity) == maxMIGCounters {
					return nil, fmt.Errorf("node %s, counter set %s: more than %d counters", name, cc.CounterSet, maxMIGCounters)
				}
				k = len(layout.capacity)
				idx[c] = k
				layout.capacity = append(layout.capacity, limit)
			}
			p.uses = append(p.uses, counterUse{counter: k, amount: v.Value.Value()})
			if c == device.MIGCounterComputeSlices {
				p.ComputeSlices = v.Value.Value()
			}
		}
		if len(layout.partitions) == 64 {
			return nil, fmt.Errorf("node %s, card %s: more than 64 MIG partitions; the placement model holds 64", name, cc.CounterSet)
		}
		layout.partitions = append(layout.partitions, p)
	}
	for i := range cards {
		cards[i].mig.id = internMIGLayout(cards[i].mig)
	}
	return cards, nil
}

func intAttr(d resourceapi.Device, name string) int64 {
	if a, ok := d.Attributes[resourceapi.QualifiedName(name)]; ok && a.IntValue != nil {
		return *a.IntValue
	}
	return -1
}

// migProfileSelector reads the profile a MIG request asks for from its CEL
// selectors, in the form the docs and dra.MIGPartition write it:
// device.attributes["gpu.tangram.dev"].profile == "3g.40gb".
var migProfileSelector = regexp.MustCompile(`device\.attributes\["` + regexp.QuoteMeta(device.DriverName) + `"\]\.` + device.AttrMIGProfile + `\s*==\s*"([^"]+)"`)

// migProfileOf is the profile a request of class mig.tangram.dev selects,
// "" when its selectors name none the model can read.
func migProfileOf(selectors []resourceapi.DeviceSelector) string {
	for _, s := range selectors {
		if s.CEL == nil {
			continue
		}
		if m := migProfileSelector.FindStringSubmatch(s.CEL.Expression); m != nil {
			return m[1]
		}
	}
	return ""
}

// migCardIndex is the card of n holding the MIG partition named name, and
// the partition's index; ok false when n has no such partition.
func (n *Node) migCardIndex(name string) (card, partition int, ok bool) {
	ref, err := device.ParseDeviceName(name)
	if err != nil || ref.MIG == nil {
		return 0, 0, false
	}
	set := device.MIGCounterSetName(ref.Index)
	for i := range n.Cards {
		c := &n.Cards[i]
		if c.mig == nil || c.mig.counterSet != set {
			continue
		}
		for j, p := range c.mig.partitions {
			if p.Device == name {
				return i, j, true
			}
		}
	}
	return 0, 0, false
}

// migBestFit is the card a MIG request packs onto: of the cards it fits,
// the one with the least free compute, so partitions go to cards already
// split before an untouched card is broken (device order on ties).
func migBestFit(n *Node, cands []int) []int {
	best := cands[0]
	for _, i := range cands[1:] {
		if n.Cards[i].FreeMilli() < n.Cards[best].FreeMilli() {
			best = i
		}
	}
	return []int{best}
}

// migPackingScore rates a node for a MIG request: the card migBestFit
// picks, and first the nodes where that card is already split (breaking
// an untouched card costs more than any other term), then, as
// kube-scheduler's stock scoring does, the node with the most CPU and
// memory left, so that GPU is not stranded behind exhausted CPUs.
func migPackingScore(n *Node, r Request, cands []int) Choice {
	cards := migBestFit(n, cands)
	score := Stock{}.Score(n, r, cands).Score
	if n.Cards[cards[0]].Unused() {
		score -= 1000
	}
	return Choice{Score: score, Cards: cards}
}
