// Package gpuacceptance holds the checks of `make gpu-acceptance` that need
// no cluster: what the kubelet plugin publishes for a real node
// (`dra-kubelet-plugin slices -o json`) against what the driver's own tool
// reports (`nvidia-smi -q -x`), card by card.
package gpuacceptance

import (
	"encoding/json"
	"encoding/xml"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/dynamic-resource-allocation/deviceattribute"

	"github.com/tangram-gpu/tangram/pkg/device"
	"github.com/tangram-gpu/tangram/pkg/resourceslices"
)

// SMICard is one <gpu> of `nvidia-smi -q -x`, with the fields compared.
type SMICard struct {
	ProductName  string `xml:"product_name"`
	Architecture string `xml:"product_architecture"`
	UUID         string `xml:"uuid"`
	Minor        string `xml:"minor_number"`
	PCIBusID     string `xml:"pci>pci_bus_id"`
	// MemoryTotal is e.g. "81559 MiB".
	MemoryTotal string `xml:"fb_memory_usage>total"`
}

// SMIReport is the part of `nvidia-smi -q -x` the checks read.
type SMIReport struct {
	DriverVersion string    `xml:"driver_version"`
	Cards         []SMICard `xml:"gpu"`
}

// ParseSMI reads the XML of `nvidia-smi -q -x`.
func ParseSMI(r io.Reader) (SMIReport, error) {
	var rep SMIReport
	dec := xml.NewDecoder(r)
	// nvidia-smi's XML names a DTD that is not available offline.
	dec.Strict = false
	if err := dec.Decode(&rep); err != nil {
		return rep, fmt.Errorf("reading nvidia-smi -q -x output: %w", err)
	}
	if len(rep.Cards) == 0 {
		return rep, fmt.Errorf("nvidia-smi -q -x lists no GPU")
	}
	return rep, nil
}

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
		// nvidia-smi rounds the byte count down to MiB.
		add("memory (MiB)", strconv.FormatInt(mem, 10), c.MemoryTotal, mem > 0 && mem == smiMiB)
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
	num, unit, _ := strings.Cut(strings.TrimSpace(s), " ")
	v, err := strconv.ParseInt(num, 10, 64)
	if err != nil || unit != "MiB" {
		return -1
	}
	return v
}

// normalBusID turns nvidia-smi's "00000000:1B:00.0" into the attribute's
// "0000:1b:00.0".
func normalBusID(s string) string {
	domain, rest, ok := strings.Cut(strings.TrimSpace(s), ":")
	if !ok {
		return ""
	}
	d, err := strconv.ParseUint(domain, 16, 32)
	if err != nil {
		return ""
	}
	return fmt.Sprintf("%04x:%s", d, strings.ToLower(rest))
}

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
