package sim

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	"github.com/tangram-gpu/tangram/pkg/placement"
)

// FailureClass counts failed tasks of one GPU demand.
type FailureClass struct {
	// Class is "share <milli>" or "<n> whole", with "on <models>" when the
	// task restricts the card model.
	Class string `json:"class"`
	Tasks int    `json:"tasks"`
	// Milli is the GPU they asked in total.
	Milli int64 `json:"milli"`
}

// FreeLevel is the free GPU left on cards whose free part lies in
// [FromMilli, FromMilli+50).
type FreeLevel struct {
	FromMilli int64 `json:"fromMilli"`
	Cards     int   `json:"cards"`
	Milli     int64 `json:"milli"`
}

type failureTally map[string]*FailureClass

func (t failureTally) add(r placement.Request) {
	class := fmt.Sprintf("%d whole", r.WholeCards)
	if r.ShareMilli > 0 {
		class = fmt.Sprintf("share %d", r.ShareMilli)
	}
	if len(r.Models) > 0 {
		class += " on " + strings.Join(r.Models, "|")
	}
	c, ok := t[class]
	if !ok {
		c = &FailureClass{Class: class}
		t[class] = c
	}
	c.Tasks++
	c.Milli += r.GPUMilli()
}

// classes lists the tally, most GPU first.
func (t failureTally) classes() []FailureClass {
	out := make([]FailureClass, 0, len(t))
	for _, c := range t {
		out = append(out, *c)
	}
	slices.SortFunc(out, func(a, b FailureClass) int {
		return cmp.Or(cmp.Compare(b.Milli, a.Milli), strings.Compare(a.Class, b.Class))
	})
	return out
}

// leftover buckets the free GPU of partly used cards by free level, in
// steps of 50 milli; fully free cards are the last bucket (1000).
func leftover(nodes []*placement.Node) []FreeLevel {
	byLevel := map[int64]*FreeLevel{}
	for _, n := range nodes {
		for i := range n.Cards {
			f := n.Cards[i].FreeMilli()
			if f <= 0 {
				continue
			}
			from := f / 50 * 50
			l, ok := byLevel[from]
			if !ok {
				l = &FreeLevel{FromMilli: from}
				byLevel[from] = l
			}
			l.Cards++
			l.Milli += f
		}
	}
	out := make([]FreeLevel, 0, len(byLevel))
	for _, l := range byLevel {
		out = append(out, *l)
	}
	slices.SortFunc(out, func(a, b FreeLevel) int { return cmp.Compare(a.FromMilli, b.FromMilli) })
	return out
}
