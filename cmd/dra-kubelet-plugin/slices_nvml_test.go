//go:build cgo

package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	resourceapi "k8s.io/api/resource/v1"

	mocknvml "github.com/tangram-gpu/tangram/hack/mock-nvml"
	"github.com/tangram-gpu/tangram/pkg/gpu/fakegpu"
)

// TestSlicesFromDriverRoot runs `slices` the way a GPU node does, with
// NVML loaded from --driver-root (here the C mock library, serving its
// built-in dgx-h100 as node mock-node) and PCIe roots read from
// --sysfs-root, and wants what --fake-profile dgx-h100 publishes plus the
// pcieRoot of each card.
func TestSlicesFromDriverRoot(t *testing.T) {
	lib, err := mocknvml.Build("")
	if err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	libDir := filepath.Join(root, "usr/lib64")
	if err := os.MkdirAll(libDir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(lib, filepath.Join(libDir, "libnvidia-ml.so.1")); err != nil {
		t.Fatal(err)
	}
	profile, err := fakegpu.BuiltinProfile("dgx-h100")
	if err != nil {
		t.Fatal(err)
	}
	if err := mocknvml.WriteSysfs(filepath.Join(root, "sys"), profile); err != nil {
		t.Fatal(err)
	}
	t.Setenv(mocknvml.EnvDevicesFile, "")
	t.Setenv(mocknvml.EnvStateDir, t.TempDir())

	nvmlOut, err := runCommand(t, "slices", "--node-name", "mock-node", "--driver-root", root, "--sysfs-root", filepath.Join(root, "sys"), "-o", "json")
	if err != nil {
		t.Fatal(err)
	}
	fakeOut, err := runCommand(t, "slices", "--node-name", "mock-node", "--fake-profile", "dgx-h100", "-o", "json")
	if err != nil {
		t.Fatal(err)
	}
	got, want := decodeSlices(t, nvmlOut), decodeSlices(t, fakeOut)
	roots := 0
	for i := range got {
		for j := range got[i].Spec.Devices {
			dev := &got[i].Spec.Devices[j]
			bus := dev.Attributes["resource.kubernetes.io/pciBusID"].StringValue
			wantRoot, err := mocknvml.PCIeRoot(*bus)
			if err != nil {
				t.Fatal(err)
			}
			if r := dev.Attributes["resource.kubernetes.io/pcieRoot"].StringValue; r == nil || *r != wantRoot {
				t.Errorf("%s: pcieRoot %v, want %s from the mock sysfs", dev.Name, r, wantRoot)
			} else {
				roots++
			}
			delete(dev.Attributes, "resource.kubernetes.io/pcieRoot")
		}
	}
	if roots != 8 {
		t.Errorf("%d cards with pcieRoot, want 8", roots)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("slices from NVML differ from the fake profile's (-fake +nvml):\n%s", diff)
	}

	_, err = runCommand(t, "slices", "--node-name", "mock-node", "--driver-root", t.TempDir())
	if err == nil || !containsAll(err.Error(), "libnvidia-ml.so.1 not found under the NVIDIA driver root", "usr/lib64/libnvidia-ml.so.1", "--driver-root") {
		t.Errorf("empty driver root: %v", err)
	}
}

func decodeSlices(t *testing.T, out string) []resourceapi.ResourceSlice {
	t.Helper()
	var list struct {
		Items []resourceapi.ResourceSlice `json:"items"`
	}
	if err := json.Unmarshal([]byte(out), &list); err != nil {
		t.Fatalf("%v in %s", err, out)
	}
	if len(list.Items) == 0 {
		t.Fatalf("no slices in %s", out)
	}
	return list.Items
}

func containsAll(s string, parts ...string) bool {
	for _, p := range parts {
		if !strings.Contains(s, p) {
			return false
		}
	}
	return true
}
