package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// writeScript writes an executable shell script.
func writeScript(t *testing.T, path, body string) {
	t.Helper()
	if err := os.WriteFile(path, []byte("#!/bin/sh\n"+body), 0o755); err != nil {
		t.Fatal(err)
	}
}

// Without a GPU, make gpu-acceptance stops in its preflight, before building
// or touching a cluster, and says why.
func TestRunFailsAtOnceWithoutAGPU(t *testing.T) {
	dir := t.TempDir()
	noDriver := filepath.Join(dir, "nvidia-smi-no-driver")
	writeScript(t, noDriver, "echo \"NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.\"; exit 9\n")
	noGPU := filepath.Join(dir, "nvidia-smi-no-gpu")
	writeScript(t, noGPU, "echo 'No devices were found'; exit 0\n")
	tests := []struct {
		name, nvidiaSMI string
		want            []string
	}{
		{name: "no nvidia-smi", nvidiaSMI: filepath.Join(dir, "absent", "nvidia-smi"), want: []string{"needs a node with an NVIDIA GPU", "is not on PATH", "docs/nvml.md"}},
		{name: "driver not loaded", nvidiaSMI: noDriver, want: []string{"needs a working NVIDIA driver", "couldn't communicate with the NVIDIA driver"}},
		{name: "no GPU listed", nvidiaSMI: noGPU, want: []string{"lists none", "No devices were found"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cmd := exec.Command("bash", "run.sh")
			cmd.Env = append(os.Environ(), "NVIDIA_SMI="+tc.nvidiaSMI, "TANGRAM_CACHE="+t.TempDir())
			out, err := cmd.CombinedOutput()
			if err == nil {
				t.Fatalf("run.sh succeeded without a GPU:\n%s", out)
			}
			for _, w := range tc.want {
				if !bytes.Contains(out, []byte(w)) {
					t.Errorf("output lacks %q:\n%s", w, out)
				}
			}
			// Stopped before building anything or writing a report.
			if bytes.Contains(out, []byte("building")) || bytes.Contains(out, []byte("report:")) {
				t.Errorf("run.sh went past its preflight:\n%s", out)
			}
		})
	}
}

// fakeCUDA is a stand-in libcuda.so.1 for cuda-alloc: FAKE_CUDA_DEVICES
// devices, FAKE_CUDA_LIMIT_MIB of memory that cuMemAlloc_v2 hands out before
// refusing with CUDA_ERROR_OUT_OF_MEMORY (2), and cuInit failing with
// CUDA_ERROR_NO_DEVICE (100) when FAKE_CUDA_INIT_FAILS is set.
const fakeCUDA = `
#include <stdlib.h>
static unsigned long long used, limit;
static long env(const char *k, long d) { const char *v = getenv(k); return v ? atol(v) : d; }
int cuInit(unsigned f) { limit = (unsigned long long)env("FAKE_CUDA_LIMIT_MIB", 1024) << 20; return getenv("FAKE_CUDA_INIT_FAILS") ? 100 : 0; }
int cuDeviceGetCount(int *n) { *n = (int)env("FAKE_CUDA_DEVICES", 1); return 0; }
int cuDeviceGet(int *d, int i) { *d = i; return 0; }
int cuCtxCreate_v2(void **c, unsigned f, int d) { *c = (void *)1; return 0; }
int cuMemGetInfo_v2(size_t *free, size_t *total) { *total = limit; *free = limit - used; return 0; }
int cuMemAlloc_v2(unsigned long long *p, size_t n) { if (used + n > limit) return 2; used += n; *p = used; return 0; }
`

