package config

import (
	"reflect"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

func opaqueConfig(driver, params string) *resourceapi.OpaqueDeviceConfiguration {
	return &resourceapi.OpaqueDeviceConfiguration{Driver: driver, Parameters: runtime.RawExtension{Raw: []byte(params)}}
}

const badBackend = `{"apiVersion":"gpu.tangram.dev/v1alpha1","kind":"GpuConfig","sharing":{"backend":"foo"}}`

func errorStrings(errs field.ErrorList) []string {
	var out []string
	for _, e := range errs {
		out = append(out, e.Error())
	}
	return out
}

func TestValidateClaimSpec(t *testing.T) {
	spec := &resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{
		Requests: []resourceapi.DeviceRequest{{Name: "gpu"}},
		Config: []resourceapi.DeviceClaimConfiguration{
			{DeviceConfiguration: resourceapi.DeviceConfiguration{Opaque: opaqueConfig("gpu.tangram.dev", noneCfg)}},
			{DeviceConfiguration: resourceapi.DeviceConfiguration{Opaque: opaqueConfig("nic.example.com", "not json")}},
			{DeviceConfiguration: resourceapi.DeviceConfiguration{}},
			{Requests: []string{"gpu"}, DeviceConfiguration: resourceapi.DeviceConfiguration{Opaque: opaqueConfig("gpu.tangram.dev", badBackend)}},
		},
	}}
	tests := []struct {
		name string
		base *field.Path
		want []string
	}{
		{
			name: "claim",
			want: []string{`spec.devices.config[3].opaque.parameters.sharing.backend: Unsupported value: "foo": supported values: "mps", "none"`},
		},
		{
			name: "template",
			base: field.NewPath("spec", "spec"),
			want: []string{`spec.spec.devices.config[3].opaque.parameters.sharing.backend: Unsupported value: "foo": supported values: "mps", "none"`},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := errorStrings(ValidateClaimSpec(spec, tc.base)); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("errors\n got: %q\nwant: %q", got, tc.want)
			}
		})
	}
}

func TestValidateDeviceClassSpec(t *testing.T) {
	spec := &resourceapi.DeviceClassSpec{Config: []resourceapi.DeviceClassConfiguration{
		{DeviceConfiguration: resourceapi.DeviceConfiguration{Opaque: opaqueConfig("gpu.tangram.dev", `{"kind":"GpuConfig"}`)}},
		{DeviceConfiguration: resourceapi.DeviceConfiguration{Opaque: opaqueConfig("gpu.tangram.dev", mps50Cfg)}},
	}}
	want := []string{`spec.config[0].opaque.parameters.apiVersion: Required value: must be "gpu.tangram.dev/v1alpha1"`}
	if got := errorStrings(ValidateDeviceClassSpec(spec)); !reflect.DeepEqual(got, want) {
		t.Errorf("errors\n got: %q\nwant: %q", got, want)
	}
	if errs := ValidateDeviceClassSpec(&resourceapi.DeviceClassSpec{}); len(errs) != 0 {
		t.Errorf("empty class: %v", errs)
	}
}

func TestValidateClaimSpecMixedShareBackends(t *testing.T) {
	const mpsCfg = `{"apiVersion":"gpu.tangram.dev/v1alpha1","kind":"GpuConfig","sharing":{"backend":"mps"}}`
	share := func(name string) resourceapi.DeviceRequest {
		return resourceapi.DeviceRequest{Name: name, Exactly: &resourceapi.ExactDeviceRequest{
			DeviceClassName: "shared-gpu.tangram.dev",
			Capacity:        &resourceapi.CapacityRequirements{Requests: map[resourceapi.QualifiedName]resource.Quantity{"memory": resource.MustParse("20Gi")}}}}
	}
	whole := resourceapi.DeviceRequest{Name: "whole", Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: "gpu.tangram.dev"}}
	subShares := resourceapi.DeviceRequest{Name: "any", FirstAvailable: []resourceapi.DeviceSubRequest{
		{Name: "small", DeviceClassName: "shared-gpu.tangram.dev",
			Capacity: &resourceapi.CapacityRequirements{Requests: map[resourceapi.QualifiedName]resource.Quantity{"memory": resource.MustParse("10Gi")}}},
	}}
	cfg := func(params string, requests ...string) resourceapi.DeviceClaimConfiguration {
		return resourceapi.DeviceClaimConfiguration{Requests: requests, DeviceConfiguration: resourceapi.DeviceConfiguration{Opaque: opaqueConfig("gpu.tangram.dev", params)}}
	}
	tests := []struct {
		name     string
		requests []resourceapi.DeviceRequest
		configs  []resourceapi.DeviceClaimConfiguration
		want     []string
	}{
		{name: "mps and none shares", requests: []resourceapi.DeviceRequest{share("a"), share("b")},
			configs: []resourceapi.DeviceClaimConfiguration{cfg(noneCfg, "b")},
			want:    []string{`spec.devices.config: Invalid value: "none": requests "a" (sharing backend mps) and "b" (sharing backend none) both ask for GPU shares, and shares of one card must all use one backend; give every share request of the claim the same sharing.backend, or split them into separate claims`}},
		{name: "a subrequest share against a request share", requests: []resourceapi.DeviceRequest{share("a"), subShares},
			configs: []resourceapi.DeviceClaimConfiguration{cfg(noneCfg, "a"), cfg(mpsCfg, "any")},
			want:    []string{`spec.devices.config: Invalid value: "mps": requests "a" (sharing backend none) and "any/small" (sharing backend mps) both ask for GPU shares, and shares of one card must all use one backend; give every share request of the claim the same sharing.backend, or split them into separate claims`}},
		{name: "same backend", requests: []resourceapi.DeviceRequest{share("a"), share("b")},
			configs: []resourceapi.DeviceClaimConfiguration{cfg(noneCfg)}},
		{name: "a whole card may differ", requests: []resourceapi.DeviceRequest{share("a"), whole},
			configs: []resourceapi.DeviceClaimConfiguration{cfg(noneCfg, "whole")}},
		{name: "default backend everywhere", requests: []resourceapi.DeviceRequest{share("a"), share("b")}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			spec := &resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: tt.requests, Config: tt.configs}}
			if got := errorStrings(ValidateClaimSpec(spec, nil)); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("errors\n got: %q\nwant: %q", got, tt.want)
			}
		})
	}
}
