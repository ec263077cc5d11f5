package placement

import (
	"context"
	"errors"
	"fmt"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/dynamic-resource-allocation/structured"

	"github.com/tangram-gpu/tangram/pkg/device"
	"github.com/tangram-gpu/tangram/pkg/dra"
)

// Validator checks a placement with the DRA allocator and records it.
type Validator interface {
	// Allocate runs the allocator for r on node n. With pin, the claim is
	// restricted to cards; otherwise the allocator chooses. It returns what
	// the allocation consumes per card, or nil when the allocator refuses.
	Allocate(ctx context.Context, n *Node, r Request, cards []int, pin bool) ([]Consumed, error)
}

// DRAValidator runs the real structured allocator, one node at a time, with
// that node's ResourceSlices and the state of every claim allocated on it.
type DRAValidator struct {
	nodes map[string]*draNode
}

type draNode struct {
	node      *v1.Node
	state     structured.AllocatedState
	allocator structured.Allocator
	// counters is set when the node publishes counter sets (cards in MIG
	// mode): the allocator computes a pool's available counters once per
	// instance, from the devices allocated then, so such a node gets a
	// fresh allocator for every placement, as kube-scheduler makes one per
	// scheduling cycle.
	counters bool
	classes  []*resourceapi.DeviceClass
	slices   []*resourceapi.ResourceSlice
}

// NewDRAValidator prepares an allocator per node from its slices.
func NewDRAValidator(ctx context.Context, slicesByNode map[string][]*resourceapi.ResourceSlice) (*DRAValidator, error) {
	classes := device.DeviceClasses()
	v := &DRAValidator{nodes: make(map[string]*draNode, len(slicesByNode))}
	for name, slices := range slicesByNode {
		dn := &draNode{
			node:  &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}},
			state: dra.NewAllocatedState(),
		}
		// The allocator keeps the state's maps, so recording allocations in
		// them later is seen by the next Allocate call.
		a, err := dra.NewAllocator(ctx, dn.state, classes, slices)
		if err != nil {
			return nil, fmt.Errorf("node %s: %w", name, err)
		}
		dn.allocator = a
		dn.classes, dn.slices = classes, slices
		for _, s := range slices {
			dn.counters = dn.counters || len(s.Spec.SharedCounters) > 0
		}
		v.nodes[name] = dn
	}
	return v, nil
}

// Allocate implements Validator.
func (v *DRAValidator) Allocate(ctx context.Context, n *Node, r Request, cards []int, pin bool) ([]Consumed, error) {
	dn, ok := v.nodes[n.Name]
	if !ok {
		return nil, fmt.Errorf("node %s has no ResourceSlices", n.Name)
	}
	claim, err := Claim(n, r, cards, pin)
	if err != nil {
		return nil, err
	}
	allocator := dn.allocator
	if dn.counters {
		if allocator, err = dra.NewAllocator(ctx, dn.state, dn.classes, dn.slices); err != nil {
			return nil, fmt.Errorf("node %s: %w", n.Name, err)
		}
	}
	results, err := allocator.Allocate(ctx, dn.node, []*resourceapi.ResourceClaim{claim})
	if errors.Is(err, structured.ErrFailedAllocationOnNode) || (err == nil && len(results) == 0) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("allocating %s on node %s: %w", r.Name, n.Name, err)
	}
	byDevice := make(map[string]int, len(n.Cards))
	for i := range n.Cards {
		byDevice[n.Cards[i].Device] = i
	}
	var consumed []Consumed
	for _, d := range results[0].Devices.Results {
		if card, p, ok := n.migCardIndex(d.Device); ok {
			consumed = append(consumed, Consumed{Card: card, MIG: p + 1})
			continue
		}
		i, ok := byDevice[d.Device]
		if !ok {
			return nil, fmt.Errorf("allocating %s on node %s: allocator chose unknown device %s", r.Name, n.Name, d.Device)
		}
		k := Consumed{Card: i, Whole: r.ShareMilli == 0}
		if q, ok := d.ConsumedCapacity[device.CapacityCompute]; ok {
			k.Compute = q.Value()
		}
		if q, ok := d.ConsumedCapacity[device.CapacityMemory]; ok {
			k.Memory = q.Value()
		}
		consumed = append(consumed, k)
	}
	dra.AddToAllocatedState(&dn.state, &results[0])
	return consumed, nil
}
