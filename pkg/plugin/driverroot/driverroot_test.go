package driverroot

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func touch(t *testing.T, path string, mode os.FileMode) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte("x"), mode); err != nil {
		t.Fatal(err)
	}
}

func TestFind(t *testing.T) {
	tests := []struct {
		name    string
		layout  func(t *testing.T, root string)
		lookup  func(r Root) (string, error)
		want    string // relative to the root
		wantErr []string
	}{
		{
			name: "GPU operator layout: lib64 first",
			layout: func(t *testing.T, root string) {
				touch(t, filepath.Join(root, "usr/lib64/libnvidia-ml.so.580.95.05"), 0o644)
				if err := os.Symlink("libnvidia-ml.so.580.95.05", filepath.Join(root, "usr/lib64/libnvidia-ml.so.1")); err != nil {
					t.Fatal(err)
				}
				touch(t, filepath.Join(root, "usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1"), 0o644)
			},
			lookup: Root.NVMLLibraryPath,
			want:   "usr/lib64/libnvidia-ml.so.1",
		},
		{
			name: "Debian layout",
			layout: func(t *testing.T, root string) {
				touch(t, filepath.Join(root, "usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1"), 0o644)
			},
			lookup: Root.NVMLLibraryPath,
			want:   "usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1",
		},
		{
			name: "dangling link is missing",
			layout: func(t *testing.T, root string) {
				if err := os.MkdirAll(filepath.Join(root, "usr/lib64"), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.Symlink("/nonexistent/libnvidia-ml.so.1", filepath.Join(root, "usr/lib64/libnvidia-ml.so.1")); err != nil {
					t.Fatal(err)
				}
			},
			lookup:  Root.NVMLLibraryPath,
			wantErr: []string{"libnvidia-ml.so.1 not found under the NVIDIA driver root", "usr/lib64/libnvidia-ml.so.1, ", "/lib/libnvidia-ml.so.1)", "--driver-root"},
		},
		{
			// A driver root of /usr/local/nvidia (cloud GPU images, the
			// machine gpu-check runs on): lib64 and bin directly under it.
			name:   "/usr/local/nvidia layout: NVML in lib64",
			layout: func(t *testing.T, root string) { touch(t, filepath.Join(root, "lib64/libnvidia-ml.so.1"), 0o644) },
			lookup: Root.NVMLLibraryPath,
			want:   "lib64/libnvidia-ml.so.1",
		},
		{
			name:   "/usr/local/nvidia layout: MPS control in bin",
			layout: func(t *testing.T, root string) { touch(t, filepath.Join(root, "bin", MPSControl), 0o755) },
			lookup: func(r Root) (string, error) { return r.Executable(MPSControl) },
			want:   "bin/" + MPSControl,
		},
		{
			name:   "MPS control in usr/bin",
			layout: func(t *testing.T, root string) { touch(t, filepath.Join(root, "usr/bin", MPSControl), 0o755) },
			lookup: func(r Root) (string, error) { return r.Executable(MPSControl) },
			want:   "usr/bin/" + MPSControl,
		},
		{
			name:    "not executable is missing",
			layout:  func(t *testing.T, root string) { touch(t, filepath.Join(root, "usr/bin", NVIDIACDIHook), 0o644) },
			lookup:  func(r Root) (string, error) { return r.Executable(NVIDIACDIHook) },
			wantErr: []string{"nvidia-cdi-hook not found", "usr/bin/nvidia-cdi-hook, ", "usr/local/bin/nvidia-cdi-hook"},
		},
		{
			name:    "a path is not a name",
			layout:  func(*testing.T, string) {},
			lookup:  func(r Root) (string, error) { return r.Executable("bin/sh") },
			wantErr: []string{`"bin/sh"`, "want a file name"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root := t.TempDir()
			tt.layout(t, root)
			got, err := tt.lookup(Root{Path: root})
			if len(tt.wantErr) > 0 {
				if err == nil {
					t.Fatalf("found %s, want an error", got)
				}
				for _, w := range tt.wantErr {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("error %q lacks %q", err, w)
					}
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if want := filepath.Join(root, tt.want); got != want {
				t.Errorf("found %s, want %s", got, want)
			}
		})
	}
}

func TestNotFoundIsErrNotFound(t *testing.T) {
	_, err := Root{Path: t.TempDir()}.NVMLLibraryPath()
	if !errors.Is(err, ErrNotFound) {
		t.Errorf("%v is not ErrNotFound", err)
	}
}

func TestToHost(t *testing.T) {
	tests := []struct {
		root    Root
		path    string
		want    string
		wantErr bool
	}{
		{Root{Path: "/driver-root", HostPath: "/run/nvidia/driver"}, "/driver-root/usr/bin/nvidia-cdi-hook", "/run/nvidia/driver/usr/bin/nvidia-cdi-hook", false},
		{Root{Path: "/driver-root", HostPath: "/"}, "/driver-root/usr/bin/nvidia-cdi-hook", "/usr/bin/nvidia-cdi-hook", false},
		{Root{Path: "/", HostPath: "/mock"}, "/usr/bin/x", "/mock/usr/bin/x", false},
		{Root{Path: "/opt/root"}, "/opt/root/usr/bin/x", "/opt/root/usr/bin/x", false},
		{Root{Path: "/driver-root", HostPath: "/h"}, "/driver-rootx/usr/bin/x", "", true},
		{Root{Path: "/driver-root", HostPath: "/h"}, "/usr/bin/x", "", true},
	}
	for _, tt := range tests {
		got, err := tt.root.ToHost(tt.path)
		if (err != nil) != tt.wantErr || got != tt.want {
			t.Errorf("%+v.ToHost(%s) = %q, %v; want %q (error: %v)", tt.root, tt.path, got, err, tt.want, tt.wantErr)
		}
	}
}

func TestFromEnv(t *testing.T) {
	t.Setenv(EnvDriverRoot, "")
	if got := FromEnv(); got != "/" {
		t.Errorf("unset: %q, want /", got)
	}
	t.Setenv(EnvDriverRoot, "/driver-root")
	if got := FromEnv(); got != "/driver-root" {
		t.Errorf("set: %q, want /driver-root", got)
	}
}

func TestToolEnv(t *testing.T) {
	if env := (Root{Path: "/"}).ToolEnv(); env != nil {
		t.Errorf("the host's root: %q, want nothing", env)
	}
	root := t.TempDir()
	for _, dir := range []string{"usr/lib64", "lib/x86_64-linux-gnu", "usr/bin"} {
		if err := os.MkdirAll(filepath.Join(root, dir), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	t.Setenv("PATH", "/usr/bin:/bin")
	got := Root{Path: root}.ToolEnv()
	want := []string{
		"LD_LIBRARY_PATH=" + filepath.Join(root, "usr/lib64") + ":" + filepath.Join(root, "lib/x86_64-linux-gnu") + ":" + filepath.Join(root, "lib"),
		"PATH=" + filepath.Join(root, "usr/bin") + ":/usr/bin:/bin",
	}
	if !slices.Equal(got, want) {
		t.Errorf("ToolEnv = %q, want %q", got, want)
	}
}
