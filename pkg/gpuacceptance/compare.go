// Package gpuacceptance holds the checks of `make gpu-acceptance` that need
// no cluster: what the kubelet plugin publishes for a real node
// (`dra-kubelet-plugin slices -o json`) against what the driver's own tool
// reports (`nvidia-smi -q -x`), card by card.
package gpuacceptance

import (
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/dynamic-resource-allocation/deviceattribute"

	"github.com/tangram-gpu/tangram/pkg/device"
	"github.com/tangram-gpu/tangram/pkg/gpucheck/nvidiasmi"
	"github.com/tangram-gpu/tangram/pkg/resourceslices"
)

// SMICard and SMIReport are the parts of `nvidia-smi -q -x` the checks
// read; gpu-check reads the same (pkg/gpucheck/nvidiasmi).
type (
	SMICard   = nvidiasmi.Card
	SMIReport = nvidiasmi.Report
)

// ParseSMI reads the XML of `nvidia-smi -q -x`.
func ParseSMI(r io.Reader) (SMIReport, error) { return nvidiasmi.Parse(r) }

// ParseSlices reads the List that `dra-kubelet-plugin slices -o json` prints
// and returns every device of every slice.
func ParseSlices(r io.Reader) ([]resourceapi.Device, error) {
	var list struct {
		Items []resourceapi.ResourceSlice `json:"items"`
	}
	if err := json.NewDecoder(r).Decode(&list); err != nil {
		return nil, fmt.Errorf("reading dra-kubelet-plugin slices -o json output: %w", err)
	}
	var devices []resourceapi.Device
	for _, s := range list.Items {
		devices = append(devices, s.Spec.Devices...)
	}
	return devices, nil
}

// Check is one compared value.
type Check struct {
	Card   string // UUID, or "node" for whole-node checks
	Field  string
	Plugin string // what the plugin publishes
	SMI    string // what nvidia-smi says
	OK     bool
}

// Compare matches the plugin's devices to nvidia-smi's cards by UUID and
// compares every value both report. Values are normalised only where the
// two spell the same fact differently (bus ID domain width, MiB vs bytes,
// "Hopper" vs "hopper").
func Compare(devices []resourceapi.Device, smi SMIReport) []Check {
	checks := []Check{{
		Card: "node", Field: "cards",
		Plugin: strconv.Itoa(len(devices)), SMI: strconv.Itoa(len(smi.Cards)),
		OK: len(devices) == len(smi.Cards),
	}}
	byUUID := map[string]resourceapi.Device{}
	for _, d := range devices {
		byUUID[stringAttr(d, device.AttrUUID)] = d
	}
	seen := map[string]bool{}
	for _, c := range smi.Cards {
		seen[c.UUID] = true
		d, ok := byUUID[c.UUID]
		if !ok {
			checks = append(checks, Check{Card: c.UUID, Field: "published", Plugin: "(missing)", SMI: c.UUID})
			continue
		}
		add := func(field, plugin, smiValue string, ok bool) {
			checks = append(checks, Check{Card: c.UUID, Field: field, Plugin: plugin, SMI: smiValue, OK: ok})
		}
		pn := stringAttr(d, device.AttrProductName)
		add("productName", pn, c.ProductName, pn == c.ProductName)
		arch := stringAttr(d, device.AttrArchitecture)
		add("architecture", arch, c.Architecture, arch == normalArchitecture(c.Architecture))
		minor := intAttr(d, device.AttrMinor)
		add("minor", minor, c.Minor, minor == strings.TrimSpace(c.Minor))
		bus := stringAttr(d, deviceattribute.StandardDeviceAttributePCIBusID)
		add("pciBusID", bus, c.PCIBusID, bus != "" && bus == normalBusID(c.PCIBusID))
		dv := versionAttr(d, device.AttrDriverVersion)
		add("driverVersion", dv, smi.DriverVersion, sameVersion(dv, smi.DriverVersion))
		mem, smiMiB := memoryMiB(d), smiMemoryMiB(c.MemoryTotal)
		// nvidia-smi rounds the byte count down to MiB. The plugin
		// publishes the total less what the driver reserves
		// (docs/resourceslices.md), so that is what nvidia-smi must
		// agree with where it reports a reserved amount; the two
		// roundings down can then differ by one MiB.
		smiValue, memOK := c.MemoryTotal, mem > 0 && mem == smiMiB
		if reserved, ok := c.ReservedMiB(); ok && smiMiB >= 0 {
			smiValue = c.MemoryTotal + " - " + c.MemoryReserved + " reserved"
			memOK = mem > 0 && (mem == smiMiB-reserved || mem == smiMiB-reserved-1)
		}
		add("memory (MiB)", strconv.FormatInt(mem, 10), smiValue, memOK)
	}
	var extra []string
	for uuid := range byUUID {
		if !seen[uuid] {
			extra = append(extra, uuid)
		}
	}
	sort.Strings(extra)
	for _, uuid := range extra {
		checks = append(checks, Check{Card: uuid, Field: "published", Plugin: byUUID[uuid].Name, SMI: "(not listed by nvidia-smi)"})
	}
	return checks
}

func stringAttr(d resourceapi.Device, name resourceapi.QualifiedName) string {
	if a, ok := d.Attributes[name]; ok && a.StringValue != nil {
		return *a.StringValue
	}
	return ""
}

func versionAttr(d resourceapi.Device, name resourceapi.QualifiedName) string {
	if a, ok := d.Attributes[name]; ok && a.VersionValue != nil {
		return *a.VersionValue
	}
	return ""
}

func intAttr(d resourceapi.Device, name resourceapi.QualifiedName) string {
	if a, ok := d.Attributes[name]; ok && a.IntValue != nil {
		return strconv.FormatInt(*a.IntValue, 10)
	}
	return ""
}

func memoryMiB(d resourceapi.Device) int64 {
	c, ok := d.Capacity[device.CapacityMemory]
	if !ok {
		return 0
	}
	return c.Value.Value() >> 20
}

// smiMemoryMiB parses "81559 MiB"; -1 when it cannot.
func smiMemoryMiB(s string) int64 {
	if v, ok := (SMICard{MemoryTotal: s}).MemoryMiB(); ok {
		return v
	}
	return -1
}

// normalBusID turns nvidia-smi's "00000000:1B:00.0" into the attribute's
// "0000:1b:00.0".
func normalBusID(s string) string { return nvidiasmi.NormalBusID(s) }

// normalArchitecture turns "Ada Lovelace" into "ada-lovelace".
func normalArchitecture(s string) string {
	return strings.ReplaceAll(strings.ToLower(strings.TrimSpace(s)), " ", "-")
}

// sameVersion compares the published semantic version ("535.104.5") with
// nvidia-smi's spelling ("535.104.05") through the plugin's own conversion.
func sameVersion(published, smi string) bool {
	v, err := resourceslices.Semver(smi)
	return err == nil && published != "" && v == published
}

// WriteReport prints the checks as a table and returns how many failed.
func WriteReport(w io.Writer, checks []Check) int {
	failed := 0
	fmt.Fprintf(w, "%-6s %-42s %-14s %-28s %s\n", "RESULT", "CARD", "FIELD", "PLUGIN", "NVIDIA-SMI")
	for _, c := range checks {
		result := "ok"
		if !c.OK {
			result = "FAIL"
			failed++
		}
		fmt.Fprintf(w, "%-6s %-42s %-14s %-28s %s\n", result, c.Card, c.Field, c.Plugin, c.SMI)
	}
	fmt.Fprintf(w, "slices against nvidia-smi: %d of %d checks failed\n", failed, len(checks))
	return failed
}
