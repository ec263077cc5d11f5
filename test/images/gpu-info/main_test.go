package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

func TestReport(t *testing.T) {
	tests := []struct {
		name    string
		environ []string
		devices []string
		shm     []string
		extra   []string
		want    string
	}{
		{
			name:    "only GPU variables, sorted",
			environ: []string{"PATH=/bin", "TANGRAM_CLAIM=abc", "NVIDIA_VISIBLE_DEVICES=GPU-1", "CUDA_MPS_PIPE_DIRECTORY=/mps", "HOME=/"},
			devices: []string{"/dev/nvidia0", "/dev/nvidiactl"},
			shm:     []string{"gpu-info-a", "other"},
			want: "gpu-info: begin\nCUDA_MPS_PIPE_DIRECTORY=/mps\nNVIDIA_VISIBLE_DEVICES=GPU-1\nTANGRAM_CLAIM=abc\n" +
				"DEVICE_NODES=/dev/nvidia0,/dev/nvidiactl\nSHM_FILES=gpu-info-a,other\ngpu-info: end\n",
		},
		{
			name:    "the MPS pipe directory's write test",
			environ: []string{"CUDA_MPS_PIPE_DIRECTORY=/mps"},
			extra:   []string{"MPS_PIPE_WRITE=read-only file system"},
			want:    "gpu-info: begin\nCUDA_MPS_PIPE_DIRECTORY=/mps\nDEVICE_NODES=\nSHM_FILES=\nMPS_PIPE_WRITE=read-only file system\ngpu-info: end\n",
		},
		{
			name:    "nothing injected",
			environ: []string{"PATH=/bin"},
			want:    "gpu-info: begin\nDEVICE_NODES=\nSHM_FILES=\ngpu-info: end\n",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var buf bytes.Buffer
			report(&buf, tc.environ, tc.devices, tc.shm, tc.extra...)
			if got := buf.String(); got != tc.want {
				t.Errorf("report() =\n%s\nwant\n%s", got, tc.want)
			}
		})
	}
}

func TestShmFiles(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "left-by-another"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	host, _ := os.Hostname()
	got := shmFiles(dir)
	want := []string{"gpu-info-" + host, "left-by-another"}
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Errorf("shmFiles = %v, want %v", got, want)
	}
	if shmFiles(filepath.Join(dir, "missing")) != nil {
		t.Error("a missing directory must list nothing")
	}
}

func TestTryWrite(t *testing.T) {
	dir := t.TempDir()
	if got := tryWrite(dir); got != "ok" {
		t.Errorf("tryWrite(writable) = %q", got)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Errorf("tryWrite left %v", entries)
	}
	if got := tryWrite(filepath.Join(dir, "missing")); got != "no such file or directory" {
		t.Errorf("tryWrite(missing) = %q", got)
	}
}

func TestCapNodes(t *testing.T) {
	if got := capNodes(filepath.Join(t.TempDir(), "absent")); got != nil {
		t.Errorf("capNodes(absent dir) = %v, want none", got)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "nvidia-cap9"), nil, 0o444); err != nil {
		t.Fatal(err)
	}
	want := []string{filepath.Join(dir, "nvidia-cap9") + "=not a device"}
	// A character device, where the test may make one (root): its major and minor.
	if err := syscall.Mknod(filepath.Join(dir, "nvidia-cap66"), syscall.S_IFCHR|0o444, int(510<<8|66)); err == nil {
		want = append([]string{filepath.Join(dir, "nvidia-cap66") + "=510:66"}, want...)
	} else {
		t.Logf("no character device made (%v): only the regular file is checked", err)
	}
	if got := capNodes(dir); strings.Join(got, ",") != strings.Join(want, ",") {
		t.Errorf("capNodes = %v, want %v", got, want)
	}
}
