// Package nvcaps reads the NVIDIA kernel module's capability files and
// computes a MIG device's device nodes, as NVIDIA's MIG user guide
// ("Device Nodes and Capabilities") documents them: access to a GPU
// instance and to a compute instance goes through the capability device
// nodes /dev/nvidia-caps/nvidia-cap<MINOR>, the minors listed in
// /proc/driver/nvidia-caps/mig-minors ("<cap> <minor>" per line, caps
// config, monitor, gpu<G>/gi<I>/access and gpu<G>/gi<I>/ci<C>/access, G the
// parent card's device minor), the major the nvidia-caps line of
// /proc/devices (dynamic).
//
// Parsing and computing are pure; Read is a thin helper that reads both
// files under a proc root.
// docs/gpu-reports/h200-580.159.04-mig-caps.txt is the real reading the
// parsers and the generator (GenerateMIGMinors) are held to.
package nvcaps

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

const (
	// MIGMinorsFile is the kernel module's list of capability minors,
	// relative to the proc root (/proc).
	MIGMinorsFile = "driver/nvidia-caps/mig-minors"
	// DevicesFile is the kernel's list of device majors, relative to the
	// proc root.
	DevicesFile = "devices"
	// MIGCapabilitiesDir holds the driver-wide capability files (config,
	// monitor: ParseCapabilityFile), relative to the proc root.
	MIGCapabilitiesDir = "driver/nvidia/capabilities/mig"
	// CapsDeviceName is the name of the capability nodes' major in
	// /proc/devices.
	CapsDeviceName = "nvidia-caps"
	// CapsDir is where the capability nodes live: /dev/nvidia-caps/nvidia-cap<MINOR>.
	CapsDir = "/dev/nvidia-caps"
)

// Cap names a capability as mig-minors lists it.
type Cap string

// The driver-wide capabilities: creating and destroying MIG instances
// (config) and reading every instance (monitor).
const (
	ConfigCap  Cap = "config"
	MonitorCap Cap = "monitor"
)

// GPUInstanceCap is the access capability of GPU instance gi of the card
// whose device minor is gpuMinor.
func GPUInstanceCap(gpuMinor, gi int) Cap {
	return Cap(fmt.Sprintf("gpu%d/gi%d/access", gpuMinor, gi))
}

// ComputeInstanceCap is the access capability of compute instance ci of GPU
// instance gi of the card whose device minor is gpuMinor.
func ComputeInstanceCap(gpuMinor, gi, ci int) Cap {
	return Cap(fmt.Sprintf("gpu%d/gi%d/ci%d/access", gpuMinor, gi, ci))
}

// DevicePath is the capability node of minor: /dev/nvidia-caps/nvidia-cap<minor>.
func DevicePath(minor uint32) string {
	return fmt.Sprintf("%s/nvidia-cap%d", CapsDir, minor)
}

// MIGMinors maps each capability of mig-minors to its device minor.
type MIGMinors map[Cap]uint32

