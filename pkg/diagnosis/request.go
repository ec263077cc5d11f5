package diagnosis

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/dynamic-resource-allocation/cel"

	"github.com/tangram-gpu/tangram/pkg/cluster"
	"github.com/tangram-gpu/tangram/pkg/device"
	"github.com/tangram-gpu/tangram/pkg/dra"
)

// exactRequest is one alternative of a claim request, flattened: a plain
// request, or one firstAvailable sub-request ("gpu/a100").
type exactRequest struct {
	name string
	spec *resourceapi.ExactDeviceRequest
}

func flatten(claim *resourceapi.ResourceClaim) [][]exactRequest {
	var out [][]exactRequest
	for i := range claim.Spec.Devices.Requests {
		r := &claim.Spec.Devices.Requests[i]
		if r.Exactly != nil {
			out = append(out, []exactRequest{{name: r.Name, spec: r.Exactly}})
			continue
		}
		var alts []exactRequest
		for j := range r.FirstAvailable {
			sub := &r.FirstAvailable[j]
			alts = append(alts, exactRequest{name: r.Name + "/" + sub.Name, spec: &resourceapi.ExactDeviceRequest{
				DeviceClassName: sub.DeviceClassName,
				Selectors:       sub.Selectors,
				AllocationMode:  sub.AllocationMode,
				Count:           sub.Count,
				Tolerations:     sub.Tolerations,
				Capacity:        sub.Capacity,
			}})
		}
		out = append(out, alts)
	}
	return out
}

// count is how many devices the request needs; 0 means "all matching".
func (r exactRequest) count() int64 {
	if r.spec.AllocationMode == resourceapi.DeviceAllocationModeAll {
		return 0
	}
	if r.spec.Count <= 0 {
		return 1
	}
	return r.spec.Count
}

// matcher evaluates a request's class and own selectors on devices.
type matcher struct {
	exprs []string
}

// newMatcher compiles the selectors; a missing class or a selector that
// does not compile is returned as a plain-words problem.
func newMatcher(classes dra.ClassLister, r exactRequest) (*matcher, string) {
	class, err := classes.Get(r.spec.DeviceClassName)
	if err != nil {
		return nil, fmt.Sprintf("DeviceClass %q does not exist; `kubectl get deviceclasses` lists the ones there are", r.spec.DeviceClassName)
	}
	m := &matcher{}
	for _, s := range class.Spec.Selectors {
		if s.CEL != nil {
			m.exprs = append(m.exprs, s.CEL.Expression)
		}
	}
	for _, s := range r.spec.Selectors {
		if s.CEL != nil {
			m.exprs = append(m.exprs, s.CEL.Expression)
		}
	}
	for _, e := range m.exprs {
		if res := dra.CELCache().GetOrCompile(e); res.Error != nil {
			return nil, fmt.Sprintf("selector %q does not compile: %s", e, res.Error.Detail)
		}
	}
	return m, ""
}

// matches reports whether every selector accepts the device. An
// evaluation error (e.g. a missing attribute) counts as no match, as for
// the scheduler on devices the selector was not written for.
func (m *matcher) matches(ctx context.Context, d *cluster.DeviceState) bool {
	in := cel.Device{
		Driver:                   d.Driver,
		AllowMultipleAllocations: d.Device.AllowMultipleAllocations,
		Attributes:               d.Device.Attributes,
		Capacity:                 d.Device.Capacity,
	}
	for _, e := range m.exprs {
		ok, _, err := dra.CELCache().GetOrCompile(e).DeviceMatches(ctx, in)
		if err != nil || !ok {
			return false
		}
	}
	return true
}

// need is what one allocation of the request would consume on the device,
// following the device's request policies the way the allocator does:
// unnamed capacity takes the policy default (all memory on our cards),
// named capacity is rounded up to the policy's step. ok is false when the
// request names a capacity the device does not have.
func need(r exactRequest, d *cluster.DeviceState) (map[resourceapi.QualifiedName]resource.Quantity, bool) {
	var requests map[resourceapi.QualifiedName]resource.Quantity
	if r.spec.Capacity != nil {
		requests = r.spec.Capacity.Requests
	}
	for name := range requests {
		if _, ok := d.Device.Capacity[name]; !ok {
			return nil, false
		}
	}
	out := map[resourceapi.QualifiedName]resource.Quantity{}
	for name, c := range d.Device.Capacity {
		q, requested := requests[name]
		switch {
		case !requested && c.RequestPolicy != nil && c.RequestPolicy.Default != nil:
			q = c.RequestPolicy.Default.DeepCopy()
		case !requested:
			q = c.Value.DeepCopy()
		case c.RequestPolicy != nil:
			q = roundUp(q, c.RequestPolicy)
		}
		out[name] = q
	}
	return out, true
}

func roundUp(q resource.Quantity, p *resourceapi.CapacityRequestPolicy) resource.Quantity {
	switch {
	case p.ValidRange != nil && p.ValidRange.Min != nil:
		if q.Cmp(*p.ValidRange.Min) < 0 {
			return p.ValidRange.Min.DeepCopy()
		}
		if p.ValidRange.Step == nil || p.ValidRange.Step.Value() <= 0 {
			return q
		}
		min, step := p.ValidRange.Min.Value(), p.ValidRange.Step.Value()
		n := (q.Value() - min + step - 1) / step
		return *resource.NewQuantity(min+n*step, q.Format)
	case len(p.ValidValues) > 0:
		for _, v := range p.ValidValues {
			if q.Cmp(v) <= 0 {
				return v.DeepCopy()
			}
		}
	}
	return q
}

