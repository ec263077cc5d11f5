package config

import (
	"reflect"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/tangram-gpu/tangram/api/gpu/v1alpha1"
)

const (
	fromClass = resourceapi.AllocationConfigSourceClass
	fromClaim = resourceapi.AllocationConfigSourceClaim
)

func opaque(source resourceapi.AllocationConfigSource, driver, params string, requests ...string) resourceapi.DeviceAllocationConfiguration {
	return resourceapi.DeviceAllocationConfiguration{
		Source:   source,
		Requests: requests,
		DeviceConfiguration: resourceapi.DeviceConfiguration{
			Opaque: &resourceapi.OpaqueDeviceConfiguration{
				Driver:     driver,
				Parameters: runtime.RawExtension{Raw: []byte(params)},
			},
		},
	}
}

func ours(source resourceapi.AllocationConfigSource, params string, requests ...string) resourceapi.DeviceAllocationConfiguration {
	return opaque(source, "gpu.tangram.dev", params, requests...)
}

const (
	mpsCfg   = `{"apiVersion":"gpu.tangram.dev/v1alpha1","kind":"GpuConfig","sharing":{"backend":"mps"}}`
	mps50Cfg = `{"apiVersion":"gpu.tangram.dev/v1alpha1","kind":"GpuConfig","sharing":{"mps":{"defaultActiveThreadPercentage":50}}}`
	noneCfg  = `{"apiVersion":"gpu.tangram.dev/v1alpha1","kind":"GpuConfig","sharing":{"backend":"none"}}`
	mps30Cfg = `{"apiVersion":"gpu.tangram.dev/v1alpha1","kind":"GpuConfig","sharing":{"mps":{"defaultActiveThreadPercentage":30}}}`
	mps10Cfg = `{"apiVersion":"gpu.tangram.dev/v1alpha1","kind":"GpuConfig","sharing":{"mps":{"defaultActiveThreadPercentage":10}}}`
)

// summary reduces a config to what the tests compare: backend and default %.
type summary struct {
	backend v1alpha1.SharingBackend
	percent int32
}

func summarize(c *v1alpha1.GpuConfig) summary {
	s := summary{backend: c.Sharing.Backend}
	if c.Sharing.MPS != nil && c.Sharing.MPS.DefaultActiveThreadPercentage != nil {
		s.percent = *c.Sharing.MPS.DefaultActiveThreadPercentage
	}
	return s
}

