package device

import (
	"math"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

func TestHoldsWholeCard(t *testing.T) {
	const gi = int64(1) << 30
	tests := []struct {
		name        string
		shareID     bool
		consumed    map[resourceapi.QualifiedName]resource.Quantity
		allocatable int64
		want        bool
	}{
		{name: "no share ID: exclusive", shareID: false, allocatable: 80 * gi, want: true},
		{name: "no share ID even with consumed memory", shareID: false, consumed: mem("20Gi"), allocatable: 80 * gi, want: true},
		{name: "share without consumed capacity", shareID: true, allocatable: 80 * gi, want: true},
		{name: "share that consumed only compute", shareID: true, consumed: map[resourceapi.QualifiedName]resource.Quantity{CapacityCompute: resource.MustParse("40")}, allocatable: 80 * gi, want: true},
		{name: "memory share", shareID: true, consumed: mem("20Gi"), allocatable: 80 * gi, want: false},
		{name: "all allocatable memory (the policy default)", shareID: true, consumed: mem("80Gi"), allocatable: 80 * gi, want: true},
		{name: "allocatable below the card's memory", shareID: true, consumed: mem("7680Mi"), allocatable: 7680 << 20, want: true},
		{name: "one step below allocatable", shareID: true, consumed: mem("7424Mi"), allocatable: 7680 << 20, want: false},
		{name: "allocatable unknown: isolate", shareID: true, consumed: mem("80Gi"), allocatable: 0, want: false},
		{name: "zero memory share (admin-sized) is a share", shareID: true, consumed: mem("0"), allocatable: 80 * gi, want: false},
		{name: "beyond int64 does not wrap", shareID: true, consumed: mem("100Ei"), allocatable: 80 * gi, want: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := HoldsWholeCard(tc.shareID, ConsumedMemory(tc.consumed), tc.allocatable); got != tc.want {
				t.Errorf("HoldsWholeCard(shareID=%v, %v, allocatable=%d) = %v, want %v", tc.shareID, tc.consumed, tc.allocatable, got, tc.want)
			}
		})
	}
}

func mem(q string) map[resourceapi.QualifiedName]resource.Quantity {
	return map[resourceapi.QualifiedName]resource.Quantity{CapacityMemory: resource.MustParse(q)}
}

func TestConsumedMemory(t *testing.T) {
	tests := []struct {
		consumed map[resourceapi.QualifiedName]resource.Quantity
		want     int64
	}{
		{consumed: nil, want: NoMemoryConsumed},
		{consumed: mem("1Gi"), want: 1 << 30},
		{consumed: mem("1.5"), want: 2},
		{consumed: mem("100Ei"), want: math.MaxInt64},
	}
	for _, tc := range tests {
		if got := ConsumedMemory(tc.consumed); got != tc.want {
			t.Errorf("ConsumedMemory(%v) = %d, want %d", tc.consumed, got, tc.want)
		}
	}
}

func TestAllocatableMemory(t *testing.T) {
	q := func(s string) *resource.Quantity { v := resource.MustParse(s); return &v }
	tests := []struct {
		name string
		dev  resourceapi.Device
		want int64
	}{
		{name: "no memory capacity", dev: resourceapi.Device{}, want: 0},
		{name: "whole-card only: the capacity", want: 24 << 30, dev: resourceapi.Device{Capacity: map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{
			CapacityMemory: {Value: resource.MustParse("24Gi")}}}},
		{name: "policy max below the capacity", want: 7680 << 20, dev: resourceapi.Device{Capacity: map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{
			CapacityMemory: {Value: resource.MustParse("7800Mi"), RequestPolicy: &resourceapi.CapacityRequestPolicy{
				ValidRange: &resourceapi.CapacityRequestPolicyRange{Min: q("0"), Max: q("7680Mi"), Step: q("256Mi")}}}}}},
		{name: "policy max above the capacity is capped", want: 8 << 30, dev: resourceapi.Device{Capacity: map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{
			CapacityMemory: {Value: resource.MustParse("8Gi"), RequestPolicy: &resourceapi.CapacityRequestPolicy{
				ValidRange: &resourceapi.CapacityRequestPolicyRange{Min: q("0"), Max: q("16Gi")}}}}}},
	}
	for _, tc := range tests {
		if got := AllocatableMemory(&tc.dev); got != tc.want {
			t.Errorf("%s: AllocatableMemory = %d, want %d", tc.name, got, tc.want)
		}
	}
}

func TestUsableMemory(t *testing.T) {
	step := DefaultMemoryStep.Value()
	for _, tc := range []struct{ memory, step, want int64 }{
		{memory: 80 << 30, step: step, want: 80 << 30},
		{memory: 7800 << 20, step: step, want: 7680 << 20},
		{memory: 1000, step: 0, want: 1000},
	} {
		if got := UsableMemory(tc.memory, tc.step); got != tc.want {
			t.Errorf("UsableMemory(%d, %d) = %d, want %d", tc.memory, tc.step, got, tc.want)
		}
	}
}
