// Package cluster is the cluster model: a Snapshot of the native DRA objects
// and the Inventory built from it (which card each claim holds, how much of
// each card is used). It is pure: objects in, model out. The snapshot comes
// from the API server (cluster/fetch, kubectl-tangram) or from informer
// caches (cluster/informer, the controller); cluster/fixture builds test
// clusters. The diagnosis, the controller's metrics and gang status, and the
// kubectl view (pkg/clusterview, which only renders) read it.
package cluster

import (
	"sort"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/dynamic-resource-allocation/structured"
	"k8s.io/utils/ptr"

	tangramv1alpha1 "github.com/tangram-gpu/tangram/api/tangram/v1alpha1"
	"github.com/tangram-gpu/tangram/pkg/device"
)

// Snapshot is everything the view and the diagnosis read, fetched at one
// moment. Slices of every driver are kept: the diagnosis must see what the
// scheduler sees, the view filters to our driver.
type Snapshot struct {
	Slices  []*resourceapi.ResourceSlice
	Claims  []*resourceapi.ResourceClaim
	Pods    []*corev1.Pod
	Classes []*resourceapi.DeviceClass
	Nodes   []*corev1.Node
	// Gangs are the controller's GpuGangs; empty when the CRD is not
	// installed.
	Gangs []*tangramv1alpha1.GpuGang
}

// Allocation is one allocation result of a claim on a device.
type Allocation struct {
	Claim  *resourceapi.ResourceClaim
	Result *resourceapi.DeviceRequestAllocationResult
	// Whole is true when the result holds the entire device: no share ID,
	// no consumed capacity recorded, or all of the device's memory.
	Whole bool
	// Consumed is the capacity this result takes from the device; for a
	// whole-device result it is the device's full capacity.
	Consumed map[resourceapi.QualifiedName]resource.Quantity
}

// DeviceState is one published device and what is allocated on it.
type DeviceState struct {
	Driver, Pool string
	// Node is the node the device sits on, empty for devices reachable
	// from several nodes.
	Node   string
	Device *resourceapi.Device
	// Shareable mirrors allowMultipleAllocations.
	Shareable   bool
	Allocations []Allocation
}

// ID is the allocator's identity of the device.
func (d *DeviceState) ID() structured.DeviceID {
	return structured.MakeDeviceID(d.Driver, d.Pool, d.Device.Name)
}

// Capacity returns the device's capacity with the given name, 0 if absent.
func (d *DeviceState) Capacity(name resourceapi.QualifiedName) resource.Quantity {
	if c, ok := d.Device.Capacity[name]; ok {
		return c.Value.DeepCopy()
	}
	return resource.Quantity{}
}

// HeldWhole reports whether some claim holds the whole device.
func (d *DeviceState) HeldWhole() bool {
	for _, a := range d.Allocations {
		if a.Whole && !ptr.Deref(a.Result.AdminAccess, false) {
			return true
		}
	}
	return false
}

// Used is the capacity taken by all allocations, never more than the
// device has (a stale claim must not produce negative free space).
func (d *DeviceState) Used(name resourceapi.QualifiedName) resource.Quantity {
	total := d.Capacity(name)
	if d.HeldWhole() {
		return total
	}
	var used resource.Quantity
	for _, a := range d.Allocations {
		if ptr.Deref(a.Result.AdminAccess, false) {
			continue
		}
		if q, ok := a.Consumed[name]; ok {
			used.Add(q)
		}
	}
	if used.Cmp(total) > 0 {
		return total
	}
	return used
}

// Free is the capacity still available for a new allocation: for a device
// that cannot be shared, all or nothing.
func (d *DeviceState) Free(name resourceapi.QualifiedName) resource.Quantity {
	total := d.Capacity(name)
	if !d.Shareable && d.InUse() {
		return resource.Quantity{}
	}
	total.Sub(d.Used(name))
	return total
}

// Attribute returns a device attribute by its fully qualified name;
// unqualified names are looked up in the device's driver domain.
func (d *DeviceState) Attribute(name resourceapi.QualifiedName) (resourceapi.DeviceAttribute, bool) {
	if a, ok := d.Device.Attributes[name]; ok {
		return a, true
	}
	domain, id, found := strings.Cut(string(name), "/")
	if found && domain == d.Driver {
		a, ok := d.Device.Attributes[resourceapi.QualifiedName(id)]
		return a, ok
	}
	return resourceapi.DeviceAttribute{}, false
}

// StringAttribute returns the attribute rendered as text, "" if absent.
func (d *DeviceState) StringAttribute(name resourceapi.QualifiedName) string {
	a, ok := d.Attribute(name)
	if !ok {
		return ""
	}
	return AttributeString(a)
}

// AttributeString renders any attribute value as text.
func AttributeString(a resourceapi.DeviceAttribute) string {
	switch {
	case a.StringValue != nil:
		return *a.StringValue
	case a.IntValue != nil:
		return strconv.FormatInt(*a.IntValue, 10)
	case a.BoolValue != nil:
		return strconv.FormatBool(*a.BoolValue)
	case a.VersionValue != nil:
		return *a.VersionValue
	}
	return ""
}

func (d *DeviceState) InUse() bool {
	for _, a := range d.Allocations {
		if !ptr.Deref(a.Result.AdminAccess, false) {
			return true
		}
	}
	return false
}

