package preempt

import (
	"context"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"

	"github.com/tangram-gpu/tangram/pkg/preemption"
)

func TestNewRefusesArgs(t *testing.T) {
	for _, raw := range []string{`policy: tangram`, `{"victims": 3}`} {
		t.Run(raw, func(t *testing.T) {
			_, err := New(context.Background(), &runtime.Unknown{Raw: []byte(raw)}, nil)
			if err == nil || !strings.Contains(err.Error(), "takes no args") {
				t.Errorf("New(%q) = %v, want an error saying it takes no args", raw, err)
			}
		})
	}
}

func TestBetterNode(t *testing.T) {
	victims := func(priorities ...int32) []*v1.Pod {
		var out []*v1.Pod
		for _, p := range priorities {
			out = append(out, &v1.Pod{Spec: v1.PodSpec{Priority: ptr.To(p)}})
		}
		return out
	}
	cand := func(node string, score float64, priorities ...int32) *candidate {
		return &candidate{node: node, decision: preemption.Decision{Fits: true, Score: score, Victims: victims(priorities...)}}
	}
	for _, tc := range []struct {
		name string
		a, b *candidate
	}{
		{"fewer victims", cand("z", 0, 50), cand("a", 9, 1, 1)},
		{"lower highest priority", cand("z", 0, 1, 4), cand("a", 9, 0, 5)},
		{"lower sum of priorities", cand("z", 0, 1, 5), cand("a", 9, 2, 5)},
		{"higher placement score", cand("z", 2, 5), cand("a", 1, 5)},
		{"name breaks the last tie", cand("a", 1, 5), cand("b", 1, 5)},
		{"no victims at all beats any", cand("z", 0), cand("a", 9, 1)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if !better(tc.a, tc.b) || better(tc.b, tc.a) {
				t.Errorf("better(%s, %s) = %v, better(%s, %s) = %v; want true, false",
					tc.a.node, tc.b.node, better(tc.a, tc.b), tc.b.node, tc.a.node, better(tc.b, tc.a))
			}
		})
	}
}
