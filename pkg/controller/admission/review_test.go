package admission

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	resourceapi "k8s.io/api/resource/v1"

	"github.com/tangram-gpu/tangram/pkg/config"
)

const (
	goodConfig = `{"apiVersion":"gpu.tangram.dev/v1alpha1","kind":"GpuConfig","sharing":{"mps":{"defaultActiveThreadPercentage":50}}}`
	// A tenant's claim may not choose the backend (it is the admin's).
	tenantBackend = `{"apiVersion":"gpu.tangram.dev/v1alpha1","kind":"GpuConfig","sharing":{"backend":"none"}}`
	badBackend    = `{"apiVersion":"gpu.tangram.dev/v1alpha1","kind":"GpuConfig","sharing":{"backend":"foo"}}`
	badField      = `{"apiVersion":"gpu.tangram.dev/v1alpha1","kind":"GpuConfig","sharing":{"bakend":"mps"}}`
	badKind       = `{"apiVersion":"gpu.tangram.dev/v1alpha1","kind":"GPUConfig"}`
)

func claimJSON(configs ...string) string {
	return `{"apiVersion":"resource.k8s.io/v1","kind":"ResourceClaim","metadata":{"name":"c","namespace":"ns"},
	"spec":{"devices":{"requests":[{"name":"gpu","exactly":{"deviceClassName":"gpu.tangram.dev"}}],"config":[` + strings.Join(configs, ",") + `]}}}`
}

func entry(driver, params string, requests ...string) string {
	r := ""
	if len(requests) > 0 {
		b, _ := json.Marshal(requests)
		r = `"requests":` + string(b) + `,`
	}
	return `{` + r + `"opaque":{"driver":"` + driver + `","parameters":` + params + `}}`
}

// review is an AdmissionReview v1 as the API server sends it.
func review(resource, kind, operation, object string) string {
	return `{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{
	"uid":"0b6e6f0e-1","kind":{"group":"resource.k8s.io","version":"v1","kind":"` + kind + `"},
	"resource":{"group":"resource.k8s.io","version":"v1","resource":"` + resource + `"},
	"name":"c","namespace":"ns","operation":"` + operation + `","userInfo":{"username":"alice"},
	"object":` + object + `}}`
}

