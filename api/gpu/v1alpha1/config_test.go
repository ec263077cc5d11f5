package v1alpha1

import (
	"encoding/json"
	"reflect"
	"testing"

	"k8s.io/apimachinery/pkg/util/validation/field"
)

func ptr[T any](v T) *T { return &v }

const header = `"apiVersion":"gpu.tangram.dev/v1alpha1","kind":"GpuConfig"`

func TestParse(t *testing.T) {
	tests := []struct {
		name    string
		raw     string
		want    *GpuConfig
		wantErr string
	}{
		{
			name: "empty object gets the mps default",
			raw:  `{` + header + `}`,
			want: &GpuConfig{TypeMeta: Default().TypeMeta, Sharing: &Sharing{Backend: BackendMPS}},
		},
		{
			name: "backend none",
			raw:  `{` + header + `,"sharing":{"backend":"none"}}`,
			want: &GpuConfig{TypeMeta: Default().TypeMeta, Sharing: &Sharing{Backend: BackendNone}},
		},
		{
			name: "mps with default active thread percentage, backend defaulted",
			raw:  `{` + header + `,"sharing":{"mps":{"defaultActiveThreadPercentage":50}}}`,
			want: &GpuConfig{TypeMeta: Default().TypeMeta, Sharing: &Sharing{
				Backend: BackendMPS, MPS: &MPSSettings{DefaultActiveThreadPercentage: ptr[int32](50)}}},
		},
		{
			name: "surrounding whitespace is fine",
			raw:  "\n  {" + header + "}  \n",
			want: Default(),
		},
		{
			name:    "unsupported backend",
			raw:     `{` + header + `,"sharing":{"backend":"foo"}}`,
			wantErr: `sharing.backend: Unsupported value: "foo": supported values: "mps", "none"`,
		},
		{
			name:    "backend is case-sensitive",
			raw:     `{` + header + `,"sharing":{"backend":"MPS"}}`,
			wantErr: `sharing.backend: Unsupported value: "MPS": supported values: "mps", "none"`,
		},
		{
			name:    "unknown field",
			raw:     `{` + header + `,"sharing":{"bakend":"mps"}}`,
			wantErr: `decoding GpuConfig: strict decoding error: unknown field "sharing.bakend"`,
		},
		{
			name:    "field names are case-sensitive",
			raw:     `{` + header + `,"Sharing":{}}`,
			wantErr: `decoding GpuConfig: strict decoding error: unknown field "Sharing"`,
		},
		{
			name:    "duplicate field",
			raw:     `{` + header + `,"sharing":{},"sharing":{}}`,
			wantErr: `decoding GpuConfig: strict decoding error: duplicate field "sharing"`,
		},
		{
			name:    "mps settings with backend none",
			raw:     `{` + header + `,"sharing":{"backend":"none","mps":{"defaultActiveThreadPercentage":20}}}`,
			wantErr: `sharing.mps: Forbidden: only allowed when sharing.backend is "mps"`,
		},
		{
			name:    "percentage zero",
			raw:     `{` + header + `,"sharing":{"mps":{"defaultActiveThreadPercentage":0}}}`,
			wantErr: `sharing.mps.defaultActiveThreadPercentage: Invalid value: 0: must be between 1 and 100 (percent of the card's streaming multiprocessors)`,
		},
		{
			name:    "percentage above 100",
			raw:     `{` + header + `,"sharing":{"mps":{"defaultActiveThreadPercentage":101}}}`,
			wantErr: `sharing.mps.defaultActiveThreadPercentage: Invalid value: 101: must be between 1 and 100 (percent of the card's streaming multiprocessors)`,
		},
		{
			name: "two errors are both reported",
			raw:  `{` + header + `,"sharing":{"backend":"none","mps":{"defaultActiveThreadPercentage":-1}}}`,
			wantErr: `sharing.mps: Forbidden: only allowed when sharing.backend is "mps"` + "\n" +
				`sharing.mps.defaultActiveThreadPercentage: Invalid value: -1: must be between 1 and 100 (percent of the card's streaming multiprocessors)`,
		},
		{
			name:    "percentage as string",
			raw:     `{` + header + `,"sharing":{"mps":{"defaultActiveThreadPercentage":"50"}}}`,
			wantErr: `decoding GpuConfig: json: cannot unmarshal string into Go struct field MPSSettings.sharing.mps.defaultActiveThreadPercentage of type int32`,
		},
		{
			name:    "wrong apiVersion",
			raw:     `{"apiVersion":"gpu.tangram.dev/v1","kind":"GpuConfig"}`,
			wantErr: `apiVersion: Unsupported value: "gpu.tangram.dev/v1": supported values: "gpu.tangram.dev/v1alpha1"`,
		},
		{
			name:    "wrong kind",
			raw:     `{"apiVersion":"gpu.tangram.dev/v1alpha1","kind":"GPUConfig"}`,
			wantErr: `kind: Unsupported value: "GPUConfig": supported values: "GpuConfig"`,
		},
		{
			name: "missing apiVersion and kind",
			raw:  `{"sharing":{}}`,
			wantErr: `apiVersion: Required value: must be "gpu.tangram.dev/v1alpha1"` + "\n" +
				`kind: Required value: must be "GpuConfig"`,
		},
		{
			name:    "apiVersion key is case-sensitive",
			raw:     `{"apiversion":"gpu.tangram.dev/v1alpha1","kind":"GpuConfig"}`,
			wantErr: `apiVersion: Required value: must be "gpu.tangram.dev/v1alpha1"`,
		},
		{
			name:    "empty",
			raw:     "  ",
			wantErr: `parameters are empty: expected a JSON object with apiVersion "gpu.tangram.dev/v1alpha1" and kind "GpuConfig"`,
		},
		{
			name:    "not an object",
			raw:     `["mps"]`,
			wantErr: `parameters must be a JSON object with apiVersion "gpu.tangram.dev/v1alpha1" and kind "GpuConfig", got "[\"mps\"]"`,
		},
		{
			name:    "truncated",
			raw:     `{"apiVersion":`,
			wantErr: `parameters are not a valid JSON object: unexpected end of JSON input`,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Parse([]byte(tc.raw))
			if tc.wantErr != "" {
				if err == nil {
					t.Fatalf("Parse succeeded with %v, want error %q", got, tc.wantErr)
				}
				if err.Error() != tc.wantErr {
					t.Fatalf("Parse error\n got: %s\nwant: %s", err, tc.wantErr)
				}
				if verr := ValidateOpaqueConfig([]byte(tc.raw)); verr == nil || verr.Error() != tc.wantErr {
					t.Errorf("ValidateOpaqueConfig = %v, want the same error as Parse", verr)
				}
				return
			}
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("Parse = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestDecodeLenientIgnoresUnknownFields(t *testing.T) {
	raw := `{` + header + `,"sharing":{"backend":"none","futureField":true},"other":1}`
	if _, err := Decode([]byte(raw)); err == nil {
		t.Fatal("strict Decode accepted unknown fields")
	}
	got, err := DecodeLenient([]byte(raw))
	if err != nil {
		t.Fatalf("DecodeLenient: %v", err)
	}
	if got.Sharing == nil || got.Sharing.Backend != BackendNone {
		t.Errorf("DecodeLenient lost known fields: %v", got)
	}
	if _, err := DecodeLenient([]byte(`{"apiVersion":"v1","kind":"GpuConfig"}`)); err == nil {
		t.Error("DecodeLenient accepted a wrong apiVersion")
	}
}

func TestNormalizeKeepsUserValues(t *testing.T) {
	c := &GpuConfig{Sharing: &Sharing{Backend: "bogus"}}
	c.Normalize()
	if c.Sharing.Backend != "bogus" {
		t.Errorf("Normalize replaced a user value: %q", c.Sharing.Backend)
	}
	if c.Validate() == nil {
		t.Error("Validate accepted a bogus backend after Normalize")
	}
	// Validate treats an empty backend as the default, so it works unnormalized.
	if err := (&GpuConfig{Sharing: &Sharing{MPS: &MPSSettings{}}}).Validate(); err != nil {
		t.Errorf("Validate before Normalize: %v", err)
	}
}

func TestDeepCopyIsIndependent(t *testing.T) {
	orig := &GpuConfig{TypeMeta: Default().TypeMeta, Sharing: &Sharing{
		Backend: BackendMPS, MPS: &MPSSettings{DefaultActiveThreadPercentage: ptr[int32](30)}}}
	cp := orig.DeepCopyObject().(*GpuConfig)
	if !reflect.DeepEqual(orig, cp) {
		t.Fatalf("copy differs: %v vs %v", cp, orig)
	}
	*cp.Sharing.MPS.DefaultActiveThreadPercentage = 99
	cp.Sharing.Backend = BackendNone
	if *orig.Sharing.MPS.DefaultActiveThreadPercentage != 30 || orig.Sharing.Backend != BackendMPS {
		t.Errorf("changing the copy changed the original: %v", orig)
	}
	if (*GpuConfig)(nil).DeepCopy() != nil {
		t.Error("DeepCopy of nil is not nil")
	}
}

func TestStringShowsSettings(t *testing.T) {
	s := (&GpuConfig{Sharing: &Sharing{Backend: BackendNone}}).String()
	want := `{"sharing":{"backend":"none"}}`
	if s != want {
		t.Errorf("String() = %s, want %s", s, want)
	}
}

// FuzzDecodeGpuConfig checks that arbitrary input never panics and that
// whatever Parse accepts survives a JSON round trip and parses again to the
// same config.
func FuzzDecodeGpuConfig(f *testing.F) {
	for _, seed := range []string{
		`{` + header + `}`,
		`{` + header + `,"sharing":{"backend":"none"}}`,
		`{` + header + `,"sharing":{"backend":"mps","mps":{"defaultActiveThreadPercentage":100}}}`,
		`{` + header + `,"sharing":{"mps":{}}}`,
		`{` + header + `,"sharing":null}`,
		`{"apiVersion":"x"}`, `[]`, `null`, `{`, ``,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		_, _ = DecodeLenient(raw)
		cfg, err := Parse(raw)
		if err != nil {
			return
		}
		if err := cfg.Validate(); err != nil {
			t.Fatalf("accepted config does not validate: %v", err)
		}
		out, err := json.Marshal(cfg)
		if err != nil {
			t.Fatalf("marshal accepted config: %v", err)
		}
		again, err := Parse(out)
		if err != nil {
			t.Fatalf("re-parse of %s: %v", out, err)
		}
		if !reflect.DeepEqual(cfg, again) {
			t.Fatalf("round trip changed the config: %v -> %v", cfg, again)
		}
	})
}

func TestValidateOpaqueConfigFields(t *testing.T) {
	base := field.NewPath("spec", "config").Index(0).Child("opaque", "parameters")
	tests := []struct {
		name string
		raw  string
		want []string
	}{
		{name: "valid", raw: `{` + header + `,"sharing":{"backend":"none"}}`},
		{
			name: "invalid values, paths under base",
			raw:  `{` + header + `,"sharing":{"backend":"foo","mps":{"defaultActiveThreadPercentage":0}}}`,
			want: []string{
				`spec.config[0].opaque.parameters.sharing.backend: Unsupported value: "foo": supported values: "mps", "none"`,
				`spec.config[0].opaque.parameters.sharing.mps.defaultActiveThreadPercentage: Invalid value: 0: must be between 1 and 100 (percent of the card's streaming multiprocessors)`,
			},
		},
		{
			name: "type meta",
			raw:  `{"apiVersion":"v1"}`,
			want: []string{
				`spec.config[0].opaque.parameters.apiVersion: Unsupported value: "v1": supported values: "gpu.tangram.dev/v1alpha1"`,
				`spec.config[0].opaque.parameters.kind: Required value: must be "GpuConfig"`,
			},
		},
		{
			name: "decoding error on the parameters",
			raw:  `{` + header + `,"shareing":{}}`,
			want: []string{`spec.config[0].opaque.parameters: Invalid value: decoding GpuConfig: strict decoding error: unknown field "shareing"`},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var got []string
			for _, e := range ValidateOpaqueConfigFields([]byte(tc.raw), base) {
				got = append(got, e.Error())
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("errors\n got: %q\nwant: %q", got, tc.want)
			}
		})
	}
}
