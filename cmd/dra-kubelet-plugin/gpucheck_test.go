package main

import (
	"errors"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestGPUCheckWithoutDriver: on a machine without the driver every check
// still runs and reports, the reports are written, the summary is the last
// line and the command fails.
func TestGPUCheckWithoutDriver(t *testing.T) {
	for _, tc := range []struct {
		name       string
		subcommand string
		checks     int
	}{
		{name: "all checks", subcommand: "gpu-check", checks: 14},
		{name: "MPS only", subcommand: "mps-check", checks: 8},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "report")
			stdout, err := runCommand(t, tc.subcommand, "--out", out, "--driver-root", t.TempDir())
			if !errors.Is(err, errChecksFailed) {
				t.Fatalf("error %v, want %v", err, errChecksFailed)
			}
			lines := strings.Split(strings.TrimSpace(stdout), "\n")
			if last := lines[len(lines)-1]; last != "0 passed, 1 failed, "+itoa(tc.checks-1)+" skipped" {
				t.Errorf("last line %q\n%s", last, stdout)
			}
			if n := strings.Count(stdout, "==> ["); n != tc.checks {
				t.Errorf("%d checks ran, want %d", n, tc.checks)
			}
			for _, ext := range []string{".md", ".json"} {
				files, _ := filepath.Glob(filepath.Join(out, "gpu-check-no-gpu-driver-unknown-kernel-*"+ext))
				if len(files) != 1 {
					t.Errorf("want one %s report in %s, got %v", ext, out, files)
				}
			}
		})
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{want: "--out is required"},
		{args: []string{"--share-mib=0"}, want: "--share-mib=0: the clients' memory limit must be positive"},
		{args: []string{"--share-mib=-2048"}, want: "--share-mib=-2048"},
		{args: []string{"--timeout=-1m"}, want: "--timeout=-1m0s: the run needs a positive time limit"},
	} {
		args := append([]string{"gpu-check"}, tc.args...)
		if len(tc.args) > 0 {
			args = append(args, "--out", filepath.Join(t.TempDir(), "report"))
		}
		if _, err := runCommand(t, args...); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: error %v, want one containing %q", tc.args, err, tc.want)
		}
	}
}

func itoa(i int) string { return strconv.Itoa(i) }
