package cluster

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/dynamic-resource-allocation/structured"
	"k8s.io/utils/ptr"

	"github.com/tangram-gpu/tangram/pkg/dra"
)

// NewAllocator returns kube-scheduler's DRA allocator (through pkg/dra)
// over the snapshot's current slices and classes, treating state as already
// taken.
func (s *Snapshot) NewAllocator(ctx context.Context, state structured.AllocatedState) (structured.Allocator, error) {
	return dra.NewAllocator(ctx, state, s.Classes, CurrentSlices(s.Slices))
}

// NodeObjects returns the snapshot's nodes, plus a bare Node for every node
// a slice names that the snapshot lacks (e.g. nodes could not be listed),
// so that per-node allocation still works. Sorted by name.
func (s *Snapshot) NodeObjects() []*corev1.Node {
	seen := map[string]bool{}
	var out []*corev1.Node
	for _, n := range s.Nodes {
		if !seen[n.Name] {
			seen[n.Name] = true
			out = append(out, n)
		}
	}
	for _, sl := range s.Slices {
		names := []string{ptr.Deref(sl.Spec.NodeName, "")}
		for _, d := range sl.Spec.Devices {
			names = append(names, ptr.Deref(d.NodeName, ""))
		}
		for _, name := range names {
			if name != "" && !seen[name] {
				seen[name] = true
				out = append(out, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}})
			}
		}
	}
	sortNodes(out)
	return out
}

func sortNodes(nodes []*corev1.Node) {
	for i := 1; i < len(nodes); i++ {
		for j := i; j > 0 && NaturalLess(nodes[j].Name, nodes[j-1].Name); j-- {
			nodes[j], nodes[j-1] = nodes[j-1], nodes[j]
		}
	}
}
