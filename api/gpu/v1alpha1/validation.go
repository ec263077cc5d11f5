package v1alpha1

import (
	"fmt"

	"k8s.io/apimachinery/pkg/util/validation/field"
)

// Default returns the config used for requests that have none: backend mps,
// no active-thread cap.
func Default() *GpuConfig {
	c := &GpuConfig{}
	c.Normalize()
	return c
}

// Normalize fills defaults in place: apiVersion, kind and sharing.backend.
// It never changes a value the user set, so Validate still reports it.
func (c *GpuConfig) Normalize() {
	c.APIVersion = APIVersion
	c.Kind = Kind
	if c.Sharing == nil {
		c.Sharing = &Sharing{}
	}
	if c.Sharing.Backend == "" {
		c.Sharing.Backend = DefaultBackend
	}
}

// Validate reports every invalid field, each with its path inside the
// GpuConfig. An empty backend counts as the default, so Validate may run
// before or after Normalize. Errors are reported one per line.
func (c *GpuConfig) Validate() error {
	return asError(c.ValidateFields(nil))
}

// ValidateFields is Validate as a field.ErrorList with paths under base
// (nil: relative to the GpuConfig).
func (c *GpuConfig) ValidateFields(base *field.Path) field.ErrorList {
	var errs field.ErrorList
	if c.APIVersion != "" && c.APIVersion != APIVersion {
		errs = append(errs, field.NotSupported(child(base, "apiVersion"), c.APIVersion, []string{APIVersion}))
	}
	if c.Kind != "" && c.Kind != Kind {
		errs = append(errs, field.NotSupported(child(base, "kind"), c.Kind, []string{Kind}))
	}
	if c.Sharing != nil {
		errs = append(errs, c.Sharing.validate(child(base, "sharing"))...)
	}
	return errs
}

func (s *Sharing) validate(path *field.Path) field.ErrorList {
	var errs field.ErrorList
	backend := s.Backend
	if backend == "" {
		backend = DefaultBackend
	}
	switch backend {
	case BackendMPS, BackendNone:
	default:
		supported := make([]string, len(SupportedBackends))
		for i, b := range SupportedBackends {
			supported[i] = string(b)
		}
		errs = append(errs, field.NotSupported(path.Child("backend"), string(s.Backend), supported))
	}
	if s.MPS != nil {
		mpsPath := path.Child("mps")
		// With an unsupported backend the error above says enough.
		if backend == BackendNone {
			errs = append(errs, field.Forbidden(mpsPath, fmt.Sprintf("only allowed when sharing.backend is %q", BackendMPS)))
		}
		if p := s.MPS.DefaultActiveThreadPercentage; p != nil && (*p < 1 || *p > 100) {
			errs = append(errs, field.Invalid(mpsPath.Child("defaultActiveThreadPercentage"), *p,
				"must be between 1 and 100 (percent of the card's streaming multiprocessors)"))
		}
	}
	return errs
}
