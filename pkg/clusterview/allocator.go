package clusterview

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/dynamic-resource-allocation/cel"
	"k8s.io/dynamic-resource-allocation/structured"
	"k8s.io/utils/ptr"

	"github.com/tangram-gpu/tangram/pkg/dra"
)

// AllocatorFeatures are the DRA features Tangram relies on, as enabled in a
// 1.37 cluster: consumable capacity for shares, prioritized lists, taints,
// admin access.
var AllocatorFeatures = structured.Features{
	AdminAccess:             true,
	ConsumableCapacity:      true,
	DeviceTaints:            true,
	FractionalCapacityRange: true,
	PartitionableDevices:    true,
	PrioritizedList:         true,
}

// celCache is shared: compiled selectors are immutable and the cache is
// safe for concurrent use.
var celCache = cel.NewCache(100, cel.Features{EnableConsumableCapacity: true})

// CELCache returns the cache of compiled CEL selectors.
func CELCache() *cel.Cache { return celCache }

// ClassLister serves DeviceClasses from a snapshot to the allocator.
type ClassLister = dra.ClassLister

// NewAllocator returns the kube-scheduler's DRA allocator over the
// snapshot's current slices, treating state as already taken.
func (s *Snapshot) NewAllocator(ctx context.Context, state structured.AllocatedState) (structured.Allocator, error) {
	a, err := structured.NewAllocator(ctx, AllocatorFeatures, state, ClassLister(s.Classes), CurrentSlices(s.Slices), celCache)
	if err != nil {
		return nil, fmt.Errorf("creating the DRA allocator: %w", err)
	}
	return a, nil
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
