package main

import (
	"path/filepath"
	"strings"
	"testing"
)

// The flag defaults to system-node-critical; the chart may pass it empty
// (kubeletPlugin.priorityClassName: "") for a pod without a priority class.
func TestMPSDaemonPriorityClassFlag(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{args: nil, want: "system-node-critical"},
		{args: []string{"--mps-daemon-priority-class="}, want: ""},
		{args: []string{"--mps-daemon-priority-class=gpu-infra"}, want: "gpu-infra"},
	} {
		f := newRunCommand().Flags()
		if err := f.Parse(tc.args); err != nil {
			t.Fatalf("%v: %v", tc.args, err)
		}
		if got, err := f.GetString("mps-daemon-priority-class"); err != nil || got != tc.want {
			t.Errorf("%v: --mps-daemon-priority-class %q (%v), want %q", tc.args, got, err, tc.want)
		}
	}
}

// Multi-user is the default: without -M a classic daemon serves one UID at
// a time, and on a GPU (r580) a uid 1000 client waited for a root client
// to exit (docs/gpu-reports/2026-11-27-h200-r580-experiments.md);
// --mps-multi-user=false (chart kubeletPlugin.mps.multiUser=false) for a
// driver whose control binary refuses -M.
func TestMPSMultiUserFlag(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want bool
	}{
		{args: nil, want: true},
		{args: []string{"--mps-multi-user=false"}, want: false},
		{args: []string{"--mps-multi-user"}, want: true},
	} {
		f := newRunCommand().Flags()
		if err := f.Parse(tc.args); err != nil {
			t.Fatalf("%v: %v", tc.args, err)
		}
		if got, err := f.GetBool("mps-multi-user"); err != nil || got != tc.want {
			t.Errorf("%v: --mps-multi-user %v (%v), want %v", tc.args, got, err, tc.want)
		}
	}
}

// The daemon pod finds the driver's nvidia-cuda-mps-control under the
// driver root it has mounted, and says where it looked when it is missing.
func TestMPSDaemonCommandFindsControlBinary(t *testing.T) {
	root := t.TempDir()
	t.Setenv("CUDA_MPS_PIPE_DIRECTORY", filepath.Join(t.TempDir(), "pipe"))
	_, err := runCommand(t, "mps-daemon", "--driver-root", root)
	for _, want := range []string{"nvidia-cuda-mps-control not found under the NVIDIA driver root " + root, filepath.Join(root, "usr/bin/nvidia-cuda-mps-control"), "--mps-control-binary"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error %v lacks %q", err, want)
		}
	}
	t.Setenv("NVIDIA_DRIVER_ROOT", "/driver-root")
	f := newMPSDaemonCommand().Flags()
	if got, _ := f.GetString("driver-root"); got != "/driver-root" {
		t.Errorf("--driver-root defaults to %q, want $NVIDIA_DRIVER_ROOT", got)
	}
}
