// Package consumable is one consumable capacity of a device (DRA's
// consumable capacity: memory in bytes, compute in percent) with its
// request policy, and what a request consumes of it by the allocator's own
// rules, so the placement model rounds a share as the allocator does.
package consumable

import (
	"fmt"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/tangram-gpu/tangram/pkg/device"
)

// Capacity is one consumable capacity of a device with its request policy,
// in the integer unit the allocator compares (bytes, percent).
type Capacity struct {
	Value int64
	// Default is consumed by a request that names no amount.
	Default int64
	// Min, Max and Step form the valid range; Step 0 means any value >= Min.
	Min, Max, Step int64
	// HasPolicy is false when the device publishes no request policy: a
	// request then consumes exactly what it asks.
	HasPolicy bool
}

// Allocatable is the most one allocation can consume (device.AllocatableMemory
// for memory): the policy's maximum when below the value, else the value.
// Without a policy no share is possible, and 0 says so.
func (c Capacity) Allocatable() int64 {
	if !c.HasPolicy {
		return 0
	}
	if c.Max > 0 && c.Max < c.Value {
		return c.Max
	}
	return c.Value
}

// Consume is what a request for amount (nil: none named) consumes, by the
// allocator's rules: the default when nothing is asked, otherwise rounded up
// to the valid range and step. ok is false when the policy forbids it.
func (c Capacity) Consume(amount *int64) (int64, bool) {
	if amount == nil {
		if c.HasPolicy {
			return c.Default, true
		}
		return c.Value, true
	}
	v := *amount
	if !c.HasPolicy {
		return v, true
	}
	if v < c.Min {
		v = c.Min
	} else if c.Step > 0 {
		n := (v - c.Min + c.Step - 1) / c.Step
		v = c.Min + n*c.Step
	}
	if c.Max > 0 && v > c.Max {
		return 0, false
	}
	return v, true
}

// Of is d's capacity name with its request policy.
func Of(d resourceapi.Device, name string) (Capacity, error) {
	dc, ok := d.Capacity[resourceapi.QualifiedName(name)]
	if !ok {
		if name == device.CapacityCompute {
			// Without a compute capacity only memory limits shares.
			return Capacity{}, nil
		}
		return Capacity{}, fmt.Errorf("no %q capacity published; the placement model needs it", name)
	}
	c := Capacity{Value: dc.Value.Value()}
	if p := dc.RequestPolicy; p != nil {
		c.HasPolicy = true
		c.Default = c.Value
		if p.Default != nil {
			c.Default = p.Default.Value()
		}
		if len(p.ValidValues) > 0 {
			return Capacity{}, fmt.Errorf("capacity %q: validValues policies are not modelled; publish a validRange", name)
		}
		if r := p.ValidRange; r != nil {
			c.Min = qvalue(r.Min)
			c.Max = qvalue(r.Max)
			c.Step = qvalue(r.Step)
		}
	}
	return c, nil
}

func qvalue(q *resource.Quantity) int64 {
	if q == nil {
		return 0
	}
	return q.Value()
}
