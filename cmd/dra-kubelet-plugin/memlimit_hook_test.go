package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tangram-gpu/tangram/pkg/plugin/driverroot"
)

func TestInstallMemoryLimitHook(t *testing.T) {
	dir := t.TempDir()
	src := filepath.Join(dir, "image", "tangram-cdi-hook")
	if err := os.MkdirAll(filepath.Dir(src), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(src, []byte("hook"), 0o755); err != nil {
		t.Fatal(err)
	}
	state := filepath.Join(dir, "state")
	for _, tc := range []struct {
		name      string
		flags     runFlags
		root      driverroot.Root
		wantPath  string
		wantRoot  string
		wantFile  string
		wantError string
	}{
		{
			name:     "defaults: <state-dir>/bin, host driver root",
			flags:    runFlags{StateDir: state, MemoryLimitHookBinary: src},
			root:     driverroot.Root{Path: "/driver-root", HostPath: "/run/nvidia/driver"},
			wantPath: filepath.Join(state, "bin", "tangram-cdi-hook"), wantRoot: "/run/nvidia/driver",
			wantFile: filepath.Join(state, "bin", "tangram-cdi-hook"),
		},
		{
			name: "installed through a mount the host sees elsewhere",
			flags: runFlags{StateDir: state, MemoryLimitHookBinary: src,
				MemoryLimitHookDir: filepath.Join(dir, "mnt"), MemoryLimitHookHostDir: "/opt/tangram/bin"},
			root:     driverroot.Root{Path: "/"},
			wantPath: "/opt/tangram/bin/tangram-cdi-hook", wantRoot: "/",
			wantFile: filepath.Join(dir, "mnt", "tangram-cdi-hook"),
		},
		{
			name:      "no hook in the image",
			flags:     runFlags{StateDir: state, MemoryLimitHookBinary: filepath.Join(dir, "missing", "tangram-cdi-hook")},
			root:      driverroot.Root{Path: "/"},
			wantError: "this node enforces shares hard, so every share's container needs tangram-cdi-hook",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			hook, err := tc.flags.installMemoryLimitHook(tc.root)
			if tc.wantError != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantError) {
					t.Fatalf("error %v, want one containing %q", err, tc.wantError)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if hook.Path != tc.wantPath || hook.DriverRoot != tc.wantRoot {
				t.Errorf("hook %+v, want path %s driver root %s", hook, tc.wantPath, tc.wantRoot)
			}
			if data, err := os.ReadFile(tc.wantFile); err != nil || string(data) != "hook" {
				t.Errorf("installed file %s: %q, %v", tc.wantFile, data, err)
			}
		})
	}
}
