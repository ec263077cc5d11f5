// Package config resolves the effective GpuConfig of every request of an
// allocated ResourceClaim.
//
// The allocation result lists the opaque configs that apply to the claim:
// those of the DeviceClasses (Source FromClass) and those written in the
// claim (FromClaim). For each request the class configs apply first, then the
// claim configs, each in its listed order, and the last one that applies
// wins as a whole (configs are not merged field by field), with one
// exception: a claim's config may lower the class's compute cap for
// time-shared MPS shares (defaultActiveThreadPercentage), never raise or
// drop it. A request with no config gets v1alpha1.Default(). Configs of
// other drivers are ignored.
//
// ValidateClaimSpec and ValidateDeviceClassSpec apply the same checks to
// objects being admitted, with field paths, for the controller's webhook.
//
// Typical use in prepare:
//
//	resolved, err := config.Resolve(claim.Status.Allocation.Devices.Config, config.RequestNames(claim))
//	...
//	cfg := resolved.For(result.Request)
package config

import (
	"fmt"
	"slices"
	"strings"

	resourceapi "k8s.io/api/resource/v1"

	"github.com/tangram-gpu/tangram/api/gpu/v1alpha1"
	"github.com/tangram-gpu/tangram/pkg/device"
)

// Resolved maps request names ("req" or "req/sub") to their effective,
// normalized and validated config.
type Resolved map[string]*v1alpha1.GpuConfig

// For returns the config of the request a device result names. A
// subrequest without an entry of its own falls back to its main request, and
// a request without any config gets the default. The result is never nil and
// is the caller's to modify.
func (r Resolved) For(request string) *v1alpha1.GpuConfig {
	if c, ok := r[request]; ok {
		return c.DeepCopy()
	}
	if main, _, isSub := strings.Cut(request, "/"); isSub {
		if c, ok := r[main]; ok {
			return c.DeepCopy()
		}
	}
	return v1alpha1.Default()
}

// RequestNames lists the names a config or result of the claim may use: each
// request's name and, for requests with firstAvailable, "<request>/<subrequest>".
func RequestNames(claim *resourceapi.ResourceClaim) []string {
	return RequestNamesOf(&claim.Spec)
}

// RequestNamesOf is RequestNames of a claim spec (or a template's).
func RequestNamesOf(spec *resourceapi.ResourceClaimSpec) []string {
	var out []string
	for _, req := range spec.Devices.Requests {
		out = append(out, req.Name)
		for _, sub := range req.FirstAvailable {
			out = append(out, req.Name+"/"+sub.Name)
		}
	}
	return out
}

// Resolve computes the effective config of every name in requestNames from
// the allocation's configs. It fails on a config of ours that does not parse
// or validate, or that names a request the claim does not have; the error
// says which config and what to fix.
func Resolve(configs []resourceapi.DeviceAllocationConfiguration, requestNames []string) (Resolved, error) {
	type parsed struct {
		source   resourceapi.AllocationConfigSource
		requests []string
		cfg      *v1alpha1.GpuConfig
	}
	var fromClass, fromClaim []parsed
	for _, c := range configs {
		if c.Opaque == nil || c.Opaque.Driver != device.DriverName {
			continue
		}
		where := describe(c.Source, c.Requests)
		for _, r := range c.Requests {
			if !requestExists(r, requestNames) {
				return nil, fmt.Errorf("%s names request %q, which the claim does not have (its requests: %s); "+
					"fix the requests list of that config", where, r, quoteList(requestNames))
			}
		}
		cfg, err := v1alpha1.Parse(c.Opaque.Parameters.Raw)
		if err != nil {
			return nil, fmt.Errorf("invalid %s: %w", where, err)
		}
		p := parsed{source: c.Source, requests: c.Requests, cfg: cfg}
		switch c.Source {
		case resourceapi.AllocationConfigSourceClass:
			fromClass = append(fromClass, p)
		case resourceapi.AllocationConfigSourceClaim:
			fromClaim = append(fromClaim, p)
		default:
			return nil, fmt.Errorf("%s has unknown source %q (expected %q or %q)", where, c.Source,
				resourceapi.AllocationConfigSourceClass, resourceapi.AllocationConfigSourceClaim)
		}
	}

	ordered := append(fromClass, fromClaim...)
	out := make(Resolved, len(requestNames))
	for _, name := range requestNames {
		cfg := v1alpha1.Default()
		var classCap *int32
		for _, p := range ordered {
			if appliesTo(p.requests, name) {
				cfg = p.cfg
				if p.source == resourceapi.AllocationConfigSourceClass {
					classCap = defaultCap(p.cfg)
				}
			}
		}
		out[name] = capAt(cfg.DeepCopy(), classCap)
	}
	return out, nil
}

// defaultCap is a config's sharing.mps.defaultActiveThreadPercentage.
func defaultCap(c *v1alpha1.GpuConfig) *int32 {
	if c.Sharing == nil || c.Sharing.MPS == nil {
		return nil
	}
	return c.Sharing.MPS.DefaultActiveThreadPercentage
}

// capAt keeps an admin's compute cap for time-shared shares (the class
// config's defaultActiveThreadPercentage) when a claim's config won: the
// claim may lower it, never raise or drop it (a tenant's time-shared share
// would otherwise take the SMs the admin meant for the card's other
// shares). Only MPS shares have a cap.
func capAt(c *v1alpha1.GpuConfig, classCap *int32) *v1alpha1.GpuConfig {
	if classCap == nil || c.Sharing == nil || c.Sharing.Backend != v1alpha1.BackendMPS {
		return c
	}
	if c.Sharing.MPS == nil {
		c.Sharing.MPS = &v1alpha1.MPSSettings{}
	}
	if p := c.Sharing.MPS.DefaultActiveThreadPercentage; p == nil || *p > *classCap {
		limit := *classCap
		c.Sharing.MPS.DefaultActiveThreadPercentage = &limit
	}
	return c
}

// appliesTo follows the API: an empty list means every request; a main
// request name covers all its subrequests.
func appliesTo(requests []string, name string) bool {
	if len(requests) == 0 {
		return true
	}
	main, _, _ := strings.Cut(name, "/")
	return slices.Contains(requests, name) || slices.Contains(requests, main)
}

func requestExists(ref string, requestNames []string) bool {
	for _, name := range requestNames {
		main, _, _ := strings.Cut(name, "/")
		if ref == name || ref == main {
			return true
		}
	}
	return false
}

func describe(source resourceapi.AllocationConfigSource, requests []string) string {
	var from string
	switch source {
	case resourceapi.AllocationConfigSourceClass:
		from = "DeviceClass"
	case resourceapi.AllocationConfigSourceClaim:
		from = "claim"
	default:
		from = fmt.Sprintf("%q", source)
	}
	scope := "all requests"
	if len(requests) > 0 {
		scope = "requests " + quoteList(requests)
	}
	return fmt.Sprintf("%s config from the %s (%s)", device.DriverName, from, scope)
}

func quoteList(items []string) string {
	if len(items) == 0 {
		return "none"
	}
	q := make([]string, len(items))
	for i, s := range items {
		q[i] = fmt.Sprintf("%q", s)
	}
	return strings.Join(q, ", ")
}
