package config

import (
	"fmt"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/tangram-gpu/tangram/api/gpu/v1alpha1"
	"github.com/tangram-gpu/tangram/pkg/device"
)

// ValidateClaimSpec checks every gpu.tangram.dev config of a ResourceClaim
// (or ResourceClaimTemplate) spec, with the same rules the kubelet plugin
// applies at prepare time. Paths start at spec.devices.config; pass a
// template's prefix (spec.spec) via base, or nil for a claim.
func ValidateClaimSpec(spec *resourceapi.ResourceClaimSpec, base *field.Path) field.ErrorList {
	if base == nil {
		base = field.NewPath("spec")
	}
	var errs field.ErrorList
	for i, c := range spec.Devices.Config {
		errs = append(errs, validateOpaque(c.Opaque, base.Child("devices", "config").Index(i))...)
	}
	if len(errs) > 0 {
		return errs
	}
	return ValidateShareBackends(spec, base)
}

// ValidateShareBackends rejects a claim whose requests for shares (those
// naming a memory capacity) resolve, by the claim's configs, to different
// sharing backends: the plugin refuses mps and none shares on one card,
// and the claim's shares may land on one card. Configs of the DeviceClass
// are not seen here; the plugin's own check covers them.
func ValidateShareBackends(spec *resourceapi.ResourceClaimSpec, base *field.Path) field.ErrorList {
	var names []string
	for _, req := range spec.Devices.Requests {
		if req.Exactly != nil && asksForShare(req.Exactly.Capacity) {
			names = append(names, req.Name)
		}
		for _, sub := range req.FirstAvailable {
			if asksForShare(sub.Capacity) {
				names = append(names, req.Name+"/"+sub.Name)
			}
		}
	}
	if len(names) < 2 {
		return nil
	}
	configs := make([]resourceapi.DeviceAllocationConfiguration, 0, len(spec.Devices.Config))
	for _, c := range spec.Devices.Config {
		configs = append(configs, resourceapi.DeviceAllocationConfiguration{
			Source: resourceapi.AllocationConfigSourceClaim, Requests: c.Requests, DeviceConfiguration: c.DeviceConfiguration})
	}
	resolved, err := Resolve(configs, RequestNamesOf(spec))
	if err != nil {
		// A config naming a missing request: the API server reports it.
		return nil
	}
	first := names[0]
	firstBackend := backendOf(resolved.For(first))
	for _, name := range names[1:] {
		if b := backendOf(resolved.For(name)); b != firstBackend {
			return field.ErrorList{field.Invalid(base.Child("devices", "config"), string(b), fmt.Sprintf(
				"requests %q (sharing backend %s) and %q (sharing backend %s) both ask for GPU shares, and shares of one card must all use one backend; "+
					"give every share request of the claim the same sharing.backend, or split them into separate claims", first, firstBackend, name, b))}
		}
	}
	return nil
}

func asksForShare(c *resourceapi.CapacityRequirements) bool {
	if c == nil {
		return false
	}
	_, ok := c.Requests[resourceapi.QualifiedName(device.CapacityMemory)]
	return ok
}

func backendOf(c *v1alpha1.GpuConfig) v1alpha1.SharingBackend {
	if c.Sharing == nil || c.Sharing.Backend == "" {
		return v1alpha1.DefaultBackend
	}
	return c.Sharing.Backend
}

// ValidateDeviceClassSpec checks every gpu.tangram.dev config of a
// DeviceClass spec. Paths start at spec.config.
func ValidateDeviceClassSpec(spec *resourceapi.DeviceClassSpec) field.ErrorList {
	var errs field.ErrorList
	for i, c := range spec.Config {
		errs = append(errs, validateOpaque(c.Opaque, field.NewPath("spec", "config").Index(i))...)
	}
	return errs
}

func validateOpaque(opaque *resourceapi.OpaqueDeviceConfiguration, path *field.Path) field.ErrorList {
	if opaque == nil || opaque.Driver != device.DriverName {
		return nil
	}
	return v1alpha1.ValidateOpaqueConfigFields(opaque.Parameters.Raw, path.Child("opaque", "parameters"))
}
