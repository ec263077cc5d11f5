package config

import (
	"reflect"
	"strings"
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
			{DeviceConfiguration: resourceapi.DeviceConfiguration{Opaque: opaqueConfig("gpu.tangram.dev", mps50Cfg)}},
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

// TestValidateClaimSpecRefusesBackend: a claim's config may not name a
// sharing backend, whatever it names (the admin's choice, per node and
// class); MPS tuning stays allowed. Before, a tenant's "none" share could
// land on a card of other tenants' MPS shares and break them.
func TestValidateClaimSpecRefusesBackend(t *testing.T) {
	const mpsCfg = `{"apiVersion":"gpu.tangram.dev/v1alpha1","kind":"GpuConfig","sharing":{"backend":"mps"}}`
	share := resourceapi.DeviceRequest{Name: "a", Exactly: &resourceapi.ExactDeviceRequest{
		DeviceClassName: "shared-gpu.tangram.dev",
		Capacity:        &resourceapi.CapacityRequirements{Requests: map[resourceapi.QualifiedName]resource.Quantity{"memory": resource.MustParse("20Gi")}}}}
	cfg := func(params string, requests ...string) resourceapi.DeviceClaimConfiguration {
		return resourceapi.DeviceClaimConfiguration{Requests: requests, DeviceConfiguration: resourceapi.DeviceConfiguration{Opaque: opaqueConfig("gpu.tangram.dev", params)}}
	}
	forbidden := func(i string) string {
		return "spec.devices.config[" + i + "].opaque.parameters.sharing.backend: Forbidden: " + TenantBackendDetail
	}
	tests := []struct {
		name    string
		configs []resourceapi.DeviceClaimConfiguration
		want    []string
	}{
		{name: "none", configs: []resourceapi.DeviceClaimConfiguration{cfg(noneCfg)}, want: []string{forbidden("0")}},
		{name: "mps too", configs: []resourceapi.DeviceClaimConfiguration{cfg(mps50Cfg), cfg(mpsCfg, "a")}, want: []string{forbidden("1")}},
		{name: "MPS tuning only", configs: []resourceapi.DeviceClaimConfiguration{cfg(`{"apiVersion":"gpu.tangram.dev/v1alpha1","kind":"GpuConfig","sharing":{"mps":{"defaultActiveThreadPercentage":30}}}`)}},
		{name: "no config"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			spec := &resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{share}, Config: tt.configs}}
			if got := errorStrings(ValidateClaimSpec(spec, nil)); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("errors\n got: %q\nwant: %q", got, tt.want)
			}
		})
	}
}

func TestCheckAllocationBackends(t *testing.T) {
	const mpsCfg = `{"apiVersion":"gpu.tangram.dev/v1alpha1","kind":"GpuConfig","sharing":{"backend":"mps"}}`
	entry := func(source resourceapi.AllocationConfigSource, params string) resourceapi.DeviceAllocationConfiguration {
		return resourceapi.DeviceAllocationConfiguration{Source: source, DeviceConfiguration: resourceapi.DeviceConfiguration{Opaque: opaqueConfig("gpu.tangram.dev", params)}}
	}
	class, claim := resourceapi.AllocationConfigSourceClass, resourceapi.AllocationConfigSourceClaim
	tests := []struct {
		name    string
		configs []resourceapi.DeviceAllocationConfiguration
		node    string
		wantErr string
	}{
		{name: "class names the node's backend", configs: []resourceapi.DeviceAllocationConfiguration{entry(class, mpsCfg)}, node: "mps"},
		{name: "class names another backend", configs: []resourceapi.DeviceAllocationConfiguration{entry(class, noneCfg)}, node: "mps",
			wantErr: `names sharing.backend "none", but node n1 shares its cards with backend "mps"`},
		{name: "node without a backend lets the class decide", configs: []resourceapi.DeviceAllocationConfiguration{entry(class, noneCfg)}},
		{name: "claim names a backend", configs: []resourceapi.DeviceAllocationConfiguration{entry(claim, noneCfg)}, node: "none",
			wantErr: `the claim's config 0 (gpu.tangram.dev config from the claim (all requests)) names sharing.backend "none": ` + TenantBackendDetail},
		{name: "claim names a backend, node without one", configs: []resourceapi.DeviceAllocationConfiguration{entry(claim, mpsCfg)},
			wantErr: `names sharing.backend "mps"`},
		{name: "claim tunes MPS", configs: []resourceapi.DeviceAllocationConfiguration{entry(claim, mps50Cfg)}, node: "mps"},
		{name: "other driver", configs: []resourceapi.DeviceAllocationConfiguration{{Source: claim, DeviceConfiguration: resourceapi.DeviceConfiguration{Opaque: opaqueConfig("nic.example.com", noneCfg)}}}, node: "mps"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := CheckAllocationBackends(tt.configs, tt.node, "n1")
			switch {
			case tt.wantErr == "" && err != nil:
				t.Errorf("unexpected error: %v", err)
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
				t.Errorf("error %v, want one containing %q", err, tt.wantErr)
			}
		})
	}
}
