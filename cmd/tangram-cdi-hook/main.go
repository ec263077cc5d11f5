//go:build cgo

// Command tangram-cdi-hook is the CDI createRuntime hook that holds a share
// claim to its GPU memory, and a strict share to non-root containers:
// before the container's process runs, it sets
// the claim's hard limit on each of its cards, through NVML, on the cgroup
// of the container's pod, which bounds all of the pod's containers together
// (pkg/plugin/memlimit, docs/enforcement.md). The kubelet plugin installs it
// on the host and names it, with the claim, the cards and byte limits, in
// the CDI specs of shares on hard-enforcement nodes.
//
//	tangram-cdi-hook --claim <claim UID> --state-dir <dir> --limit <card UUID>=<bytes> [--limit …]
//	    [--driver-root /] [--cgroup-root /sys/fs/cgroup] [--proc-root /proc]
//	    [--non-root-class <class> --claim-name <namespace>/<name>]
//
// Any failure exits 1 with one line on stderr, which the container runtime
// reports as the reason the container did not start.
package main

import (
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/tangram-gpu/tangram/pkg/plugin/driverroot"
	"github.com/tangram-gpu/tangram/pkg/plugin/memlimit"
)

func main() {
	if err := run(os.Args[1:], os.Stdin); err != nil {
		if _, ok := errors.AsType[*memlimit.NonRootError](err); ok {
			fmt.Fprintf(os.Stderr, "tangram-cdi-hook: refusing to start the container: %v\n", err)
			os.Exit(1)
		}
		fmt.Fprintf(os.Stderr, "tangram-cdi-hook: GPU memory limit not set, refusing to start the container: %v\n", err)
		os.Exit(1)
	}
}

func run(args []string, stdin io.Reader) error {
	cfg, err := memlimit.ParseFlags(args)
	if err != nil {
		return err
	}
	cfg.Warn = os.Stderr
	lib, err := driverroot.Root{Path: cfg.DriverRoot}.NVMLLibraryPath()
	if err != nil {
		return err
	}
	return memlimit.Run(cfg, stdin, nvml.New(nvml.WithLibraryPath(lib)))
}
