package config

import (
	"reflect"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
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