// overMax reports a capacity whose need exceeds what one allocation may
// take from the device at all (its size or the policy's maximum).
func overMax(needs map[resourceapi.QualifiedName]resource.Quantity, d *cluster.DeviceState) (resourceapi.QualifiedName, bool) {
	for name, q := range needs {
		c := d.Device.Capacity[name]
		limit := c.Value
		if p := c.RequestPolicy; p != nil && p.ValidRange != nil && p.ValidRange.Max != nil && p.ValidRange.Max.Cmp(limit) < 0 {
			limit = *p.ValidRange.Max
		}
		if q.Cmp(limit) > 0 {
			return name, true
		}
	}
	return "", false
}

// short drops our driver's domain from a qualified name: in messages
// "nvlinkDomain" reads better than "gpu.tangram.dev/nvlinkDomain".
func short(name string) string {
	return strings.TrimPrefix(name, device.DriverName+"/")
}

// quantityText writes memory in GiB/MiB, compute as a percentage and
// anything else as the quantity itself.
func quantityText(name resourceapi.QualifiedName, q resource.Quantity) string {
	switch short(string(name)) {
	case device.CapacityMemory:
		// Exact MiB when GiB with one decimal would round (7474Mi is not
		// 7.3 GiB), so the message shows what was asked or is left.
		if v := q.Value(); v%(1<<30) != 0 && v%(1<<20) == 0 && v%(1<<29) != 0 {
			return fmt.Sprintf("%d MiB", v>>20)
		}
		return cluster.FormatBytes(q.Value())
	case device.CapacityCompute:
		return fmt.Sprintf("%d%% compute", q.Value())
	}
	return q.String() + " " + short(string(name))
}

// enforcementHint explains a selector requiring a share enforcement level
// (class hard-shared-gpu.tangram.dev, and shared-gpu.tangram.dev with the
// chart value sharing.requireHardEnforcement): it lists the levels the
// devices have, so an admin sees that the nodes, not the request, fall
// short, and says which class runs the share anyway. Empty when no
// selector names the attribute.
func enforcementHint(class string, exprs []string, devices []*cluster.DeviceState) string {
	if !names(exprs, device.AttrShareEnforcement) || !slices.ContainsFunc(devices, func(d *cluster.DeviceState) bool {
		a, ok := d.Device.Attributes[device.AttrShareEnforcement]
		return !ok || a.StringValue == nil || *a.StringValue != device.ShareEnforcementHard
	}) {
		return ""
	}
	levels := attributeCounts(devices, device.AttrShareEnforcement, device.AttrShareEnforcementReason)
	other := fmt.Sprintf("or ask class %s, which also takes compute-only and advisory nodes (a tenant can exceed its share there)", device.SharedDeviceClassName)
	switch class {
	case device.SharedDeviceClassName:
		other = "or set the chart value sharing.requireHardEnforcement=false (the default), with which this class also takes compute-only and advisory nodes"
	case device.HardSharedDeviceClassName:
	default:
		other = fmt.Sprintf("or ask class %s, which also takes compute-only and advisory nodes", device.SharedDeviceClassName)
	}
	return fmt.Sprintf("; class %s requires a %s/%s level of hard, which the devices do not have (they are: %s): "+
		"hard enforcement needs driver 615+ whose NVML has per-cgroup memory limits, no card in MIG mode, cgroup v2 and dmem enabled down to the kubelet's pod cgroups (docs/enforcement.md), %s",
		class, device.DriverName, device.AttrShareEnforcement, levels, other)
}

// backendHint explains a selector on the nodes' sharing backend: the
// shared classes take only cards of one backend (the chart's
// sharing.backend). Empty when no selector names the attribute.
func backendHint(class string, exprs []string, devices []*cluster.DeviceState) string {
	if !names(exprs, device.AttrShareBackend) {
		return ""
	}
	return fmt.Sprintf("; class %s selects cards by the nodes' sharing backend (%s/%s, set by the admin with the chart value sharing.backend); the devices have: %s",
		class, device.DriverName, device.AttrShareBackend, attributeCounts(devices, device.AttrShareBackend, ""))
}

func names(exprs []string, attr string) bool {
	for _, e := range exprs {
		if strings.Contains(e, attr) {
			return true
		}
	}
	return false
}

// attributeCounts is "2 advisory (driver-before-615), 1 hard": how many
// devices have each value of attr (with reason's value in parentheses).
func attributeCounts(devices []*cluster.DeviceState, attr, reason string) string {
	counts := map[string]int{}
	for _, d := range devices {
		value := "none published"
		if a, ok := d.Device.Attributes[resourceapi.QualifiedName(attr)]; ok && a.StringValue != nil {
			value = *a.StringValue
		}
		if a, ok := d.Device.Attributes[resourceapi.QualifiedName(reason)]; reason != "" && ok && a.StringValue != nil {
			value += " (" + *a.StringValue + ")"
		}
		counts[value]++
	}
	var parts []string
	for _, value := range slices.Sorted(maps.Keys(counts)) {
		parts = append(parts, fmt.Sprintf("%d %s", counts[value], value))
	}
	return strings.Join(parts, ", ")
}
