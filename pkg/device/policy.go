package device

import (
	"errors"
	"fmt"
	"math"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// The share policy of a shareable card: a claim that names no capacity gets
// all of the card's allocatable memory (so it holds the whole card) and no
// compute share; memory shares are whole numbers of a step.

// DefaultMemoryStep is the granularity of memory shares when the node does
// not set one: requests are rounded up to it.
var DefaultMemoryStep = resource.MustParse("256Mi")

// ComputeCapacity is the value of the compute capacity of every card: the
// whole card is 100 percent.
const ComputeCapacity = 100

// UsableMemory is the memory of a card that shares can take: its memory
// rounded down to a whole number of steps. The API requires the policy's
// maximum and default to be a whole number of steps from its minimum (0), so
// the remainder stays unallocatable; it is smaller than the smallest share.
func UsableMemory(memoryBytes, step int64) int64 {
	if step <= 0 {
		return memoryBytes
	}
	return memoryBytes - memoryBytes%step
}

// AllocatableMemory returns the most memory (bytes) one allocation can
// consume on a published device: the memory request policy's maximum when it
// is below the capacity, else the capacity. It returns 0 for a device that
// publishes no memory.
func AllocatableMemory(dev *resourceapi.Device) int64 {
	memory, ok := dev.Capacity[CapacityMemory]
	if !ok {
		return 0
	}
	if p := memory.RequestPolicy; p != nil && p.ValidRange != nil && p.ValidRange.Max != nil && p.ValidRange.Max.Cmp(memory.Value) < 0 {
		return saturatedInt64(*p.ValidRange.Max)
	}
	return saturatedInt64(memory.Value)
}

// NoMemoryConsumed is what ConsumedMemory returns for a result that
// recorded no memory.
const NoMemoryConsumed int64 = -1

// ConsumedMemory returns the memory (bytes) an allocation result consumed,
// NoMemoryConsumed when it recorded none. A value beyond int64 saturates, so
// it can never wrap into a small share.
func ConsumedMemory(consumed map[resourceapi.QualifiedName]resource.Quantity) int64 {
	q, ok := consumed[CapacityMemory]
	if !ok {
		return NoMemoryConsumed
	}
	return max(saturatedInt64(q), 0)
}

// HoldsWholeCard is the one rule for "does this allocation result hold the
// whole card?", used when publishing, preparing (a whole card gets no MPS
// and no limits), in the cluster inventory and in placement. Admin access
// (monitoring) holds nothing and is the caller's to leave out.
//
//   - A result without a share ID took the device exclusively.
//   - A share that recorded no memory (consumedMemory NoMemoryConsumed) is
//     whole: shares are defined by their memory.
//   - Otherwise it is whole when it consumed all of the device's allocatable
//     memory (AllocatableMemory): a claim that named no memory on a
//     shareable card gets the policy's default, which is all of it, and
//     nothing else fits beside it. With the allocatable memory unknown
//     (<= 0) it stays a share, so it is isolated rather than trusted.
func HoldsWholeCard(shareID bool, consumedMemory, allocatableMemory int64) bool {
	if !shareID || consumedMemory == NoMemoryConsumed {
		return true
	}
	if allocatableMemory <= 0 {
		return false
	}
	return consumedMemory >= allocatableMemory
}

// saturatedInt64 is q in whole units (fractions rounded up), clamped to
// the int64 range.
func saturatedInt64(q resource.Quantity) int64 {
	switch {
	case q.Cmp(*resource.NewQuantity(math.MaxInt64, resource.DecimalSI)) >= 0:
		return math.MaxInt64
	case q.Cmp(*resource.NewQuantity(math.MinInt64, resource.DecimalSI)) <= 0:
		return math.MinInt64
	}
	return q.Value()
}

// ExactInt64 returns q as an int64 and refuses a quantity it cannot read
// exactly (rounded up, like Quantity.Value) instead of letting Value wrap
// it: (2^64+1) Gi written in bytes wraps to exactly 1 Gi. A claim's consumed
// capacity is a user's number; the scheduler compares such values exactly,
// so the plugin must never read one as something else.
func ExactInt64(q resource.Quantity) (int64, error) {
	if v, ok := q.AsInt64(); ok {
		// Exact: an integer held as an int64 (the common case).
		return v, nil
	}
	switch {
	case q.Cmp(*resource.NewQuantity(math.MaxInt64, resource.DecimalSI)) > 0:
		return 0, fmt.Errorf("beyond the largest number this plugin handles (%d); the allocation is wrong, delete and recreate the claim",
			int64(math.MaxInt64))
	case q.Sign() < 0:
		// No consumption is negative, and Value misreads large negative
		// quantities; small ones were read exactly above.
		return 0, errors.New("negative; the allocation is wrong, delete and recreate the claim")
	}
	return q.Value(), nil
}
