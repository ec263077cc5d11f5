// Tests of the bundle's entry script, gpu-check/run, where it can be run
// without a GPU: its preflight. `make gpu-check-ci` runs them against a
// built bundle's copy (GPU_CHECK_RUN=bin/gpu-check/run).
package gpucheck_test

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tangram-gpu/tangram/pkg/gpucheck/probe"
)

// TestRunRefusesAtOnceWithoutGPU: run (this directory's, or the one at
// $GPU_CHECK_RUN) refuses at once, with status 2, naming each missing part,
// and writes no report.
func TestRunRefusesAtOnceWithoutGPU(t *testing.T) {
	run := "./run"
	if p := os.Getenv("GPU_CHECK_RUN"); p != "" {
		run = p
	}
	devs, err := filepath.Glob("/dev/nvidia[0-9]*")
	if err != nil {
		t.Fatal(err)
	}
	hasGPU := len(devs) > 0
	emptyRoot := t.TempDir()
	withNVML := t.TempDir()
	if err := os.MkdirAll(filepath.Join(withNVML, "lib64"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(withNVML, "lib64", "libnvidia-ml.so.1"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name       string
		args       []string
		driverRoot string
		want       []string
		absent     []string
	}{
		{
			name: "empty driver root", args: []string{"OUT"}, driverRoot: emptyRoot,
			want: []string{"cannot run the GPU check", "no libnvidia-ml.so.1 (the NVIDIA driver's NVML) under $NVIDIA_DRIVER_ROOT=" + emptyRoot, "no nvidia-smi under $NVIDIA_DRIVER_ROOT=" + emptyRoot, "docs/nvml.md#gpu-check-before-installing"},
		},
		{
			name: "NVML but no nvidia-smi", args: []string{"OUT"}, driverRoot: withNVML,
			want:   []string{"no nvidia-smi under $NVIDIA_DRIVER_ROOT=" + withNVML},
			absent: []string{"no libnvidia-ml.so.1"},
		},
		{
			name: "preflight only", args: []string{"--preflight"}, driverRoot: emptyRoot,
			want: []string{"cannot run the GPU check", "no nvidia-smi"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "report")
			args := make([]string, len(tc.args))
			for i, a := range tc.args {
				args[i] = strings.ReplaceAll(a, "OUT", out)
			}
			cmd := exec.Command(run, args...)
			cmd.Env = append(os.Environ(), "NVIDIA_DRIVER_ROOT="+tc.driverRoot)
			var stderr strings.Builder
			cmd.Stderr = &stderr
			start := time.Now()
			err := cmd.Run()
			took := time.Since(start)
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.ExitCode() != 2 {
				t.Fatalf("run %v: %v, want exit status 2; stderr:\n%s", tc.args, err, stderr.String())
			}
			if took > 5*time.Second {
				t.Errorf("took %s to refuse, want at once", took)
			}
			want := tc.want
			if !hasGPU {
				want = append(want, "no /dev/nvidia* device node")
			}
			for _, w := range want {
				if !strings.Contains(stderr.String(), w) {
					t.Errorf("stderr lacks %q:\n%s", w, stderr.String())
				}
			}
			for _, a := range tc.absent {
				if strings.Contains(stderr.String(), a) {
					t.Errorf("stderr says %q:\n%s", a, stderr.String())
				}
			}
			if _, err := os.Stat(out); err == nil {
				t.Errorf("%s was created although the check refused", out)
			}
		})
	}
}

// TestRunListsTheChecks: run's help names every check the plugin runs
// (the part of each name before the colon), in the order they run.
func TestRunListsTheChecks(t *testing.T) {
	out, err := exec.Command("./run", "--help").Output()
	if err != nil {
		t.Fatal(err)
	}
	help := strings.Join(strings.Fields(string(out)), " ")
	checks, done := probe.Checks(probe.Config{})
	defer done()
	at := 0
	for _, c := range checks {
		name, _, _ := strings.Cut(c.Name, ":")
		i := -1
		for _, end := range []string{" (", ",", "."} {
			if j := strings.Index(help[at:], " "+name+end); j >= 0 && (i < 0 || j < i) {
				i = j
			}
		}
		if i < 0 {
			t.Errorf("run --help does not list %q (as \"NAME (\", \"NAME,\" or \"NAME.\") after the checks before it", name)
			continue
		}
		at += i + len(name)
	}
	if t.Failed() {
		t.Logf("run --help:\n%s", out)
	}
}
