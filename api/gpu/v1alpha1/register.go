package v1alpha1

import (
	"bytes"
	"errors"
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer/json"
	"k8s.io/apimachinery/pkg/util/validation/field"
	kjson "sigs.k8s.io/json"
)

const (
	// GroupName is the API group of the config, equal to the DRA driver
	// name (pkg/device.DriverName; a test there holds them equal, so the
	// API depends on nothing of the implementation).
	GroupName = "gpu.tangram.dev"
	// Version is the API version of this package.
	Version = "v1alpha1"
	// Kind is the only kind of this API.
	Kind = "GpuConfig"
)

var (
	// SchemeGroupVersion is gpu.tangram.dev/v1alpha1.
	SchemeGroupVersion = schema.GroupVersion{Group: GroupName, Version: Version}
	// APIVersion is the apiVersion string users write.
	APIVersion = SchemeGroupVersion.String()

	// Scheme knows GpuConfig; codecs built on it decode only this kind.
	Scheme = runtime.NewScheme()

	strictDecoder  runtime.Decoder
	lenientDecoder runtime.Decoder
)

func init() {
	Scheme.AddKnownTypes(SchemeGroupVersion, &GpuConfig{})
	strictDecoder = json.NewSerializerWithOptions(json.DefaultMetaFactory, Scheme, Scheme,
		json.SerializerOptions{Strict: true})
	lenientDecoder = json.NewSerializerWithOptions(json.DefaultMetaFactory, Scheme, Scheme,
		json.SerializerOptions{})
}

// Decode strictly decodes user-written parameters (JSON): apiVersion must be
// gpu.tangram.dev/v1alpha1, kind GpuConfig, and unknown or duplicate fields
// are errors. It does not fill defaults or validate; see Parse.
func Decode(raw []byte) (*GpuConfig, error) {
	return decode(raw, strictDecoder)
}

// DecodeLenient decodes parameters the driver wrote itself, e.g. from a
// checkpoint: unknown fields are ignored, apiVersion and kind still checked.
func DecodeLenient(raw []byte) (*GpuConfig, error) {
	return decode(raw, lenientDecoder)
}

// Parse is Decode followed by Normalize and Validate: the effective config
// of user input, or an error saying what to fix.
func Parse(raw []byte) (*GpuConfig, error) {
	cfg, err := Decode(raw)
	if err != nil {
		return nil, err
	}
	cfg.Normalize()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return cfg, nil
}

// ValidateOpaqueConfig checks opaque parameters exactly as the kubelet plugin
// will at prepare time; meant for an admission webhook.
func ValidateOpaqueConfig(raw []byte) error {
	_, err := Parse(raw)
	return err
}

// ValidateOpaqueConfigFields is ValidateOpaqueConfig with every problem as a
// field error under base, the path of the parameters in the admitted object
// (e.g. spec.devices.config[0].opaque.parameters), as API server admission
// responses report them.
func ValidateOpaqueConfigFields(raw []byte, base *field.Path) field.ErrorList {
	cfg, err := decodeAt(raw, strictDecoder, base)
	var fieldErrs fieldErrors
	switch {
	case errors.As(err, &fieldErrs):
		return field.ErrorList(fieldErrs)
	case err != nil:
		return field.ErrorList{field.Invalid(base, field.OmitValueType{}, err.Error())}
	}
	cfg.Normalize()
	return cfg.ValidateFields(base)
}

// fieldErrors is a field.ErrorList as an error, one error per line.
type fieldErrors field.ErrorList

func (e fieldErrors) Error() string {
	lines := make([]string, len(e))
	for i, err := range e {
		lines[i] = err.Error()
	}
	return strings.Join(lines, "\n")
}

func asError(errs field.ErrorList) error {
	if len(errs) == 0 {
		return nil
	}
	return fieldErrors(errs)
}

func decode(raw []byte, decoder runtime.Decoder) (*GpuConfig, error) {
	return decodeAt(raw, decoder, nil)
}

// decodeAt decodes raw; apiVersion and kind errors are fieldErrors with
// paths under base (nil: relative to the GpuConfig).
func decodeAt(raw []byte, decoder runtime.Decoder, base *field.Path) (*GpuConfig, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 {
		return nil, fmt.Errorf("parameters are empty: expected a JSON object with apiVersion %q and kind %q", APIVersion, Kind)
	}
	if raw[0] != '{' {
		return nil, fmt.Errorf("parameters must be a JSON object with apiVersion %q and kind %q, got %s", APIVersion, Kind, abbreviate(raw))
	}
	if err := checkTypeMeta(raw, base); err != nil {
		return nil, err
	}
	obj, _, err := decoder.Decode(raw, nil, nil)
	if err != nil {
		return nil, fmt.Errorf("decoding %s: %w", Kind, err)
	}
	cfg, ok := obj.(*GpuConfig)
	if !ok {
		// The scheme knows only GpuConfig, so this means a programming error.
		return nil, fmt.Errorf("decoding %s: got unexpected type %T", Kind, obj)
	}
	return cfg, nil
}

// checkTypeMeta gives precise errors for the most common mistakes before the
// generic serializer reports them less readably. Matching is case-sensitive,
// like the Kubernetes API.
func checkTypeMeta(raw []byte, base *field.Path) error {
	var meta struct {
		APIVersion *string `json:"apiVersion"`
		Kind       *string `json:"kind"`
	}
	if err := kjson.UnmarshalCaseSensitivePreserveInts(raw, &meta); err != nil {
		return fmt.Errorf("parameters are not a valid JSON object: %w", err)
	}
	var errs field.ErrorList
	switch {
	case meta.APIVersion == nil || *meta.APIVersion == "":
		errs = append(errs, field.Required(child(base, "apiVersion"), fmt.Sprintf("must be %q", APIVersion)))
	case *meta.APIVersion != APIVersion:
		errs = append(errs, field.NotSupported(child(base, "apiVersion"), *meta.APIVersion, []string{APIVersion}))
	}
	switch {
	case meta.Kind == nil || *meta.Kind == "":
		errs = append(errs, field.Required(child(base, "kind"), fmt.Sprintf("must be %q", Kind)))
	case *meta.Kind != Kind:
		errs = append(errs, field.NotSupported(child(base, "kind"), *meta.Kind, []string{Kind}))
	}
	return asError(errs)
}

// child is base.Child(name), or a root path for a nil base.
func child(base *field.Path, name string) *field.Path {
	if base == nil {
		return field.NewPath(name)
	}
	return base.Child(name)
}

// abbreviate keeps error messages short when users paste large documents.
func abbreviate(raw []byte) string {
	const limit = 40
	if len(raw) > limit {
		return fmt.Sprintf("%q...", raw[:limit])
	}
	return fmt.Sprintf("%q", raw)
}
