// Package mig is the placement model of a card in MIG mode, as the DRA
// allocator counts it. The card is published as its MIG partitions, which
// consume the card's counter set (pkg/resourceslices,
// docs/resourceslices.md "MIG partitions"); a Layout gathers them: the
// counters' capacities and what each partition consumes, so "does this
// partition still fit" is the allocator's own rule. What a card has handed
// out is a State, the set of its taken partitions and the counters they
// use, kept by value, so copies of a model never share it. Package
// placement holds one Layout and one State per card in MIG mode.
package mig

import (
	"encoding/binary"
	"sync"
	"sync/atomic"

	resourceapi "k8s.io/api/resource/v1"
)

// MaxCounters bounds a counter set (the API allows 32 counters).
const MaxCounters = resourceapi.ResourceSliceMaxCountersPerCounterSet

// maxPartitions bounds a card's partitions: State keeps the taken ones as
// the bits of a uint64.
const maxPartitions = 64

// Layout is the immutable MIG description of a card.
type Layout struct {
	counterSet string
	capacity   []int64 // by counter index
	// computeSlices is the capacity of device.MIGCounterComputeSlices.
	computeSlices int64
	partitions    []Partition
	// id names the layout's content (capacities and partitions, not the
	// counter set's name) in the score cache's key: equal cards of
	// different nodes share it (intern).
	id int64
}

// Partition is one partition device of a card in MIG mode.
type Partition struct {
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

// CounterSet is the name of the card's counter set.
func (l *Layout) CounterSet() string { return l.counterSet }

// Partitions are the card's partitions in the allocator's order.
func (l *Layout) Partitions() []Partition { return l.partitions }

// ID names the layout's content: equal cards, on any node, share it.
func (l *Layout) ID() int64 { return l.id }

// Milli is the GPU partition p stands for, in milli-GPU: its share of the
// card's compute slices; 0 when the card publishes none.
func (l *Layout) Milli(p int) int64 {
	if l.computeSlices <= 0 {
		return 0
	}
	return l.partitions[p].ComputeSlices * 1000 / l.computeSlices
}

// layoutIDs interns layouts by content: a cluster has a few distinct ones
// (one per card model and driver), so the table stays small.
var (
	layoutIDs    sync.Map // string -> int64
	layoutNextID atomic.Int64
)

// intern returns the id of l's content.
func intern(l *Layout) int64 {
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
	if id, ok := layoutIDs.Load(string(b)); ok {
		return id.(int64)
	}
	id, _ := layoutIDs.LoadOrStore(string(b), layoutNextID.Add(1))
	return id.(int64)
}

// State is what a card in MIG mode has handed out: the partitions taken
// (bit i: partition i) and the counters they consume.
type State struct {
	taken uint64
	used  [MaxCounters]int64
}

// Taken is the set of partitions handed out, bit i for partition i.
func (s *State) Taken() uint64 { return s.taken }

// Fits reports whether partition p of l fits beside the taken ones.
func (s *State) Fits(l *Layout, p int) bool {
	if s.taken&(1<<p) != 0 {
		return false
	}
	for _, u := range l.partitions[p].uses {
		if s.used[u.counter]+u.amount > l.capacity[u.counter] {
			return false
		}
	}
	return true
}

// FirstFit is the partition of profile the allocator takes on the card:
// the first in device order that fits; -1 if none does, or if l is nil
// (a card not in MIG mode).
func (s *State) FirstFit(l *Layout, profile string) int {
	if l == nil {
		return -1
	}
	for i, p := range l.partitions {
		if p.Profile == profile && s.Fits(l, i) {
			return i
		}
	}
	return -1
}

// Take records partition p of l as handed out.
func (s *State) Take(l *Layout, p int) {
	s.taken |= 1 << p
	for _, u := range l.partitions[p].uses {
		s.used[u.counter] += u.amount
	}
}

// FreeMilli is the card's free compute slices in milli-GPU.
func (s *State) FreeMilli(l *Layout) int64 {
	if l.computeSlices <= 0 {
		return 0
	}
	used := int64(0)
	for i, p := range l.partitions {
		if s.taken&(1<<i) != 0 {
			used += p.ComputeSlices
		}
	}
	return max(l.computeSlices-used, 0) * 1000 / l.computeSlices
}