// ParseMIGMinors parses mig-minors: one "<cap> <minor>" per line. A
// malformed line, or a capability listed twice, is an error naming the line.
func ParseMIGMinors(data []byte) (MIGMinors, error) {
	out := MIGMinors{}
	err := eachLine(data, func(n int, line string) error {
		fields := strings.Fields(line)
		if len(fields) != 2 {
			return fmt.Errorf("line %d %q: want \"<capability> <minor>\"", n, line)
		}
		minor, err := strconv.ParseUint(fields[1], 10, 32)
		if err != nil {
			return fmt.Errorf("line %d %q: minor %q is not a number", n, line, fields[1])
		}
		c := Cap(fields[0])
		if _, dup := out[c]; dup {
			return fmt.Errorf("line %d %q: capability %s listed twice", n, line, c)
		}
		out[c] = uint32(minor)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("parsing %s: %w", MIGMinorsFile, err)
	}
	return out, nil
}

// Minor is the device minor of c, or an error saying it is not listed.
func (m MIGMinors) Minor(c Cap) (uint32, error) {
	minor, ok := m[c]
	if !ok {
		return 0, fmt.Errorf("capability %s is not in %s (%d capabilities listed)", c, MIGMinorsFile, len(m))
	}
	return minor, nil
}

// Devices are the character device majors of /proc/devices, by name
// (several names may share a major: nvidia and nvidiactl).
type Devices map[string]uint32

// ParseDevices parses /proc/devices: a "Character devices:" section, then
// a "Block devices:" one, each line "<major> <name>" (padded with spaces),
// blank lines between. Only the character devices are kept. A malformed
// line, or a device line before any section header, is an error naming
// the line.
func ParseDevices(data []byte) (Devices, error) {
	out := Devices{}
	section := ""
	err := eachLine(data, func(n int, line string) error {
		switch strings.TrimSpace(line) {
		case "":
			return nil
		case "Character devices:":
			section = "char"
			return nil
		case "Block devices:":
			section = "block"
			return nil
		}
		fields := strings.Fields(line)
		if len(fields) != 2 {
			return fmt.Errorf("line %d %q: want \"<major> <name>\"", n, line)
		}
		major, err := strconv.ParseUint(fields[0], 10, 32)
		if err != nil {
			return fmt.Errorf("line %d %q: major %q is not a number", n, line, fields[0])
		}
		switch section {
		case "":
			return fmt.Errorf("line %d %q: a device before the \"Character devices:\" header", n, line)
		case "char":
			out[fields[1]] = uint32(major)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("parsing /proc/%s: %w", DevicesFile, err)
	}
	return out, nil
}

// CharMajor is the major of the character device name.
func (d Devices) CharMajor(name string) (uint32, error) {
	major, ok := d[name]
	if !ok {
		return 0, fmt.Errorf("no character device %q in /proc/%s: the NVIDIA kernel module registers it when it loads", name, DevicesFile)
	}
	return major, nil
}

// CapabilityFile is a capability's file under
// /proc/driver/nvidia/capabilities (mig/config, mig/monitor,
// gpu<G>/mig/gi<I>/access ...): its node's minor and mode.
type CapabilityFile struct {
	DeviceFileMinor uint32
	// DeviceFileMode is the node's permission bits (256 = 0400 for config,
	// 292 = 0444 for monitor on the H200).
	DeviceFileMode uint32
}

// ParseCapabilityFile parses "DeviceFileMinor: 1\nDeviceFileMode: 256\n
// DeviceFileModify: 1\n"; a missing DeviceFileMinor or a malformed line
// is an error naming the line.
func ParseCapabilityFile(data []byte) (CapabilityFile, error) {
	var out CapabilityFile
	haveMinor := false
	err := eachLine(data, func(n int, line string) error {
		key, value, ok := strings.Cut(line, ":")
		if !ok {
			return fmt.Errorf("line %d %q: want \"<key>: <value>\"", n, line)
		}
		v, err := strconv.ParseUint(strings.TrimSpace(value), 10, 32)
		if err != nil {
			return fmt.Errorf("line %d %q: %q is not a number", n, line, strings.TrimSpace(value))
		}
		switch strings.TrimSpace(key) {
		case "DeviceFileMinor":
			out.DeviceFileMinor, haveMinor = uint32(v), true
		case "DeviceFileMode":
			out.DeviceFileMode = uint32(v)
		}
		return nil
	})
	if err == nil && !haveMinor {
		err = errors.New("no DeviceFileMinor line")
	}
	if err != nil {
		return CapabilityFile{}, fmt.Errorf("parsing a capability file: %w", err)
	}
	return out, nil
}

// eachLine calls f with each line and its number (from 1). A file's
// trailing newline ends its last line; it does not start an empty one.
func eachLine(data []byte, f func(n int, line string) error) error {
	s := bufio.NewScanner(bytes.NewReader(data))
	for n := 1; s.Scan(); n++ {
		if err := f(n, s.Text()); err != nil {
			return err
		}
	}
	return s.Err()
}

// Node is a character device node a container gets: its path in the
// container and its major and minor.
type Node struct {
	Path  string
	Major uint32
	Minor uint32
}

// MIGNodes are the capability nodes of one MIG device: its GPU instance's
// and its compute instance's access nodes, in that order.
func MIGNodes(minors MIGMinors, capsMajor uint32, gpuMinor, gi, ci int) ([]Node, error) {
	var nodes []Node
	for _, c := range []Cap{GPUInstanceCap(gpuMinor, gi), ComputeInstanceCap(gpuMinor, gi, ci)} {
		minor, err := minors.Minor(c)
		if err != nil {
			return nil, fmt.Errorf("MIG device (card minor %d, GPU instance %d, compute instance %d): %w", gpuMinor, gi, ci, err)
		}
		nodes = append(nodes, Node{Path: DevicePath(minor), Major: capsMajor, Minor: minor})
	}
	return nodes, nil
}

// Files are the two kernel files a MIG device's nodes are computed from,
// read under a proc root.
type Files struct {
	Minors    MIGMinors
	CapsMajor uint32
}

// Read reads and parses mig-minors and devices under procRoot (/proc on a
// node; the mock driver root's proc directory in tests). A missing file is
// an error that says which one, who publishes it and how to point elsewhere
// (flag names the option that sets procRoot).
func Read(procRoot, flag string) (Files, error) {
	minorsData, err := readProcFile(procRoot, MIGMinorsFile, "the NVIDIA kernel module publishes it when loaded (MIG needs driver R450 or later)", flag)
	if err != nil {
		return Files{}, err
	}
	devicesData, err := readProcFile(procRoot, DevicesFile, "every Linux kernel publishes it, so this is not a proc root", flag)
	if err != nil {
		return Files{}, err
	}
	minors, err := ParseMIGMinors(minorsData)
	if err != nil {
		return Files{}, fmt.Errorf("%s: %w", filepath.Join(procRoot, MIGMinorsFile), err)
	}
	devices, err := ParseDevices(devicesData)
	if err != nil {
		return Files{}, fmt.Errorf("%s: %w", filepath.Join(procRoot, DevicesFile), err)
	}
	major, err := devices.CharMajor(CapsDeviceName)
	if err != nil {
		return Files{}, fmt.Errorf("%s: %w", filepath.Join(procRoot, DevicesFile), err)
	}
	return Files{Minors: minors, CapsMajor: major}, nil
}

// readProcFile reads name under procRoot; publisher says who writes the
// file, for the error when it is missing.
func readProcFile(procRoot, name, publisher, flag string) ([]byte, error) {
	path := filepath.Join(procRoot, name)
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("reading %s: no such file; %s; if the node's proc is elsewhere, point %s at it: %w", path, publisher, flag, err)
	}
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", path, err)
	}
	return data, nil
}

// The layout of mig-minors as driver 580.159.04 writes it (H200 node,
// docs/gpu-reports/h200-580.159.04-mig-caps.txt): config 1, monitor 2, then
// for each of 32 card minors and each of 15 GPU instances the GPU
// instance's access cap followed by its 8 compute instances', minors
// counting up from 3. The file lists every possible instance, created or
// not.
const (
	genCards            = 32
	genGPUInstances     = 15
	genComputeInstances = 8
	genFirstMinor       = 3
)

// FormulaMinors are the minors of GPUInstanceCap(gpuMinor, gi) and
// ComputeInstanceCap(gpuMinor, gi, ci) in the layout GenerateMIGMinors
// writes: 3 + 135*gpuMinor + 9*gi, and that + 1 + ci.
func FormulaMinors(gpuMinor, gi, ci int) (giMinor, ciMinor uint32) {
	per := 1 + genComputeInstances
	g := genFirstMinor + gpuMinor*genGPUInstances*per + gi*per
	return uint32(g), uint32(g + 1 + ci)
}

// GenerateMIGMinors writes mig-minors as the real driver does (see the
// constants above), for mocks. A test holds it to the real file's sha256.
func GenerateMIGMinors() []byte {
	var b bytes.Buffer
	fmt.Fprintf(&b, "%s 1\n%s 2\n", ConfigCap, MonitorCap)
	for g := range genCards {
		for i := range genGPUInstances {
			giMinor, _ := FormulaMinors(g, i, 0)
			fmt.Fprintf(&b, "%s %d\n", GPUInstanceCap(g, i), giMinor)
			for c := range genComputeInstances {
				_, ciMinor := FormulaMinors(g, i, c)
				fmt.Fprintf(&b, "%s %d\n", ComputeInstanceCap(g, i, c), ciMinor)
			}
		}
	}
	return b.Bytes()
}
