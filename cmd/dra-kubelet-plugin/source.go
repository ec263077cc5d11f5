package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"

	"github.com/spf13/pflag"
	"k8s.io/dynamic-resource-allocation/deviceattribute"

	"github.com/tangram-gpu/tangram/pkg/gpu"
	"github.com/tangram-gpu/tangram/pkg/gpu/fakegpu"
	"github.com/tangram-gpu/tangram/pkg/gpu/nvmlgpu"
	"github.com/tangram-gpu/tangram/pkg/plugin/driverroot"
)

// gpuSourceFlags chooses where the plugin learns about the node's GPUs:
// NVML on a real node, or a fake profile (built in or from a file) on a
// machine without GPUs. Every subcommand that needs the inventory embeds it.
type gpuSourceFlags struct {
	NodeName        string
	FakeProfile     string
	FakeProfileFile string
	// DriverRoot is where NVML and the driver's programs are looked up.
	DriverRoot string
	// SysfsRoot is the /sys the PCIe roots of real cards are read from.
	SysfsRoot string
}

// AddFlags registers --node-name, --fake-profile and --fake-profile-file.
func (f *gpuSourceFlags) AddFlags(flags *pflag.FlagSet) {
	flags.StringVar(&f.NodeName, "node-name", "", "name of this node (default: $NODE_NAME)")
	flags.StringVar(&f.FakeProfile, "fake-profile", "", fmt.Sprintf("use fake GPUs from a built-in profile (%v) instead of NVML", fakegpu.BuiltinProfileNames()))
	flags.StringVar(&f.FakeProfileFile, "fake-profile-file", "", "use fake GPUs from a profile file (format: docs/fake-gpus.md) instead of NVML")
	flags.StringVar(&f.DriverRoot, "driver-root", driverroot.FromEnv(), "root of the NVIDIA driver installation as this process sees it (default: $NVIDIA_DRIVER_ROOT, else /); real GPUs only (docs/configuration.md)")
	flags.StringVar(&f.SysfsRoot, "sysfs-root", deviceattribute.SysfsRoot, "the /sys the PCIe roots of real cards are read from (e.g. a mock driver root's sys); real GPUs only")
}

// Complete fills defaults from the environment and checks the combination.
// Call it before NodeName or Open.
func (f *gpuSourceFlags) Complete() error {
	if f.NodeName == "" {
		f.NodeName = os.Getenv("NODE_NAME")
	}
	if f.NodeName == "" {
		return errors.New("the node name is unknown: pass --node-name or set NODE_NAME")
	}
	if f.FakeProfile != "" && f.FakeProfileFile != "" {
		return errors.New("--fake-profile and --fake-profile-file are mutually exclusive: pass one of them, or neither to use NVML")
	}
	return nil
}

// Fake reports whether the cards are fake.
func (f *gpuSourceFlags) Fake() bool { return f.FakeProfile != "" || f.FakeProfileFile != "" }

// Open returns the GPU source and a function to call when done with it.
func (f *gpuSourceFlags) Open(ctx context.Context) (gpu.Source, func(), error) {
	switch {
	case f.FakeProfile != "":
		p, err := fakegpu.BuiltinProfile(f.FakeProfile)
		if err != nil {
			return nil, nil, fmt.Errorf("--fake-profile: %w", err)
		}
		return fakegpu.NewFakeSource(f.NodeName, p), func() {}, nil
	case f.FakeProfileFile != "":
		p, err := fakegpu.LoadProfileFile(f.FakeProfileFile)
		if err != nil {
			return nil, nil, fmt.Errorf("--fake-profile-file: %w", err)
		}
		return fakegpu.NewFakeSource(f.NodeName, p), func() {}, nil
	default:
		if !nvmlgpu.Available() {
			// Say so before looking for a library this binary cannot load.
			return nil, nil, fmt.Errorf("opening NVML (on a machine without GPUs pass --fake-profile): %w", nvmlgpu.ErrNVMLUnavailable)
		}
		lib, err := driverroot.Root{Path: f.DriverRoot}.NVMLLibraryPath()
		if err != nil {
			return nil, nil, fmt.Errorf("opening NVML (on a machine without GPUs pass --fake-profile): %w", err)
		}
		src, closeNVML, err := nvmlgpu.Open(ctx, lib)
		if err != nil {
			return nil, nil, fmt.Errorf("opening NVML (on a machine without GPUs pass --fake-profile): %w", err)
		}
		return src, closeNVML, nil
	}
}

// Sysfs is the host's /sys (--sysfs-root) for resolving PCIe roots of real
// cards; nil for fake cards, whose made-up bus IDs must not be looked up on
// the host.
func (f *gpuSourceFlags) Sysfs() fs.ReadLinkFS {
	if f.Fake() {
		return nil
	}
	if sysfs, ok := os.DirFS(cmp.Or(f.SysfsRoot, deviceattribute.SysfsRoot)).(fs.ReadLinkFS); ok {
		return sysfs
	}
	return nil
}
