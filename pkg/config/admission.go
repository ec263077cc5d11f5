package config

import (
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/tangram-gpu/tangram/api/gpu/v1alpha1"
	"github.com/tangram-gpu/tangram/pkg/device"
)

// ValidateClaimSpec checks every gpu.tangram.dev config of a ResourceClaim
// (or ResourceClaimTemplate) spec, with the same rules the kubelet plugin
// applies at prepare time, and refuses a config that names a sharing
// backend (the admin's choice, TenantBackendDetail). Paths start at spec.devices.config; pass a
// template's prefix (spec.spec) via base, or nil for a claim.
func ValidateClaimSpec(spec *resourceapi.ResourceClaimSpec, base *field.Path) field.ErrorList {
	if base == nil {
		base = field.NewPath("spec")
	}
	var errs field.ErrorList
	for i, c := range spec.Devices.Config {
		entryErrs := validateOpaque(c.Opaque, base.Child("devices", "config").Index(i))
		if len(entryErrs) == 0 {
			entryErrs = ValidateTenantConfig(c.Opaque, base.Child("devices", "config").Index(i))
		}
		errs = append(errs, entryErrs...)
	}
	return errs
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