func TestResolve(t *testing.T) {
	mps := summary{backend: v1alpha1.BackendMPS}
	mps50 := summary{backend: v1alpha1.BackendMPS, percent: 50}
	none := summary{backend: v1alpha1.BackendNone}
	tests := []struct {
		name     string
		configs  []resourceapi.DeviceAllocationConfiguration
		requests []string
		want     map[string]summary
		wantErr  string
	}{
		{
			name:     "no configs: defaults",
			requests: []string{"gpu"},
			want:     map[string]summary{"gpu": mps},
		},
		{
			name:     "class config applies to all requests",
			configs:  []resourceapi.DeviceAllocationConfiguration{ours(fromClass, noneCfg)},
			requests: []string{"a", "b"},
			want:     map[string]summary{"a": none, "b": none},
		},
		{
			// The admin's cap for time-shared shares holds: a claim may
			// lower it, not raise or drop it.
			name: "a claim's cap above the class's is held to the class's",
			configs: []resourceapi.DeviceAllocationConfiguration{
				ours(fromClass, mps30Cfg),
				ours(fromClaim, mps50Cfg, "a"),
				ours(fromClaim, `{"apiVersion":"gpu.tangram.dev/v1alpha1","kind":"GpuConfig"}`, "b"),
				ours(fromClaim, mps10Cfg, "c"),
			},
			requests: []string{"a", "b", "c", "d"},
			want: map[string]summary{"a": {backend: v1alpha1.BackendMPS, percent: 30}, "b": {backend: v1alpha1.BackendMPS, percent: 30},
				"c": {backend: v1alpha1.BackendMPS, percent: 10}, "d": {backend: v1alpha1.BackendMPS, percent: 30}},
		},
		{
			name: "claim config wins over class config even when listed first",
			configs: []resourceapi.DeviceAllocationConfiguration{
				ours(fromClaim, mps50Cfg, "a"),
				ours(fromClass, noneCfg),
			},
			requests: []string{"a", "b"},
			want:     map[string]summary{"a": mps50, "b": none},
		},
		{
			name: "later claim config wins as a whole",
			configs: []resourceapi.DeviceAllocationConfiguration{
				ours(fromClaim, mps50Cfg),
				ours(fromClaim, mpsCfg, "b"),
			},
			requests: []string{"a", "b"},
			want:     map[string]summary{"a": mps50, "b": mps},
		},
		{
			name: "other drivers' configs are ignored, even with unknown requests",
			configs: []resourceapi.DeviceAllocationConfiguration{
				opaque(fromClaim, "nic.example.com", `not json`, "nope"),
				ours(fromClaim, noneCfg),
			},
			requests: []string{"gpu"},
			want:     map[string]summary{"gpu": none},
		},
		{
			name:     "non-opaque config entries are ignored",
			configs:  []resourceapi.DeviceAllocationConfiguration{{Source: fromClaim}},
			requests: []string{"gpu"},
			want:     map[string]summary{"gpu": mps},
		},
		{
			name:     "main request name covers its subrequests",
			configs:  []resourceapi.DeviceAllocationConfiguration{ours(fromClaim, noneCfg, "gpu")},
			requests: []string{"gpu", "gpu/small", "gpu/large", "other"},
			want:     map[string]summary{"gpu": none, "gpu/small": none, "gpu/large": none, "other": mps},
		},
		{
			name: "subrequest config applies to that subrequest only",
			configs: []resourceapi.DeviceAllocationConfiguration{
				ours(fromClass, mps50Cfg),
				ours(fromClaim, noneCfg, "gpu/small"),
			},
			requests: []string{"gpu", "gpu/small", "gpu/large"},
			want:     map[string]summary{"gpu": mps50, "gpu/small": none, "gpu/large": mps50},
		},
		{
			name:     "config naming a missing request",
			configs:  []resourceapi.DeviceAllocationConfiguration{ours(fromClaim, noneCfg, "gpu", "gpus")},
			requests: []string{"gpu", "shared"},
			wantErr:  `gpu.tangram.dev config from the claim (requests "gpu", "gpus") names request "gpus", which the claim does not have (its requests: "gpu", "shared"); fix the requests list of that config`,
		},
		{
			name:     "config naming a missing subrequest",
			configs:  []resourceapi.DeviceAllocationConfiguration{ours(fromClaim, noneCfg, "gpu/tiny")},
			requests: []string{"gpu", "gpu/small"},
			wantErr:  `gpu.tangram.dev config from the claim (requests "gpu/tiny") names request "gpu/tiny", which the claim does not have (its requests: "gpu", "gpu/small"); fix the requests list of that config`,
		},
		{
			name:     "invalid class config",
			configs:  []resourceapi.DeviceAllocationConfiguration{ours(fromClass, `{"apiVersion":"gpu.tangram.dev/v1alpha1","kind":"GpuConfig","sharing":{"backend":"foo"}}`)},
			requests: []string{"gpu"},
			wantErr:  `invalid gpu.tangram.dev config from the DeviceClass (all requests): sharing.backend: Unsupported value: "foo": supported values: "mps", "none"`,
		},
		{
			name:     "claim config with unknown field",
			configs:  []resourceapi.DeviceAllocationConfiguration{ours(fromClaim, `{"apiVersion":"gpu.tangram.dev/v1alpha1","kind":"GpuConfig","backend":"none"}`, "gpu")},
			requests: []string{"gpu"},
			wantErr:  `invalid gpu.tangram.dev config from the claim (requests "gpu"): decoding GpuConfig: strict decoding error: unknown field "backend"`,
		},
		{
			name:     "empty parameters",
			configs:  []resourceapi.DeviceAllocationConfiguration{ours(fromClaim, ``)},
			requests: []string{"gpu"},
			wantErr:  `invalid gpu.tangram.dev config from the claim (all requests): parameters are empty: expected a JSON object with apiVersion "gpu.tangram.dev/v1alpha1" and kind "GpuConfig"`,
		},
		{
			name:     "unknown source",
			configs:  []resourceapi.DeviceAllocationConfiguration{ours("FromSomewhere", noneCfg)},
			requests: []string{"gpu"},
			wantErr:  `gpu.tangram.dev config from the "FromSomewhere" (all requests) has unknown source "FromSomewhere" (expected "FromClass" or "FromClaim")`,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Resolve(tc.configs, tc.requests)
			if tc.wantErr != "" {
				if err == nil || err.Error() != tc.wantErr {
					t.Fatalf("error\n got: %v\nwant: %s", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("Resolve: %v", err)
			}
			gotSummary := map[string]summary{}
			for name, c := range got {
				gotSummary[name] = summarize(c)
			}
			if !reflect.DeepEqual(gotSummary, tc.want) {
				t.Errorf("Resolve = %v, want %v", gotSummary, tc.want)
			}
		})
	}
}

func TestResolvedFor(t *testing.T) {
	r, err := Resolve([]resourceapi.DeviceAllocationConfiguration{ours(fromClaim, noneCfg, "gpu")}, []string{"gpu", "other"})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		request string
		want    v1alpha1.SharingBackend
	}{
		{"gpu", v1alpha1.BackendNone},
		{"gpu/sub", v1alpha1.BackendNone}, // falls back to its main request
		{"other", v1alpha1.BackendMPS},
		{"unknown", v1alpha1.BackendMPS}, // default
	}
	for _, tc := range tests {
		if got := r.For(tc.request).Sharing.Backend; got != tc.want {
			t.Errorf("For(%q) backend = %q, want %q", tc.request, got, tc.want)
		}
	}
	// For hands out copies: changing one must not change the stored config.
	r.For("gpu").Sharing.Backend = "changed"
	if got := r.For("gpu").Sharing.Backend; got != v1alpha1.BackendNone {
		t.Errorf("For returned shared state: backend now %q", got)
	}
}

func TestRequestNames(t *testing.T) {
	claim := &resourceapi.ResourceClaim{Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{
		Requests: []resourceapi.DeviceRequest{
			{Name: "whole", Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: "gpu.tangram.dev"}},
			{Name: "gpu", FirstAvailable: []resourceapi.DeviceSubRequest{{Name: "big"}, {Name: "small"}}},
		},
	}}}
	want := []string{"whole", "gpu", "gpu/big", "gpu/small"}
	if got := RequestNames(claim); !reflect.DeepEqual(got, want) {
		t.Errorf("RequestNames = %q, want %q", got, want)
	}
}
