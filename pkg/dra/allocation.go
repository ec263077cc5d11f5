// Package dra runs the real DRA allocator of kube-scheduler
// (k8s.io/dynamic-resource-allocation/structured) against ResourceSlices,
// one claim at a time, feeding every result back as allocated state the way
// the scheduler does. Tests, the trace simulator and anything else that
// needs to know "where would this claim land, given these allocated
// claims" use it instead of re-implementing allocation.
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

// Features137 is the allocator feature set kube-scheduler 1.37 enables by
// default: the beta and GA DRA gates (AdminAccess, ConsumableCapacity,
// DeviceBindingConditions + ResourceClaimDeviceStatus, DeviceTaints,
// FractionalCapacityRange, PartitionableDevices, PrioritizedList), without
// the alpha ones.
var Features137 = structured.Features{
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

// Node is one node with its published slices and the claims already
// allocated there. The zero value of Features means Features137.
type Node struct {
	Name     string
	Slices   []*resourceapi.ResourceSlice
	Classes  []*resourceapi.DeviceClass
	Features *structured.Features
	// Allocated holds claims with status.allocation set; Allocate appends
	// to it.
	Allocated []*resourceapi.ResourceClaim
	// CELCache keeps compiled CEL selectors across calls; nil means a new
	// cache per call. Compiling dominates a call on a small node, so
	// callers that run the allocator many times (preemption) share one.
	// It must have been made with the same CEL features Try would use.
	CELCache *cel.Cache
}

// NewCELCache returns a CEL cache for Node.CELCache with the features the
// allocator uses under features.
func NewCELCache(features structured.Features) *cel.Cache {
	return cel.NewCache(100, cel.Features{EnableConsumableCapacity: features.ConsumableCapacity, EnableListTypeAttributes: features.ListTypeAttributes})
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
	features := Features137
	if n.Features != nil {
		features = *n.Features
	}
	celCache := n.CELCache
	if celCache == nil {
		celCache = NewCELCache(features)
	}
	allocator, err := structured.NewAllocator(ctx, features, AllocatedState(n.Allocated, features.ConsumableCapacity),
		ClassLister(n.Classes), n.Slices, celCache)
	if err != nil {
		return nil, fmt.Errorf("creating allocator for node %s: %w", n.Name, err)
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

// AllocatedState is what kube-scheduler derives from allocated claims: a
// device result with a share ID is one share of a multi-allocatable device
// and adds its consumed capacity; any other result (that is not admin
// access) takes the device exclusively.
func AllocatedState(claims []*resourceapi.ResourceClaim, consumableCapacity bool) structured.AllocatedState {
	state := structured.AllocatedState{
		AllocatedDevices:         sets.New[structured.DeviceID](),
		AllocatedSharedDeviceIDs: sets.New[structured.SharedDeviceID](),
		AggregatedCapacity:       structured.NewConsumedCapacityCollection(),
	}
	for _, claim := range claims {
		if claim.Status.Allocation == nil {
			continue
		}
		for _, r := range claim.Status.Allocation.Devices.Results {
			if ptr.Deref(r.AdminAccess, false) {
				continue
			}
			id := structured.MakeDeviceID(r.Driver, r.Pool, r.Device)
			if consumableCapacity && r.ShareID != nil {
				state.AllocatedSharedDeviceIDs.Insert(structured.MakeSharedDeviceID(id, r.ShareID))
				if r.ConsumedCapacity != nil {
					state.AggregatedCapacity.Insert(structured.NewDeviceConsumedCapacity(id, r.ConsumedCapacity))
				}
				continue
			}
			state.AllocatedDevices.Insert(id)
		}
	}
	return state
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
