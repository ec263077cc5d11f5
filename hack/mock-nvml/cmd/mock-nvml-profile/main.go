// Command mock-nvml-profile converts a fake-GPU profile (a built-in name or
// a YAML file, docs/fake-gpus.md) into the device table of the mock
// libnvidia-ml.so.1: the flat file TANGRAM_MOCK_NVML_DEVICES_FILE names, or
// (-format c) the C source the build compiles in as the default; with
// -sysfs it also writes a mock /sys with the cards' PCI devices; with
// -mig-minors the kernel module's /proc/driver/nvidia-caps/mig-minors as
// the real driver writes it (nvcaps.GenerateMIGMinors).
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/tangram-gpu/tangram/pkg/gpu/fakegpu"
	"github.com/tangram-gpu/tangram/pkg/gpu/nvcaps"

	mocknvml "github.com/tangram-gpu/tangram/hack/mock-nvml"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "mock-nvml-profile:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	fs := flag.NewFlagSet("mock-nvml-profile", flag.ContinueOnError)
	profile := fs.String("profile", "dgx-h100", "built-in profile name or profile YAML file")
	node := fs.String("node-name", "mock-node", "node name the cards' UUIDs are derived from (as with --fake-profile on that node)")
	format := fs.String("format", "flat", "flat (for TANGRAM_MOCK_NVML_DEVICES_FILE) or c (the library's built-in table)")
	stateDir := fs.String("c-state-dir", "/var/lib/tangram/mock-nvml", "with -format c: the library's default state directory")
	out := fs.String("o", "", "output file (default: standard output)")
	sysfs := fs.String("sysfs", "", "also lay out the cards' PCI devices under this directory (a mock /sys)")
	migMinors := fs.String("mig-minors", "", "also write the NVIDIA kernel module's mig-minors, as the real driver does, to this file (a mock /proc/driver/nvidia-caps/mig-minors)")
	driver := fs.String("driver-version", "", "serve this NVIDIA driver version instead of the profile's, e.g. 615.23.01 for a driver with per-cgroup memory limits and MPS v3")
	if err := fs.Parse(args); err != nil {
		return err
	}
	p, err := loadProfile(*profile)
	if err != nil {
		return err
	}
	if *driver != "" {
		for i := range p.GPUs {
			p.GPUs[i].DriverVersion = *driver
		}
	}
	devices, err := mocknvml.Flatten(p, *node)
	if err != nil {
		return err
	}
	if *sysfs != "" {
		if err := mocknvml.WriteSysfs(*sysfs, p); err != nil {
			return err
		}
	}
	if *migMinors != "" {
		if err := os.MkdirAll(filepath.Dir(*migMinors), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(*migMinors, nvcaps.GenerateMIGMinors(), 0o444); err != nil {
			return fmt.Errorf("writing %s: %w", *migMinors, err)
		}
	}
	var data []byte
	switch *format {
	case "flat":
		data = devices
	case "c":
		data = []byte(mocknvml.CSource(devices, *stateDir))
	default:
		return fmt.Errorf("-format=%q: want flat or c", *format)
	}
	if *out == "" {
		_, err = os.Stdout.Write(data)
		return err
	}
	if err := os.WriteFile(*out, data, 0o644); err != nil {
		return fmt.Errorf("writing %s: %w", *out, err)
	}
	return nil
}

// loadProfile takes a path when the name looks like one, a built-in name
// otherwise.
func loadProfile(name string) (*fakegpu.Profile, error) {
	if strings.ContainsAny(name, "/.") {
		return fakegpu.LoadProfileFile(name)
	}
	return fakegpu.BuiltinProfile(name)
}
