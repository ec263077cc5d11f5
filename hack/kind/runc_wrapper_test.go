// Package kind holds the scripts of the offline kind demo (docs/demo.md);
// this file tests the runc wrapper they register with the private Docker
// engine.
package kind

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

const allCaps = `["CAP_CHOWN","CAP_SYS_RESOURCE","CAP_SYS_ADMIN"]`

// TestRuncWrapperDropsSysResource runs runc-drop-sys-resource with a fake
// runc that records its arguments, and checks which spec file lost
// CAP_SYS_RESOURCE and that runc got the arguments unchanged.
func TestRuncWrapperDropsSysResource(t *testing.T) {
	if _, err := exec.LookPath("jq"); err != nil {
		t.Fatalf("the wrapper needs jq (apt-get install jq): %v", err)
	}
	tests := []struct {
		name string
		// args to the wrapper; BUNDLE and PROCESS stand for the temp files.
		args []string
		// spec file the call names and the JSON path of its capabilities.
		file, capsAt string
		wantDropped  bool
	}{
		{"create drops it from the bundle", []string{"--root", "/r", "create", "--bundle", "BUNDLE", "c1"}, "config.json", "process", true},
		{"run with --bundle=", []string{"run", "--bundle=BUNDLE", "c1"}, "config.json", "process", true},
		{"create with -b", []string{"create", "-b", "BUNDLE", "c1"}, "config.json", "process", true},
		{"exec drops it from the process file", []string{"exec", "--process", "PROCESS", "c1"}, "process.json", "", true},
		{"start leaves the spec alone", []string{"start", "c1"}, "config.json", "process", false},
		{"delete leaves the spec alone", []string{"--root", "/r", "delete", "--force", "c1"}, "config.json", "process", false},
	}
	wrapper, err := filepath.Abs("runc-drop-sys-resource")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			specPath := filepath.Join(dir, tc.file)
			caps := `{"bounding":` + allCaps + `,"effective":` + allCaps + `,"permitted":` + allCaps + `}`
			spec := `{"capabilities":` + caps + `}`
			if tc.capsAt == "process" {
				spec = `{"ociVersion":"1.0.2","process":` + spec + `}`
			}
			if err := os.WriteFile(specPath, []byte(spec), 0o644); err != nil {
				t.Fatal(err)
			}
			argsOut := filepath.Join(dir, "runc-args")
			fakeRunc := filepath.Join(dir, "runc")
			script := "#!/bin/sh\nprintf '%s\\n' \"$@\" > " + argsOut + "\n"
			if err := os.WriteFile(fakeRunc, []byte(script), 0o755); err != nil {
				t.Fatal(err)
			}
			args := make([]string, len(tc.args))
			for i, a := range tc.args {
				a = strings.ReplaceAll(a, "BUNDLE", dir)
				args[i] = strings.ReplaceAll(a, "PROCESS", specPath)
			}
			cmd := exec.Command(wrapper, args...)
			cmd.Env = append(os.Environ(), "TANGRAM_REAL_RUNC="+fakeRunc)
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("wrapper %v: %v\n%s", args, err, out)
			}
			gotArgs, err := os.ReadFile(argsOut)
			if err != nil {
				t.Fatal(err)
			}
			if want := strings.Join(args, "\n") + "\n"; string(gotArgs) != want {
				t.Errorf("runc got arguments %q, want %q", gotArgs, want)
			}
			var doc map[string]any
			data, err := os.ReadFile(specPath)
			if err != nil {
				t.Fatal(err)
			}
			if err := json.Unmarshal(data, &doc); err != nil {
				t.Fatalf("spec after the wrapper is not JSON: %v\n%s", err, data)
			}
			if tc.capsAt == "process" {
				doc = doc["process"].(map[string]any)
			}
			want := []any{"CAP_CHOWN", "CAP_SYS_RESOURCE", "CAP_SYS_ADMIN"}
			if tc.wantDropped {
				want = []any{"CAP_CHOWN", "CAP_SYS_ADMIN"}
			}
			for set, got := range doc["capabilities"].(map[string]any) {
				if !reflect.DeepEqual(got, want) {
					t.Errorf("capability set %s = %v, want %v", set, got, want)
				}
			}
		})
	}
}
