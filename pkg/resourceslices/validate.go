package resourceslices

import (
	"errors"
	"fmt"
	"regexp"
	"strings"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/dynamic-resource-allocation/resourceslice"
)

// The API server's validation lives in k8s.io/kubernetes, which Tangram
// does not depend on. ValidateDevice and ValidateResourceSlice check the
// rules our output can break, as the resource.k8s.io/v1 type documentation
// states them, so a bad slice fails in our tests instead of at publish time.

// semverPattern is semver.org 2.0.0: MAJOR.MINOR.PATCH without leading
// zeros, optional pre-release and build metadata.
var semverPattern = regexp.MustCompile(`^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)` +
	`(-(0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*)(\.(0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*))*)?` +
	`(\+[0-9a-zA-Z-]+(\.[0-9a-zA-Z-]+)*)?$`)

var cIdentifier = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// ValidateResourceSlice checks one ResourceSlice against the API's rules
// for the fields Tangram sets.
func ValidateResourceSlice(s *resourceapi.ResourceSlice) error {
	var errs []error
	if errs2 := validation.IsDNS1123Subdomain(s.Spec.Driver); len(errs2) > 0 {
		errs = append(errs, fmt.Errorf("spec.driver %q: %s", s.Spec.Driver, strings.Join(errs2, "; ")))
	}
	if s.Spec.Pool.Name == "" {
		errs = append(errs, errors.New("spec.pool.name is empty"))
	}
	if s.Spec.Pool.ResourceSliceCount <= 0 {
		errs = append(errs, fmt.Errorf("spec.pool.resourceSliceCount %d must be greater than zero", s.Spec.Pool.ResourceSliceCount))
	}
	if s.Spec.Pool.Generation < 0 {
		errs = append(errs, fmt.Errorf("spec.pool.generation %d must not be negative", s.Spec.Pool.Generation))
	}
	selections := 0
	for _, set := range []bool{s.Spec.NodeName != nil, s.Spec.NodeSelector != nil, s.Spec.AllNodes != nil, s.Spec.PerDeviceNodeSelection != nil} {
		if set {
			selections++
		}
	}
	if selections != 1 {
		errs = append(errs, fmt.Errorf("exactly one of nodeName, nodeSelector, allNodes, perDeviceNodeSelection must be set, %d are", selections))
	}
	if limit := MaxDevicesPerSlice(s.Spec.Devices); len(s.Spec.Devices) > limit {
		errs = append(errs, fmt.Errorf("spec.devices has %d entries, more than the limit of %d", len(s.Spec.Devices), limit))
	}
	if len(s.Spec.Devices) > 0 && len(s.Spec.SharedCounters) > 0 {
		errs = append(errs, errors.New("only one of spec.devices and spec.sharedCounters may be set"))
	}
	errs = append(errs, validateCounterSets(s.Spec.SharedCounters)...)
	seen := make(map[string]bool, len(s.Spec.Devices))
	for i := range s.Spec.Devices {
		d := &s.Spec.Devices[i]
		if seen[d.Name] {
			errs = append(errs, fmt.Errorf("spec.devices[%d]: duplicate name %q", i, d.Name))
		}
		seen[d.Name] = true
		if err := ValidateDevice(d); err != nil {
			errs = append(errs, fmt.Errorf("spec.devices[%d]: %w", i, err))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("ResourceSlice %s: %w", s.Name, err)
	}
	return nil
}

// ValidateDevice checks one device against the API's rules.
func ValidateDevice(d *resourceapi.Device) error {
	var errs []error
	if !isDNSLabel(d.Name) {
		errs = append(errs, fmt.Errorf("name %q is not a DNS label", d.Name))
	}
	if n := len(d.Attributes) + len(d.Capacity); n > resourceapi.ResourceSliceMaxAttributesAndCapacitiesPerDevice {
		errs = append(errs, fmt.Errorf("%d attributes and capacities, more than the limit of %d", n, resourceapi.ResourceSliceMaxAttributesAndCapacitiesPerDevice))
	}
	for name, attr := range d.Attributes {
		if err := validateQualifiedName(name); err != nil {
			errs = append(errs, fmt.Errorf("attribute %q: %w", name, err))
		}
		if err := validateAttribute(attr); err != nil {
			errs = append(errs, fmt.Errorf("attribute %q: %w", name, err))
		}
	}
	multi := d.AllowMultipleAllocations != nil && *d.AllowMultipleAllocations
	for name, c := range d.Capacity {
		if err := validateQualifiedName(name); err != nil {
			errs = append(errs, fmt.Errorf("capacity %q: %w", name, err))
		}
		if c.RequestPolicy == nil {
			continue
		}
		if !multi {
			errs = append(errs, fmt.Errorf("capacity %q: requestPolicy needs allowMultipleAllocations", name))
			continue
		}
		if err := validateRequestPolicy(c.Value, c.RequestPolicy); err != nil {
			errs = append(errs, fmt.Errorf("capacity %q: %w", name, err))
		}
	}
	if n := len(d.ConsumesCounters); n > resourceapi.ResourceSliceMaxDeviceCounterConsumptionsPerDevice {
		errs = append(errs, fmt.Errorf("%d counter consumptions, more than the limit of %d", n, resourceapi.ResourceSliceMaxDeviceCounterConsumptionsPerDevice))
	}
	sets := map[string]bool{}
	for _, c := range d.ConsumesCounters {
		if sets[c.CounterSet] {
			errs = append(errs, fmt.Errorf("counter set %q consumed twice", c.CounterSet))
		}
		sets[c.CounterSet] = true
		errs = append(errs, validateCounters("consumesCounters["+c.CounterSet+"]", c.CounterSet, c.Counters, resourceapi.ResourceSliceMaxCountersPerDeviceCounterConsumption)...)
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("device %s: %w", d.Name, err)
	}
	return nil
}

// validateCounterSets applies the API's rules to a slice's counter sets:
// at most 8, names DNS labels and unique, at most 32 counters each.
func validateCounterSets(sets []resourceapi.CounterSet) []error {
	var errs []error
	if len(sets) > resourceapi.ResourceSliceMaxCounterSets {
		errs = append(errs, fmt.Errorf("spec.sharedCounters has %d sets, more than the limit of %d", len(sets), resourceapi.ResourceSliceMaxCounterSets))
	}
	seen := map[string]bool{}
	for _, set := range sets {
		if seen[set.Name] {
			errs = append(errs, fmt.Errorf("spec.sharedCounters: duplicate name %q", set.Name))
		}
		seen[set.Name] = true
		if len(set.Counters) == 0 {
			errs = append(errs, fmt.Errorf("counter set %q has no counters", set.Name))
		}
		errs = append(errs, validateCounters("spec.sharedCounters", set.Name, set.Counters, resourceapi.ResourceSliceMaxCountersPerCounterSet)...)
	}
	return errs
}

func validateCounters(field, set string, counters map[string]resourceapi.Counter, limit int) []error {
	var errs []error
	if !isDNSLabel(set) {
		errs = append(errs, fmt.Errorf("%s: counter set name %q is not a DNS label", field, set))
	}
	if len(counters) > limit {
		errs = append(errs, fmt.Errorf("%s: counter set %q has %d counters, more than the limit of %d", field, set, len(counters), limit))
	}
	for name := range counters {
		if !isDNSLabel(name) {
			errs = append(errs, fmt.Errorf("%s: counter %q of set %q is not a DNS label", field, name, set))
		}
	}
	return errs
}

// ValidatePool checks what spans a pool's slices: counter set names unique
// across the pool, and every counter a device consumes defined in a set of
// the pool (the allocator treats a pool breaking either as invalid and
// allocates nothing from it).
func ValidatePool(poolSlices []resourceslice.Slice) error {
	sets := map[string]map[string]resourceapi.Counter{}
	var errs []error
	for _, s := range poolSlices {
		for _, set := range s.SharedCounters {
			if _, dup := sets[set.Name]; dup {
				errs = append(errs, fmt.Errorf("counter set %q is defined twice in the pool", set.Name))
			}
			sets[set.Name] = set.Counters
		}
	}
	for _, s := range poolSlices {
		for _, d := range s.Devices {
			for _, c := range d.ConsumesCounters {
				set, ok := sets[c.CounterSet]
				if !ok {
					errs = append(errs, fmt.Errorf("device %s consumes counter set %q, which the pool does not define", d.Name, c.CounterSet))
					continue
				}
				for name := range c.Counters {
					if _, ok := set[name]; !ok {
						errs = append(errs, fmt.Errorf("device %s consumes counter %q, which counter set %q does not define", d.Name, name, c.CounterSet))
					}
				}
			}
		}
	}
	return errors.Join(errs...)
}

func validateQualifiedName(name resourceapi.QualifiedName) error {
	domain, id, qualified := strings.Cut(string(name), "/")
	if !qualified {
		id = domain
	} else {
		if len(domain) > resourceapi.DeviceMaxDomainLength {
			return fmt.Errorf("domain longer than %d characters", resourceapi.DeviceMaxDomainLength)
		}
		if errs := validation.IsDNS1123Subdomain(domain); len(errs) > 0 {
			return fmt.Errorf("domain: %s", strings.Join(errs, "; "))
		}
	}
	if !cIdentifier.MatchString(id) {
		return fmt.Errorf("%q is not a C identifier", id)
	}
	if len(id) > resourceapi.DeviceMaxIDLength {
		return fmt.Errorf("identifier longer than %d characters", resourceapi.DeviceMaxIDLength)
	}
	return nil
}

func validateAttribute(a resourceapi.DeviceAttribute) error {
	set := 0
	for _, isSet := range []bool{a.BoolValue != nil, a.IntValue != nil, a.StringValue != nil, a.VersionValue != nil,
		a.BoolValues != nil, a.IntValues != nil, a.StringValues != nil, a.VersionValues != nil} {
		if isSet {
			set++
		}
	}
	if set != 1 {
		return fmt.Errorf("exactly one value must be set, %d are", set)
	}
	if a.StringValue != nil && len(*a.StringValue) > resourceapi.DeviceAttributeMaxValueLength {
		return fmt.Errorf("string longer than %d characters", resourceapi.DeviceAttributeMaxValueLength)
	}
	if a.VersionValue != nil {
		if len(*a.VersionValue) > resourceapi.DeviceAttributeMaxValueLength {
			return fmt.Errorf("version longer than %d characters", resourceapi.DeviceAttributeMaxValueLength)
		}
		if !semverPattern.MatchString(*a.VersionValue) {
			return fmt.Errorf("version %q is not semver 2.0.0", *a.VersionValue)
		}
	}
	return nil
}

// validateRequestPolicy applies the API's range rules: default within
// [min, max], max <= capacity, min + step <= capacity, and default and max
// a whole number of steps from min.
func validateRequestPolicy(value resource.Quantity, p *resourceapi.CapacityRequestPolicy) error {
	if len(p.ValidValues) > 0 && p.ValidRange != nil {
		return errors.New("validValues and validRange are mutually exclusive")
	}
	r := p.ValidRange
	if r == nil {
		return nil
	}
	if p.Default == nil {
		return errors.New("default is required with validRange")
	}
	if r.Min == nil {
		return errors.New("validRange.min is required")
	}
	var errs []error
	if r.Min.Cmp(value) > 0 {
		errs = append(errs, fmt.Errorf("min %s exceeds capacity %s", r.Min, &value))
	}
	if p.Default.Cmp(*r.Min) < 0 {
		errs = append(errs, fmt.Errorf("default %s is below min %s", p.Default, r.Min))
	}
	if r.Max != nil {
		if r.Min.Cmp(*r.Max) > 0 {
			errs = append(errs, fmt.Errorf("min %s exceeds max %s", r.Min, r.Max))
		}
		if r.Max.Cmp(value) > 0 {
			errs = append(errs, fmt.Errorf("max %s exceeds capacity %s", r.Max, &value))
		}
		if p.Default.Cmp(*r.Max) > 0 {
			errs = append(errs, fmt.Errorf("default %s exceeds max %s", p.Default, r.Max))
		}
	}
	if r.Step != nil {
		step := r.Step.Value()
		if step <= 0 {
			return errors.Join(append(errs, fmt.Errorf("step %s must be positive", r.Step))...)
		}
		if r.Min.Value()+step > value.Value() {
			errs = append(errs, fmt.Errorf("min %s plus one step %s exceeds capacity %s", r.Min, r.Step, &value))
		}
		if (p.Default.Value()-r.Min.Value())%step != 0 {
			errs = append(errs, fmt.Errorf("default %s is not a whole number of steps %s from min %s", p.Default, r.Step, r.Min))
		}
		if r.Max != nil && (r.Max.Value()-r.Min.Value())%step != 0 {
			errs = append(errs, fmt.Errorf("max %s is not a whole number of steps %s from min %s", r.Max, r.Step, r.Min))
		}
	}
	return errors.Join(errs...)
}
