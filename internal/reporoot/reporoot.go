// Package reporoot finds this repository's checkout from the working
// directory, for tests and dev tools that read files of the tree (the chart,
// the dashboard, the mock NVML library's sources).
//
// make builds with -trimpath (docs/testing.md: one compile per mode), so
// runtime.Caller names files by import path, not by their place on disk,
// and cannot be used to find the tree.
package reporoot

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// Module is the main module's path, as go.mod declares it.
const Module = "github.com/tangram-gpu/tangram"

// Find returns the checkout's root: the nearest directory at or above the
// working directory whose go.mod declares Module (a nested module, such as
// cmd/tangram-scheduler, is passed over).
func Find() (string, error) {
	wd, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("finding the repository root: %w", err)
	}
	return findFrom(wd)
}

func findFrom(dir string) (string, error) {
	for d := dir; ; {
		if declaresModule(filepath.Join(d, "go.mod")) {
			return d, nil
		}
		parent := filepath.Dir(d)
		if parent == d {
			return "", fmt.Errorf("no go.mod of %s at or above %s: run from inside a checkout of the repository", Module, dir)
		}
		d = parent
	}
}

func declaresModule(goMod string) bool {
	f, err := os.Open(goMod)
	if err != nil {
		return false
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if line := strings.TrimSpace(s.Text()); strings.HasPrefix(line, "module ") {
			return strings.Trim(strings.TrimSpace(strings.TrimPrefix(line, "module ")), `"`) == Module
		}
	}
	return false
}
