// Package fakegpu is the gpu.Source of nodes without GPUs: cards described
// by a profile, built in (profiles/*.yaml) or read from a YAML file whose
// decoding reports every problem with its line (docs/fake-gpus.md). It is
// apart from pkg/gpu so that what describes a real card does not carry the
// profile format.
package fakegpu

import (
	"fmt"
	"os"
	"strings"
)

// Profile describes the cards of a fake node. It comes from a built-in
// profile (BuiltinProfile) or a YAML file (LoadProfileFile, ParseProfile);
// docs/fake-gpus.md documents the file format.
type Profile struct {
	// Name is the built-in profile name, the file's "name:" or its path.
	Name string
	// GPUs are the cards, with the file's defaults already applied and
	// NVLinks made symmetric.
	GPUs []ProfileGPU
}

// ProfileGPU is one card of a Profile. Optional fields left empty are
// reported empty by the fake source, except Minor (defaults to Index).
type ProfileGPU struct {
	Index int `yaml:"index"`
	// Minor is the /dev/nvidia<Minor> number; nil means "same as Index".
	Minor       *int   `yaml:"minor,omitempty"`
	ProductName string `yaml:"productName"`
	// Memory is a Kubernetes quantity, e.g. "80Gi".
	Memory string `yaml:"memory"`
	// PCIBusID is "domain:bus:device.function", e.g. "0000:18:00.0".
	PCIBusID string `yaml:"pciBusID,omitempty"`
	NUMANode *int   `yaml:"numaNode,omitempty"`
	// NVLinks are the indexes of the cards this one reaches over NVLink
	// (directly or through an NVSwitch).
	NVLinks               []int  `yaml:"nvlinks,omitempty"`
	Brand                 string `yaml:"brand,omitempty"`
	Architecture          string `yaml:"architecture,omitempty"`
	CUDAComputeCapability string `yaml:"cudaComputeCapability,omitempty"`
	DriverVersion         string `yaml:"driverVersion,omitempty"`
	CUDADriverVersion     string `yaml:"cudaDriverVersion,omitempty"`
	FabricCliqueID        string `yaml:"fabricCliqueID,omitempty"`
	// MIGType makes the card MIG-capable with the profiles of the MIG
	// user guide's table for this card type (MIGTypes: a100-40gb,
	// a100-80gb, h100-80gb, h200-141gb); empty: the card cannot do MIG.
	MIGType string `yaml:"migType,omitempty"`
	// MIGMode is the current MIG mode, "enabled" or "disabled" (default).
	MIGMode string `yaml:"migMode,omitempty"`
	// MIGPendingMode is the mode after the next reset; default MIGMode.
	MIGPendingMode string `yaml:"migPendingMode,omitempty"`
}

// The fake driver: a profile that names no brand or driver gets these, so
// that a fake node looks like a node with a current NVIDIA driver.
const (
	DefaultFakeBrand             = "Nvidia"
	DefaultFakeDriverVersion     = "580.95.05"
	DefaultFakeCUDADriverVersion = "13.0"
)

// ProfileProblem is one thing wrong in a profile file.
type ProfileProblem struct {
	// Line is the 1-based line in the file; 0 when the problem has no
	// single place (e.g. an empty file).
	Line int
	// Field is the path of the offending field, e.g. "gpus[1].memory".
	Field string
	// Message says what is wrong and how to fix it.
	Message string
}

func (p ProfileProblem) String() string {
	var b strings.Builder
	if p.Line > 0 {
		fmt.Fprintf(&b, "line %d: ", p.Line)
	}
	if p.Field != "" {
		b.WriteString(p.Field)
		b.WriteString(": ")
	}
	b.WriteString(p.Message)
	return b.String()
}

// ProfileError lists every problem found in a profile, in file order, so a
// user can fix them all in one go.
type ProfileError struct {
	// Source names the profile ("gpus.yaml", "builtin dgx-h100"); empty for
	// ParseProfile.
	Source   string
	Problems []ProfileProblem
}

// Error prints one problem per line, each prefixed with the source so that
// every line can be read (and grepped) on its own.
func (e *ProfileError) Error() string {
	lines := make([]string, len(e.Problems))
	for i, p := range e.Problems {
		if e.Source != "" {
			lines[i] = "profile " + e.Source + ": " + p.String()
		} else {
			lines[i] = p.String()
		}
	}
	return strings.Join(lines, "\n")
}

// ParseProfile reads a profile from YAML. Unknown fields, wrong types and
// inconsistent cards are all rejected with a *ProfileError naming the line
// and the field.
func ParseProfile(data []byte) (*Profile, error) {
	d := newProfileDecoder()
	p := d.decode(data)
	d.validateDecoded(p)
	if len(d.problems) > 0 {
		return nil, &ProfileError{Problems: d.sortedProblems()}
	}
	symmetriseNVLinks(p)
	return p, nil
}

// LoadProfileFile reads and parses a profile file. The profile is named by
// the file's "name:" field, or else by the path.
func LoadProfileFile(path string) (*Profile, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading profile %s: %w", path, err)
	}
	p, err := ParseProfile(data)
	if err != nil {
		if pe, ok := err.(*ProfileError); ok {
			pe.Source = path
			return nil, pe
		}
		return nil, fmt.Errorf("profile %s: %w", path, err)
	}
	if p.Name == "" {
		p.Name = path
	}
	return p, nil
}
