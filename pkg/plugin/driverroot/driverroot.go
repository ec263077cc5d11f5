// Package driverroot finds the NVIDIA driver's files (NVML, the MPS control
// binary, nvidia-cdi-hook) under the driver root the plugin is configured
// with, the way they are laid out on a node: "/" for a driver installed on
// the host, /run/nvidia/driver for the GPU operator's driver container, or
// hack/mock-driver-root's tree on a machine without GPUs.
//
// The plugin sees the root at one path (in the chart's pod: /driver-root)
// and the host at another (the chart's driverRoot); paths the container
// runtime reads, such as the hook in a CDI spec, must be host paths.
package driverroot

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// Standard places of the driver's files, relative to the root, in search
// order: the distributions' and the GPU operator's library and binary
// directories.
var (
	LibraryDirs = []string{
		"usr/lib64", "usr/lib/x86_64-linux-gnu", "usr/lib/aarch64-linux-gnu",
		"lib64", "lib/x86_64-linux-gnu", "lib/aarch64-linux-gnu", "usr/lib", "lib",
	}
	BinaryDirs = []string{"usr/bin", "usr/sbin", "bin", "sbin", "usr/local/bin"}
)

// Names of the files looked up.
const (
	NVMLLibrary    = "libnvidia-ml.so.1"
	MPSControl     = "nvidia-cuda-mps-control"
	NVIDIACDIHook  = "nvidia-cdi-hook"
	EnvDriverRoot  = "NVIDIA_DRIVER_ROOT"
	defaultRootDir = "/"
)

// Root is a driver root.
type Root struct {
	// Path is the root as this process sees it, e.g. /driver-root.
	Path string
	// HostPath is the same root as the host sees it, e.g.
	// /run/nvidia/driver; empty means the same as Path.
	HostPath string
}

// FromEnv returns the root named by $NVIDIA_DRIVER_ROOT, or "/".
func FromEnv() string {
	if root := os.Getenv(EnvDriverRoot); root != "" {
		return root
	}
	return defaultRootDir
}

// NotFoundError says which file was looked for and every path tried.
type NotFoundError struct {
	File  string
	Root  string
	Tried []string
}

func (e *NotFoundError) Error() string {
	return fmt.Sprintf("%s not found under the NVIDIA driver root %s (tried %s): set --driver-root (chart: driverRoot) to where the driver is installed: / for a driver on the host, /run/nvidia/driver for the GPU operator's driver container",
		e.File, e.Root, strings.Join(e.Tried, ", "))
}

func (r Root) root() string {
	if r.Path == "" {
		return defaultRootDir
	}
	return r.Path
}

func (r Root) find(dirs []string, name string, executable bool) (string, error) {
	if name == "" || strings.Contains(name, "/") {
		return "", fmt.Errorf("looking up %q under the driver root: want a file name", name)
	}
	root := r.root()
	tried := make([]string, 0, len(dirs))
	for _, dir := range dirs {
		path := filepath.Join(root, dir, name)
		tried = append(tried, path)
		// Stat follows the driver's relative links (libnvidia-ml.so.1 ->
		// libnvidia-ml.so.<version>); a dangling one counts as missing.
		fi, err := os.Stat(path)
		if err != nil || !fi.Mode().IsRegular() || (executable && fi.Mode().Perm()&0o111 == 0) {
			continue
		}
		return path, nil
	}
	return "", &NotFoundError{File: name, Root: root, Tried: tried}
}

// NVMLLibraryPath returns libnvidia-ml.so.1 in the first standard library
// directory that has it.
func (r Root) NVMLLibraryPath() (string, error) {
	return r.find(LibraryDirs, NVMLLibrary, false)
}

// Executable returns the named program in the first standard binary
// directory that has it.
func (r Root) Executable(name string) (string, error) {
	return r.find(BinaryDirs, name, true)
}

// ToHost turns a path under Path into the same file's host path.
func (r Root) ToHost(path string) (string, error) {
	root := filepath.Clean(r.root())
	host := r.HostPath
	if host == "" {
		host = root
	}
	rel, err := filepath.Rel(root, filepath.Clean(path))
	if err != nil || rel == ".." || strings.HasPrefix(rel, "../") || filepath.IsAbs(rel) {
		return "", fmt.Errorf("%s is not under the driver root %s", path, root)
	}
	return filepath.Join(host, rel), nil
}

// ErrNotFound matches every *NotFoundError.
var ErrNotFound = errors.New("not found under the driver root")

// Is lets errors.Is(err, ErrNotFound) match.
func (e *NotFoundError) Is(target error) bool { return target == ErrNotFound }

// ToolEnv is the environment to run one of the driver's programs (such as
// nvidia-cuda-mps-control) with the driver's own libraries, as NVIDIA's DRA
// driver does: LD_LIBRARY_PATH of the root's library directories and PATH
// with its binary directories first. For the host's own root ("/") it is
// empty: the host's loader already finds the driver.
func (r Root) ToolEnv() []string {
	root := filepath.Clean(r.root())
	if root == "/" {
		return nil
	}
	existing := func(dirs []string) []string {
		var out []string
		for _, dir := range dirs {
			path := filepath.Join(root, dir)
			if fi, err := os.Stat(path); err == nil && fi.IsDir() {
				out = append(out, path)
			}
		}
		return out
	}
	var env []string
	if libs := existing(LibraryDirs); len(libs) > 0 {
		env = append(env, "LD_LIBRARY_PATH="+strings.Join(libs, ":"))
	}
	if bins := existing(BinaryDirs); len(bins) > 0 {
		path := strings.Join(bins, ":")
		if host := os.Getenv("PATH"); host != "" {
			path += ":" + host
		}
		env = append(env, "PATH="+path)
	}
	return env
}