func TestCudaAlloc(t *testing.T) {
	dir := t.TempDir()
	src := filepath.Join(dir, "fake.c")
	if err := os.WriteFile(src, []byte(fakeCUDA), 0o644); err != nil {
		t.Fatal(err)
	}
	libDir := filepath.Join(dir, "lib")
	if err := os.Mkdir(libDir, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"-shared", "-fPIC", "-Wl,-soname,libcuda.so.1", "-o", filepath.Join(libDir, "libcuda.so.1"), src},
		{"-O2", "-Wall", "-Werror", "-o", filepath.Join(dir, "cuda-alloc"), filepath.Join("cuda-alloc", "cuda-alloc.c"), "-ldl"},
	} {
		if out, err := exec.Command("gcc", args...).CombinedOutput(); err != nil {
			t.Fatalf("gcc %v: %v\n%s", args, err, out)
		}
	}
	tests := []struct {
		name     string
		args     []string
		env      []string
		wantCode int
		want     string
	}{
		{name: "fits", args: []string{"700"}, env: []string{"FAKE_CUDA_LIMIT_MIB=1024"},
			want: "cuda-alloc: devices=1 total_mib=1024 free_mib=1024 allocated_mib=700 refused=0 error=0"},
		{name: "refused past the limit", args: []string{"1500"}, env: []string{"FAKE_CUDA_LIMIT_MIB=1024"},
			want: "cuda-alloc: devices=1 total_mib=1024 free_mib=1024 allocated_mib=1024 refused=1 error=2"},
		{name: "two devices", args: []string{"256"}, env: []string{"FAKE_CUDA_DEVICES=2"},
			want: "devices=2 total_mib=1024 free_mib=1024 allocated_mib=256 refused=0"},
		{name: "cuInit fails", args: []string{"256"}, env: []string{"FAKE_CUDA_INIT_FAILS=1"}, wantCode: 2, want: "cuInit failed with CUresult 100"},
		{name: "bad argument", args: []string{"lots"}, wantCode: 64, want: "not a positive number"},
		{name: "no argument", wantCode: 64, want: "usage: cuda-alloc TRY_MIB"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cmd := exec.Command(filepath.Join(dir, "cuda-alloc"), tc.args...)
			cmd.Env = append(append(os.Environ(), "LD_LIBRARY_PATH="+libDir), tc.env...)
			out, err := cmd.CombinedOutput()
			code := 0
			if exitErr, ok := err.(*exec.ExitError); ok {
				code = exitErr.ExitCode()
			} else if err != nil {
				t.Fatal(err)
			}
			if code != tc.wantCode || !strings.Contains(string(out), tc.want) {
				t.Errorf("exit %d, output %q; want exit %d and %q", code, out, tc.wantCode, tc.want)
			}
		})
	}
}

func TestSubcommands(t *testing.T) {
	dir := t.TempDir()
	smi := filepath.Join("..", "..", "pkg", "gpuacceptance", "testdata", "nvidia-smi-2xh100.xml")
	slicesFile := filepath.Join(dir, "slices.json")
	if err := os.WriteFile(slicesFile, []byte(`{"apiVersion":"v1","kind":"List","items":[]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	logFile := filepath.Join(dir, "pod.log")
	if err := os.WriteFile(logFile, []byte("cuda-alloc: devices=1 total_mib=81559 free_mib=81000 allocated_mib=20480 refused=1 error=2\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name       string
		args       []string
		wantFailed int
		want       string
		wantErr    string
	}{
		{name: "compare: plugin published nothing", args: []string{"compare", "--slices", slicesFile, "--smi", smi}, wantFailed: 3, want: "(missing)"},
		{name: "judge: share enforced", args: []string{"judge", "--shape", "memory-share", "--try-mib", "22528", "--share-mib", "20480", "--log", logFile}, want: "ok     memory-share"},
		{name: "judge: whole card refused", args: []string{"judge", "--shape", "whole-card", "--try-mib", "73403", "--log", logFile}, wantFailed: 1, want: "FAIL   whole-card"},
		{name: "unknown subcommand", args: []string{"bless"}, wantErr: "unknown subcommand"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var out bytes.Buffer
			failed, err := run(tc.args, &out)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if failed != tc.wantFailed || !strings.Contains(out.String(), tc.want) {
				t.Errorf("failed = %d, output:\n%s\nwant %d failed and %q", failed, out.String(), tc.wantFailed, tc.want)
			}
		})
	}
}
