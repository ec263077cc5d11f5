package cluster

import (
	"strings"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/utils/ptr"

	"github.com/tangram-gpu/tangram/pkg/device"
)

// Use says how much of a device is taken. The values are the words the
// view and its JSON show.
type Use string

const (
	// Free: nothing (but admin access) is allocated on the device.
	Free Use = "free"
	// Partial: some shares are allocated and memory is left for more.
	Partial Use = "partial"
	// Full: a claim holds the whole device, the device cannot be shared and
	// is in use, or its allocatable memory is all shared out.
	Full Use = "full"
)

// Use returns how much of the device is taken.
func (d *DeviceState) Use() Use {
	switch {
	case !d.InUse():
		return Free
	case d.HeldWhole() || !d.Shareable:
		return Full
	}
	if mem := d.Capacity(device.CapacityMemory); mem.Sign() > 0 {
		if used := d.Used(device.CapacityMemory); used.Value() >= device.AllocatableMemory(d.Device) {
			return Full
		}
	}
	return Partial
}

// Shares counts the allocations on the device that are shares (not whole,
// not admin access).
func (d *DeviceState) Shares() int {
	n := 0
	for _, a := range d.Allocations {
		if !a.Whole && !ptr.Deref(a.Result.AdminAccess, false) {
			n++
		}
	}
	return n
}

// ClaimRef names a claim.
type ClaimRef struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	UID       string `json:"uid"`
}

// ClaimRefOf names c.
func ClaimRefOf(c *resourceapi.ResourceClaim) ClaimRef {
	return ClaimRef{Namespace: c.Namespace, Name: c.Name, UID: string(c.UID)}
}

func (c ClaimRef) String() string { return c.Namespace + "/" + c.Name }

// PendingClaims lists, sorted, the unallocated claims (not being deleted)
// that ask for one of our device classes, directly or in a firstAvailable
// alternative.
func PendingClaims(snap *Snapshot) []*resourceapi.ResourceClaim {
	ours := OurClasses(snap.Classes)
	var out []*resourceapi.ResourceClaim
	for _, c := range SortedClaims(snap.Claims) {
		if c.Status.Allocation != nil || c.DeletionTimestamp != nil {
			continue
		}
		if claimUsesClasses(c, ours) {
			out = append(out, c)
		}
	}
	return out
}

// OurClasses is the set of DeviceClass names that select our driver's
// devices: the three the chart publishes, plus any class whose selectors
// name our driver.
func OurClasses(classes []*resourceapi.DeviceClass) map[string]bool {
	ours := map[string]bool{device.DeviceClassName: true, device.SharedDeviceClassName: true, device.HardSharedDeviceClassName: true}
	for _, c := range classes {
		for _, s := range c.Spec.Selectors {
			if s.CEL != nil && strings.Contains(s.CEL.Expression, device.DriverName) {
				ours[c.Name] = true
			}
		}
	}
	return ours
}

func claimUsesClasses(c *resourceapi.ResourceClaim, classes map[string]bool) bool {
	for _, r := range c.Spec.Devices.Requests {
		if r.Exactly != nil && classes[r.Exactly.DeviceClassName] {
			return true
		}
		for _, sub := range r.FirstAvailable {
			if classes[sub.DeviceClassName] {
				return true
			}
		}
	}
	return false
}
