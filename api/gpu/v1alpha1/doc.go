// Package v1alpha1 is the opaque device configuration of the Tangram DRA
// driver: apiVersion gpu.tangram.dev/v1alpha1, kind GpuConfig.
//
// A GpuConfig is placed in the opaque `config` of a DeviceClass or of a
// ResourceClaim (driver gpu.tangram.dev). It chooses how the shares of a card
// are isolated from each other and carries the few share defaults that a user
// can explain. Whole-card results ignore the sharing settings.
//
// Entry points:
//
//   - Parse(raw) is what the kubelet plugin calls on user input: strict
//     decoding (unknown fields, wrong apiVersion or kind rejected), then
//     Normalize and Validate.
//   - ValidateOpaqueConfig(raw) is the same check for an admission webhook.
//   - DecodeLenient(raw) reads configs the driver wrote itself (checkpoints):
//     unknown fields are ignored so a downgrade can still read them.
//
// Validation errors name the field path inside the GpuConfig, for example
// `sharing.backend: Unsupported value: "foo": supported values: "mps", "none"`.
//
// Deep copies are generated (zz_generated.deepcopy.go, make generate-api).
//
// +kubebuilder:object:generate=true
package v1alpha1