func TestReview(t *testing.T) {
	tests := []struct {
		name    string
		body    string
		allowed bool
		code    int32
		message string
		fields  []string
	}{
		{
			name:    "claim with a valid config",
			body:    review("resourceclaims", "ResourceClaim", "CREATE", claimJSON(entry("gpu.tangram.dev", goodConfig))),
			allowed: true,
		},
		{
			name:    "claim naming a sharing backend",
			body:    review("resourceclaims", "ResourceClaim", "CREATE", claimJSON(entry("gpu.tangram.dev", tenantBackend))),
			code:    422,
			message: `spec.devices.config[0].opaque.parameters.sharing.backend: ` + config.TenantBackendDetail,
			fields:  []string{"spec.devices.config[0].opaque.parameters.sharing.backend"},
		},
		{
			name:    "claim with an unsupported backend",
			body:    review("resourceclaims", "ResourceClaim", "CREATE", claimJSON(entry("gpu.tangram.dev", badBackend))),
			code:    422,
			message: `spec.devices.config[0].opaque.parameters: invalid gpu.tangram.dev config from the claim (all requests): sharing.backend: Unsupported value: "foo": supported values: "mps", "none"`,
			fields:  []string{"spec.devices.config[0].opaque.parameters"},
		},
		{
			name: "claim: only our driver's entries are checked, every bad one is reported",
			body: review("resourceclaims", "ResourceClaim", "CREATE", claimJSON(
				entry("other.example.com", `{"anything":1}`), entry("gpu.tangram.dev", badField, "gpu"), entry("gpu.tangram.dev", badKind))),
			code: 422,
			message: `spec.devices.config[1].opaque.parameters: invalid gpu.tangram.dev config from the claim (requests "gpu"): decoding GpuConfig: strict decoding error: unknown field "sharing.bakend"; ` +
				`spec.devices.config[2].opaque.parameters: invalid gpu.tangram.dev config from the claim (all requests): kind: Unsupported value: "GPUConfig": supported values: "GpuConfig"`,
			fields: []string{"spec.devices.config[1].opaque.parameters", "spec.devices.config[2].opaque.parameters"},
		},
		{
			name: "template",
			body: review("resourceclaimtemplates", "ResourceClaimTemplate", "UPDATE",
				`{"metadata":{"name":"t"},"spec":{"spec":{"devices":{"requests":[{"name":"gpu","exactly":{"deviceClassName":"gpu.tangram.dev"}}],"config":[`+entry("gpu.tangram.dev", badBackend)+`]}}}}`),
			code:    422,
			message: `spec.spec.devices.config[0].opaque.parameters: invalid gpu.tangram.dev config from the claim (all requests): sharing.backend: Unsupported value: "foo": supported values: "mps", "none"`,
			fields:  []string{"spec.spec.devices.config[0].opaque.parameters"},
		},
		{
			name: "template naming a backend for one of its shares",
			body: review("resourceclaimtemplates", "ResourceClaimTemplate", "CREATE",
				`{"metadata":{"name":"t"},"spec":{"spec":{"devices":{"requests":[`+
					`{"name":"a","exactly":{"deviceClassName":"shared-gpu.tangram.dev","capacity":{"requests":{"memory":"20Gi"}}}},`+
					`{"name":"b","exactly":{"deviceClassName":"shared-gpu.tangram.dev","capacity":{"requests":{"memory":"20Gi"}}}}],`+
					`"config":[`+entry("gpu.tangram.dev", `{"apiVersion":"gpu.tangram.dev/v1alpha1","kind":"GpuConfig","sharing":{"backend":"none"}}`, "b")+`]}}}}`),
			code:    422,
			message: `spec.spec.devices.config[0].opaque.parameters.sharing.backend: ` + config.TenantBackendDetail,
			fields:  []string{"spec.spec.devices.config[0].opaque.parameters.sharing.backend"},
		},
		{
			name:    "device class",
			body:    review("deviceclasses", "DeviceClass", "CREATE", `{"metadata":{"name":"x"},"spec":{"config":[`+entry("gpu.tangram.dev", `"mps"`)+`]}}`),
			code:    422,
			message: `spec.config[0].opaque.parameters: invalid gpu.tangram.dev config from the DeviceClass (all requests): parameters must be a JSON object with apiVersion "gpu.tangram.dev/v1alpha1" and kind "GpuConfig", got "\"mps\""`,
			fields:  []string{"spec.config[0].opaque.parameters"},
		},
		{
			name:    "device class with a valid config",
			body:    review("deviceclasses", "DeviceClass", "UPDATE", `{"metadata":{"name":"x"},"spec":{"config":[`+entry("gpu.tangram.dev", goodConfig)+`]}}`),
			allowed: true,
		},
		{
			name:    "delete is not checked",
			body:    review("resourceclaims", "ResourceClaim", "DELETE", `null`),
			allowed: true,
		},
		{
			name:    "other resources pass",
			body:    review("resourceslices", "ResourceSlice", "CREATE", `{"spec":{}}`),
			allowed: true,
		},
		{
			name:    "object that does not decode",
			body:    review("resourceclaims", "ResourceClaim", "CREATE", `{"spec":{"devices":"nope"}}`),
			code:    400,
			message: "decoding the ResourceClaim: json: cannot unmarshal string into Go struct field ResourceClaimSpec.spec.devices of type v1.DeviceClaim",
		},
	}
	srv := httptest.NewServer(Handler{})
	defer srv.Close()
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			resp, err := http.Post(srv.URL, "application/json", strings.NewReader(tc.body))
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("HTTP %d", resp.StatusCode)
			}
			var out admissionv1.AdmissionReview
			if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
				t.Fatal(err)
			}
			if out.APIVersion != "admission.k8s.io/v1" || out.Kind != "AdmissionReview" || out.Response == nil || out.Response.UID != "0b6e6f0e-1" {
				t.Fatalf("review envelope %+v", out)
			}
			r := out.Response
			if r.Allowed != tc.allowed {
				t.Fatalf("allowed = %v, want %v (%+v)", r.Allowed, tc.allowed, r.Result)
			}
			if tc.allowed {
				return
			}
			if r.Result.Code != tc.code || r.Result.Message != tc.message {
				t.Errorf("result %d %q\nwant %d %q", r.Result.Code, r.Result.Message, tc.code, tc.message)
			}
			var fields []string
			if r.Result.Details != nil {
				for _, c := range r.Result.Details.Causes {
					fields = append(fields, c.Field)
				}
			}
			if strings.Join(fields, ",") != strings.Join(tc.fields, ",") {
				t.Errorf("cause fields %v, want %v", fields, tc.fields)
			}
		})
	}
}

// TestSameMessageAsPlugin: the text after the field path is exactly what
// the kubelet plugin reports when it resolves the allocated claim's configs.
func TestSameMessageAsPlugin(t *testing.T) {
	var claim resourceapi.ResourceClaim
	if err := json.Unmarshal([]byte(claimJSON(entry("gpu.tangram.dev", badBackend, "gpu"))), &claim); err != nil {
		t.Fatal(err)
	}
	// What the plugin sees at prepare: the claim's configs in the allocation.
	alloc := []resourceapi.DeviceAllocationConfiguration{{
		Source: resourceapi.AllocationConfigSourceClaim, Requests: claim.Spec.Devices.Config[0].Requests,
		DeviceConfiguration: claim.Spec.Devices.Config[0].DeviceConfiguration,
	}}
	_, pluginErr := config.Resolve(alloc, config.RequestNames(&claim))
	if pluginErr == nil {
		t.Fatal("the plugin accepts the config")
	}
	errs := checkClaimSpec(&claim, nil)
	if len(errs) != 1 || errs[0].Detail != pluginErr.Error() {
		t.Errorf("webhook %v\nplugin  %v", errs, pluginErr)
	}
}

func TestHandlerRejectsMalformedRequests(t *testing.T) {
	tests := []struct {
		name, method, body string
		code               int
	}{
		{"GET", http.MethodGet, "", http.StatusMethodNotAllowed},
		{"not JSON", http.MethodPost, "{", http.StatusBadRequest},
		{"no request", http.MethodPost, `{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview"}`, http.StatusBadRequest},
		{"too large", http.MethodPost, `{"x":"` + strings.Repeat("a", maxBody) + `"}`, http.StatusRequestEntityTooLarge},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rec := httptest.NewRecorder()
			Handler{}.ServeHTTP(rec, httptest.NewRequest(tc.method, "/validate", bytes.NewBufferString(tc.body)))
			if rec.Code != tc.code {
				t.Errorf("HTTP %d, want %d: %s", rec.Code, tc.code, rec.Body.String())
			}
		})
	}
}
