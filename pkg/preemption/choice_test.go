package preemption

import (
	"fmt"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
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
		// A gang of three (priority 1) is one victim; no gang beats any.
		{"pods on their own rather than a gang", choice("z", 0, 50, 50), withGang(choice("a", 9), 1, 1, 1)},
		{"a gang counts as one victim", withGang(choice("z", 0), 5, 5, 5), withGang(choice("a", 9, 1), 1)},
		{"as many victims, fewer gangs", withGang(choice("z", 0, 50), 1), withGang(withGang(choice("a", 9), 1), 1)},
		{"a gang's priority is its PodGroup's", withGang(choice("z", 0), 1, 1), withGang(choice("a", 9), 1).withGangPriority(5)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if !tc.a.Better(tc.b) || tc.b.Better(tc.a) {
				t.Errorf("%s.Better(%s) = %v, %s.Better(%s) = %v; want true, false",
					tc.a.Node, tc.b.Node, tc.a.Better(tc.b), tc.b.Node, tc.a.Node, tc.b.Better(tc.a))
			}
		})
	}
}

var gangSerial int

// withGang adds a gang of pods of the given priorities (and the group's
// priority 0) to c's victims.
func withGang(c *NodeChoice, priorities ...int32) *NodeChoice {
	gangSerial++
	g := &Gang{Namespace: "ns", Name: fmt.Sprint("g", gangSerial)}
	for i, p := range priorities {
		pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{UID: types.UID(fmt.Sprint(g.Name, "-", i))}, Spec: v1.PodSpec{Priority: ptr.To(p)}}
		g.Pods = append(g.Pods, pod)
		c.Decision.Victims = append(c.Decision.Victims, pod)
	}
	c.Decision.Gangs = append(c.Decision.Gangs, g)
	return c
}

// withGangPriority sets the last gang's group priority.
func (a *NodeChoice) withGangPriority(p int32) *NodeChoice {
	a.Decision.Gangs[len(a.Decision.Gangs)-1].Priority = p
	return a
}