// Orphan is an allocation result whose device is not in any current
// ResourceSlice (the driver restarted, the node went away, ...).
type Orphan struct {
	Claim  *resourceapi.ResourceClaim
	Result *resourceapi.DeviceRequestAllocationResult
}

// Inventory is every current device with its allocations.
type Inventory struct {
	// Devices are sorted by node, driver, pool and device name (gpu-2
	// before gpu-10).
	Devices []*DeviceState
	Orphans []Orphan
	byID    map[structured.DeviceID]*DeviceState
}

// NewInventory indexes the snapshot's current slices and the allocation
// results of its claims.
func NewInventory(snap *Snapshot) *Inventory {
	inv := &Inventory{byID: map[structured.DeviceID]*DeviceState{}}
	for _, s := range CurrentSlices(snap.Slices) {
		for i := range s.Spec.Devices {
			dev := &s.Spec.Devices[i]
			node := ptr.Deref(s.Spec.NodeName, "")
			if dev.NodeName != nil {
				node = *dev.NodeName
			}
			ds := &DeviceState{
				Driver:    s.Spec.Driver,
				Pool:      s.Spec.Pool.Name,
				Node:      node,
				Device:    dev,
				Shareable: ptr.Deref(dev.AllowMultipleAllocations, false),
			}
			if _, dup := inv.byID[ds.ID()]; dup {
				continue
			}
			inv.byID[ds.ID()] = ds
			inv.Devices = append(inv.Devices, ds)
		}
	}
	sort.Slice(inv.Devices, func(i, j int) bool { return lessDevice(inv.Devices[i], inv.Devices[j]) })

	for _, claim := range SortedClaims(snap.Claims) {
		if claim.Status.Allocation == nil {
			continue
		}
		for i := range claim.Status.Allocation.Devices.Results {
			r := &claim.Status.Allocation.Devices.Results[i]
			ds, ok := inv.byID[structured.MakeDeviceID(r.Driver, r.Pool, r.Device)]
			if !ok {
				inv.Orphans = append(inv.Orphans, Orphan{Claim: claim, Result: r})
				continue
			}
			ds.Allocations = append(ds.Allocations, newAllocation(ds, claim, r))
		}
	}
	return inv
}

// Device looks a device up by its allocator identity.
func (inv *Inventory) Device(driver, pool, device string) *DeviceState {
	return inv.byID[structured.MakeDeviceID(driver, pool, device)]
}

func newAllocation(ds *DeviceState, claim *resourceapi.ResourceClaim, r *resourceapi.DeviceRequestAllocationResult) Allocation {
	a := Allocation{Claim: claim, Result: r}
	a.Whole = device.HoldsWholeCard(r.ShareID != nil, device.ConsumedMemory(r.ConsumedCapacity), device.AllocatableMemory(ds.Device))
	a.Consumed = map[resourceapi.QualifiedName]resource.Quantity{}
	if a.Whole {
		for name, c := range ds.Device.Capacity {
			a.Consumed[name] = c.Value.DeepCopy()
		}
		return a
	}
	for name, q := range r.ConsumedCapacity {
		a.Consumed[name] = q.DeepCopy()
	}
	return a
}

// CurrentSlices keeps, for each pool, only the slices of its highest
// generation, as the allocator does; older ones are being replaced.
func CurrentSlices(all []*resourceapi.ResourceSlice) []*resourceapi.ResourceSlice {
	type poolKey struct{ driver, pool string }
	maxGen := map[poolKey]int64{}
	for _, s := range all {
		k := poolKey{s.Spec.Driver, s.Spec.Pool.Name}
		if g, ok := maxGen[k]; !ok || s.Spec.Pool.Generation > g {
			maxGen[k] = s.Spec.Pool.Generation
		}
	}
	var out []*resourceapi.ResourceSlice
	for _, s := range all {
		if s.Spec.Pool.Generation == maxGen[poolKey{s.Spec.Driver, s.Spec.Pool.Name}] {
			out = append(out, s)
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

func SortedClaims(claims []*resourceapi.ResourceClaim) []*resourceapi.ResourceClaim {
	out := append([]*resourceapi.ResourceClaim(nil), claims...)
	sort.SliceStable(out, func(i, j int) bool {
		if out[i].Namespace != out[j].Namespace {
			return out[i].Namespace < out[j].Namespace
		}
		return out[i].Name < out[j].Name
	})
	return out
}

func lessDevice(a, b *DeviceState) bool {
	if a.Node != b.Node {
		return a.Node < b.Node
	}
	if a.Driver != b.Driver {
		return a.Driver < b.Driver
	}
	if a.Pool != b.Pool {
		return a.Pool < b.Pool
	}
	return NaturalLess(a.Device.Name, b.Device.Name)
}

// NaturalLess orders names with numbers by value: gpu-2 before gpu-10.
func NaturalLess(a, b string) bool {
	for a != "" && b != "" {
		da, db := digitPrefix(a), digitPrefix(b)
		if da != "" && db != "" {
			na, _ := strconv.ParseUint(da, 10, 64)
			nb, _ := strconv.ParseUint(db, 10, 64)
			if na != nb {
				return na < nb
			}
			a, b = a[len(da):], b[len(db):]
			continue
		}
		if a[0] != b[0] {
			return a[0] < b[0]
		}
		a, b = a[1:], b[1:]
	}
	return len(a) < len(b)
}

func digitPrefix(s string) string {
	i := 0
	for i < len(s) && s[i] >= '0' && s[i] <= '9' {
		i++
	}
	return s[:i]
}
