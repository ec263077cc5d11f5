// Package dra is Tangram's only wrapper of kube-scheduler's DRA allocator
// (k8s.io/dynamic-resource-allocation/structured): one feature set (the
// 1.37 defaults), one cache of compiled CEL selectors, one way to turn
// allocated claims into the allocator's state. The cluster model
// (diagnosis), the placement validator, preemption, the simulator and tests
// all allocate through it instead of re-implementing allocation; Node runs
// it one claim at a time, feeding every result back as allocated state the
// way the scheduler does.
package dra

import (
	"context"
	"errors"
	"fmt"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/dynamic-resource-allocation/cel"
	"k8s.io/dynamic-resource-allocation/structured"
	"k8s.io/utils/ptr"
)

// Features is the allocator feature set kube-scheduler 1.37 enables by
// default: the beta and GA DRA gates (AdminAccess, ConsumableCapacity,
// DeviceBindingConditions + ResourceClaimDeviceStatus, DeviceTaints,
// FractionalCapacityRange, PartitionableDevices, PrioritizedList), without
// the alpha ones. Consumable capacity is what makes GPU shares possible.
var Features = structured.Features{
	AdminAccess:             true,
	ConsumableCapacity:      true,
	DeviceBindingAndStatus:  true,
	DeviceTaints:            true,
	FractionalCapacityRange: true,
	PartitionableDevices:    true,
	PrioritizedList:         true,
}

// ErrUnschedulable means the allocator found no devices for the claim on
// the node. Any other error is a problem with the input (e.g. a bad CEL
// expression or an unknown class).
var ErrUnschedulable = errors.New("claim cannot be allocated on this node")

// celCache is shared by every allocator: compiled selectors are immutable
// and the cache is safe for concurrent use. Compiling dominates a call on a
// small node, so callers that run the allocator many times (preemption, the
// simulator) gain most. The size covers the chart's classes plus the
// distinct selectors of many claims.
var celCache = cel.NewCache(1000, cel.Features{EnableConsumableCapacity: Features.ConsumableCapacity, EnableListTypeAttributes: Features.ListTypeAttributes})

// CELCache returns the cache of compiled CEL selectors, for code that
// evaluates a selector itself (diagnosis explaining a mismatch).
func CELCache() *cel.Cache { return celCache }

// NewAllocator returns kube-scheduler's allocator over slices and classes,
// treating state as already taken. The allocator keeps state's maps, so
// results recorded in them later (AddToAllocatedState) are seen by its next
// Allocate call.
func NewAllocator(ctx context.Context, state structured.AllocatedState, classes []*resourceapi.DeviceClass, slices []*resourceapi.ResourceSlice) (structured.Allocator, error) {
	a, err := structured.NewAllocator(ctx, Features, state, ClassLister(classes), slices, celCache)
	if err != nil {
		return nil, fmt.Errorf("creating the DRA allocator: %w", err)
	}
	return a, nil
}

// Node is one node with its published slices and the claims already
// allocated there.
type Node struct {
	Name    string
	Slices  []*resourceapi.ResourceSlice
	Classes []*resourceapi.DeviceClass
	// Allocated holds claims with status.allocation set; Allocate appends
	// to it.
	Allocated []*resourceapi.ResourceClaim
}

// Allocate runs the allocator for one claim against the node's slices and
// the already allocated claims. On success it returns a copy of the claim
// with status.allocation set and records that copy in n.Allocated, so the
// next call sees its devices and consumed capacity. The claim passed in is
// not modified.
func (n *Node) Allocate(ctx context.Context, claim *resourceapi.ResourceClaim) (*resourceapi.ResourceClaim, error) {
	result, err := n.Try(ctx, claim)
	if err != nil {
		return nil, err
	}
	allocated := claim.DeepCopy()
	allocated.Status.Allocation = result
	n.Allocated = append(n.Allocated, allocated)
	return allocated, nil
}

// Try is Allocate without recording the result.
func (n *Node) Try(ctx context.Context, claim *resourceapi.ResourceClaim) (*resourceapi.AllocationResult, error) {
	allocator, err := NewAllocator(ctx, AllocatedState(n.Allocated), n.Classes, n.Slices)
	if err != nil {
		return nil, fmt.Errorf("node %s: %w", n.Name, err)
	}
	node := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: n.Name}}
	results, err := allocator.Allocate(ctx, node, []*resourceapi.ResourceClaim{claim})
	if err != nil {
		if errors.Is(err, structured.ErrFailedAllocationOnNode) {
			return nil, fmt.Errorf("claim %s on node %s: %w: %w", claim.Name, n.Name, ErrUnschedulable, err)
		}
		return nil, fmt.Errorf("allocating claim %s on node %s: %w", claim.Name, n.Name, err)
	}
	if len(results) == 0 {
		return nil, fmt.Errorf("claim %s on node %s: %w", claim.Name, n.Name, ErrUnschedulable)
	}
	return &results[0], nil
}

// NewAllocatedState returns an empty allocated state.
func NewAllocatedState() structured.AllocatedState {
	return structured.AllocatedState{
		AllocatedDevices:         sets.New[structured.DeviceID](),
		AllocatedSharedDeviceIDs: sets.New[structured.SharedDeviceID](),
		AggregatedCapacity:       structured.NewConsumedCapacityCollection(),
	}
}

// AllocatedState is what kube-scheduler derives from allocated claims (see
// AddToAllocatedState).
func AllocatedState(claims []*resourceapi.ResourceClaim) structured.AllocatedState {
	state := NewAllocatedState()
	for _, claim := range claims {
		AddToAllocatedState(&state, claim.Status.Allocation)
	}
	return state
}

// AddToAllocatedState records one allocation in state the way kube-scheduler
// does: a device result with a share ID is one share of a multi-allocatable
// device and adds its consumed capacity; any other result takes the device
// exclusively; admin access (monitoring) takes nothing.
func AddToAllocatedState(state *structured.AllocatedState, alloc *resourceapi.AllocationResult) {
	if alloc == nil {
		return
	}
	for _, r := range alloc.Devices.Results {
		if ptr.Deref(r.AdminAccess, false) {
			continue
		}
		id := structured.MakeDeviceID(r.Driver, r.Pool, r.Device)
		if r.ShareID == nil {
			state.AllocatedDevices.Insert(id)
			continue
		}
		state.AllocatedSharedDeviceIDs.Insert(structured.MakeSharedDeviceID(id, r.ShareID))
		if r.ConsumedCapacity != nil {
			state.AggregatedCapacity.Insert(structured.NewDeviceConsumedCapacity(id, r.ConsumedCapacity))
		}
	}
}

// ClassLister serves a fixed list of DeviceClasses to the structured
// allocator, which asks for them through a lister interface.
type ClassLister []*resourceapi.DeviceClass

// List returns every class.
func (l ClassLister) List() ([]*resourceapi.DeviceClass, error) { return l, nil }

// Get returns a class by name, or a NotFound error as a lister would.
func (l ClassLister) Get(name string) (*resourceapi.DeviceClass, error) {
	for _, c := range l {
		if c.Name == name {
			return c, nil
		}
	}
	return nil, apierrors.NewNotFound(resourceapi.Resource("deviceclasses"), name)
}
