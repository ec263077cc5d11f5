package preemption

import (
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
)

func TestNodeChoiceBetter(t *testing.T) {
	victims := func(priorities ...int32) []*v1.Pod {
		var out []*v1.Pod
		for _, p := range priorities {
			out = append(out, &v1.Pod{Spec: v1.PodSpec{Priority: ptr.To(p)}})
		}
		return out
	}
	choice := func(node string, score float64, priorities ...int32) *NodeChoice {
		return &NodeChoice{Node: node, Decision: Decision{Fits: true, Score: score, Victims: victims(priorities...)}}
	}
	for _, tc := range []struct {
		name string
		a, b *NodeChoice
	}{
		{"fewer victims", choice("z", 0, 50), choice("a", 9, 1, 1)},
		{"lower highest priority", choice("z", 0, 1, 4), choice("a", 9, 0, 5)},
		{"lower sum of priorities", choice("z", 0, 1, 5), choice("a", 9, 2, 5)},
		{"higher placement score", choice("z", 2, 5), choice("a", 1, 5)},
		{"name breaks the last tie", choice("a", 1, 5), choice("b", 1, 5)},
		{"no victims at all beats any", choice("z", 0), choice("a", 9, 1)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if !tc.a.Better(tc.b) || tc.b.Better(tc.a) {
				t.Errorf("%s.Better(%s) = %v, %s.Better(%s) = %v; want true, false",
					tc.a.Node, tc.b.Node, tc.a.Better(tc.b), tc.b.Node, tc.a.Node, tc.b.Better(tc.a))
			}
		})
	}
}
