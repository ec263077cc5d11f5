package config

import (
	"fmt"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/tangram-gpu/tangram/api/gpu/v1alpha1"
	"github.com/tangram-gpu/tangram/pkg/device"
)

// TenantBackendDetail is why a claim may not name a sharing backend; the
// webhook, the chart's ValidatingAdmissionPolicy and the plugin say it.
const TenantBackendDetail = "the sharing backend is the cluster admin's choice, per node (the shareBackend device attribute, chart value sharing.backend) " +
	"and per DeviceClass, never a claim's: a share with another backend than the card's other shares would break them; " +
	"remove sharing.backend from the claim's GpuConfig (sharing.mps settings stay allowed)"

// ValidateTenantConfig refuses what a claim's (or template's) config may
// not set: sharing.backend, which decides how a card's shares are kept
// apart. A config that does not decode is left to the strict validation.
func ValidateTenantConfig(opaque *resourceapi.OpaqueDeviceConfiguration, path *field.Path) field.ErrorList {
	if opaque == nil || opaque.Driver != device.DriverName {
		return nil
	}
	cfg, err := v1alpha1.DecodeLenient(opaque.Parameters.Raw)
	if err != nil || cfg.Sharing == nil || cfg.Sharing.Backend == "" {
		return nil
	}
	return field.ErrorList{field.Forbidden(path.Child("opaque", "parameters", "sharing", "backend"), TenantBackendDetail)}
}

// CheckAllocationBackends is the plugin's check, at prepare, of the
// allocation's configs against the node's sharing backend (nodeBackend,
// "mps" or "none"; empty: the node names none and the configs decide, as
// before nodes published one): a claim's config naming a backend is
// refused whatever it names (admission should have refused it already; a
// claim created while the policy was off gets here), and a DeviceClass
// config naming another backend than the node's is refused (the class does
// not select the shareBackend its config names).
func CheckAllocationBackends(configs []resourceapi.DeviceAllocationConfiguration, nodeBackend, nodeName string) error {
	for i, c := range configs {
		if c.Opaque == nil || c.Opaque.Driver != device.DriverName {
			continue
		}
		cfg, err := v1alpha1.DecodeLenient(c.Opaque.Parameters.Raw)
		if err != nil || cfg.Sharing == nil || cfg.Sharing.Backend == "" {
			// Resolve reports configs that do not decode.
			continue
		}
		backend := string(cfg.Sharing.Backend)
		switch c.Source {
		case resourceapi.AllocationConfigSourceClaim:
			return fmt.Errorf("the claim's config %d (%s) names sharing.backend %q: %s", i, describe(c.Source, c.Requests), backend, TenantBackendDetail)
		case resourceapi.AllocationConfigSourceClass:
			if nodeBackend != "" && backend != nodeBackend {
				return fmt.Errorf("the %s names sharing.backend %q, but node %s shares its cards with backend %q (its shareBackend attribute); "+
					"the DeviceClass must select only cards of its backend (a selector on device.attributes[%q].%s == %q, as the chart's shared classes do) or drop sharing.backend from its config",
					describe(c.Source, c.Requests), backend, nodeName, nodeBackend, device.DriverName, device.AttrShareBackend, backend)
			}
		}
	}
	return nil
}
