// Package mocknvml turns a fake-GPU profile into the device table of the
// mock libnvidia-ml.so.1 (hack/mock-nvml/mock_nvml.c) and helps tests
// drive the library: build it, trigger events, read its call log.
//
// The table is a flat text file, one record per line, so that the C side
// needs no YAML parser:
//
//	tangram-mock-nvml 1
//	driver <version|-> <CUDA driver version as NVML's int, or -1>
//	gpu <index> <minor> <uuid> <NVML bus ID> <memory bytes> <numa|-1> <arch|-1> <brand|-1> <cc major|-1> <cc minor> [<reserved bytes>]
//	name <index> <product name>
//	nvlink <index> <remote NVML bus ID>        (one per active link)
//	fabric <index> <cluster UUID, 32 hex digits> <clique id>
//	mig <index> <current mode 0|1> <pending mode 0|1>   (a MIG-capable card)
//	migprofile <index> <NVML profile> <profile id> <compute slices> <memory slices>
//	           <instances> <SMs> <copy engines> <decoders> <encoders> <JPEGs> <OFAs>
//	           <memory MiB> <placement starts, comma-separated> <name>
//
// The reserved bytes are the part of the memory the driver keeps
// (nvmlDeviceGetMemoryInfo_v2's reserved; NVIDIA-FACTS.md "Memory the
// driver keeps"): left out, none. Fake profiles have no such field, so
// Flatten writes none; a test that wants some writes the column itself
// (WithReservedMemory).
//
// The MIG profiles come from the fake profile's card type
// (fakegpu.MIGTable: the MIG user guide's tables), so that the C side
// holds no table of its own.
//
// A field the profile leaves empty becomes -1 or "-", and the library
// answers NVML_ERROR_NOT_SUPPORTED for it, so the NVML source leaves it out
// just as the fake source does.
package mocknvml

import (
	"bytes"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/google/uuid"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/tangram-gpu/tangram/pkg/gpu"
	"github.com/tangram-gpu/tangram/pkg/gpu/fakegpu"
)

// FormatVersion is the first line of a devices file; the library refuses
// another version.
const FormatVersion = "tangram-mock-nvml 1"

// NVML's enum values (nvml.h), by the names Tangram publishes.
var (
	architectures = map[string]int{
		"kepler": 2, "maxwell": 3, "pascal": 4, "volta": 5, "turing": 6,
		"ampere": 7, "ada-lovelace": 8, "hopper": 9, "blackwell": 10,
	}
	brands = map[string]int{
		"Quadro": 1, "Tesla": 2, "NVS": 3, "Grid": 4, "GeForce": 5, "Titan": 6,
		"NvidiaVApps": 7, "NvidiaVPC": 8, "NvidiaVCS": 9, "NvidiaVWS": 10,
		"NvidiaCloudGaming": 11, "QuadroRTX": 12, "NvidiaRTX": 13, "Nvidia": 14,
		"GeForceRTX": 15, "TitanRTX": 16,
	}
)

// maxLinks is NVML_NVLINK_MAX_LINKS.
const maxLinks = 18

// switchLinksPerCard is how many links each card of an NVSwitch system gets
// (a DGX H100 card has 18 links over 4 NVSwitches; the count does not
// change the topology Tangram derives).
const switchLinksPerCard = 4

// Flatten returns the devices file for the cards of p as node nodeName
// sees them: UUIDs are those the fake source gives the same node.
//
// NVLinks: when the cards with NVLink form one clique of three or more
// (every such card reaches every other), they are wired to NVSwitches, as
// on a DGX; otherwise each link goes straight to its peer's bus ID (NVLink
// bridges). The NVML source derives the same peers either way.
func Flatten(p *fakegpu.Profile, nodeName string) ([]byte, error) {
	if nodeName == "" {
		return nil, fmt.Errorf("mock NVML devices: the node name is empty; the cards' UUIDs are derived from it")
	}
	if err := p.Validate(); err != nil {
		return nil, fmt.Errorf("mock NVML devices: %w", err)
	}
	cards := slices.Clone(p.GPUs)
	slices.SortFunc(cards, func(a, b fakegpu.ProfileGPU) int { return a.Index - b.Index })

	var b bytes.Buffer
	fmt.Fprintln(&b, FormatVersion)
	fmt.Fprintf(&b, "# profile %s, node %s\n", p.Name, nodeName)
	driver, cuda, err := driverVersions(cards)
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(&b, "driver %s %d\n", driver, cuda)

	busIDs := map[int]string{}
	for _, g := range cards {
		line, err := gpuLine(g, nodeName)
		if err != nil {
			return nil, fmt.Errorf("mock NVML devices: gpus[index=%d]: %w", g.Index, err)
		}
		b.WriteString(line)
		busIDs[g.Index] = nvmlBusID(g.PCIBusID)
		if g.ProductName != "" {
			fmt.Fprintf(&b, "name %d %s\n", g.Index, g.ProductName)
		}
		if g.FabricCliqueID != "" {
			hex, clique, err := fabric(g.FabricCliqueID)
			if err != nil {
				return nil, fmt.Errorf("mock NVML devices: gpus[index=%d].fabricCliqueID: %w", g.Index, err)
			}
			fmt.Fprintf(&b, "fabric %d %s %d\n", g.Index, hex, clique)
		}
		if g.MIGType != "" {
			writeMIG(&b, g)
		}
	}
	links, err := nvlinks(cards, busIDs)
	if err != nil {
		return nil, err
	}
	for _, g := range cards {
		for _, remote := range links[g.Index] {
			fmt.Fprintf(&b, "nvlink %d %s\n", g.Index, remote)
		}
	}
	return b.Bytes(), nil
}

// writeMIG writes a MIG-capable card's mode and profiles.
func writeMIG(b *bytes.Buffer, g fakegpu.ProfileGPU) {
	bit := func(mode string) int {
		if mode == fakegpu.MIGModeEnabled {
			return 1
		}
		return 0
	}
	pending := g.MIGPendingMode
	if pending == "" {
		pending = g.MIGMode
	}
	fmt.Fprintf(b, "mig %d %d %d\n", g.Index, bit(g.MIGMode), bit(pending))
	for _, p := range fakegpu.MIGTable(g.MIGType) {
		starts := make([]string, len(p.Starts))
		for i, s := range p.Starts {
			starts[i] = strconv.Itoa(s)
		}
		fmt.Fprintf(b, "migprofile %d %d %d %d %d %d %d %d %d %d %d %d %d %s %s\n", g.Index, p.NVMLProfile, p.ID,
			p.ComputeSlices, p.MemorySlices, p.Instances, p.Multiprocessors, p.CopyEngines, p.Decoders, 0,
			p.JPEGs, p.OFAs, p.MemoryMiB, strings.Join(starts, ","), p.Name)
	}
}

func driverVersions(cards []fakegpu.ProfileGPU) (string, int, error) {
	driver, cuda := "", ""
	for i, g := range cards {
		if i > 0 && (g.DriverVersion != driver || g.CUDADriverVersion != cuda) {
			return "", 0, fmt.Errorf("mock NVML devices: gpus[index=%d] has driver %q/CUDA %q but gpus[index=%d] %q/%q: one NVML library has one driver; give every card the same versions",
				g.Index, g.DriverVersion, g.CUDADriverVersion, cards[0].Index, driver, cuda)
		}
		driver, cuda = g.DriverVersion, g.CUDADriverVersion
	}
	cudaInt := -1
	if cuda != "" {
		major, minor, ok := strings.Cut(cuda, ".")
		ma, err1 := strconv.Atoi(major)
		mi, err2 := strconv.Atoi(minor)
		if !ok || err1 != nil || err2 != nil || mi > 99 {
			return "", 0, fmt.Errorf("mock NVML devices: cudaDriverVersion %q: want <major>.<minor>, e.g. 13.0", cuda)
		}
		cudaInt = ma*1000 + mi*10
	}
	if driver == "" {
		driver = "-"
	}
	return driver, cudaInt, nil
}

func gpuLine(g fakegpu.ProfileGPU, nodeName string) (string, error) {
	if g.PCIBusID == "" {
		return "", fmt.Errorf("pciBusID is empty: NVML reports a bus ID for every card, so the mock needs one")
	}
	q, err := resource.ParseQuantity(g.Memory)
	if err != nil {
		return "", fmt.Errorf("memory %q: %w", g.Memory, err)
	}
	minor := g.Index
	if g.Minor != nil {
		minor = *g.Minor
	}
	numa := -1
	if g.NUMANode != nil {
		numa = *g.NUMANode
	}
	arch, brand := -1, -1
	if g.Architecture != "" {
		a, ok := architectures[g.Architecture]
		if !ok {
			return "", fmt.Errorf("architecture %q has no NVML value", g.Architecture)
		}
		arch = a
	}
	if g.Brand != "" {
		v, ok := brands[g.Brand]
		if !ok {
			return "", fmt.Errorf("brand %q has no NVML value", g.Brand)
		}
		brand = v
	}
	ccMajor, ccMinor := -1, 0
	if g.CUDAComputeCapability != "" {
		major, minor, ok := strings.Cut(g.CUDAComputeCapability, ".")
		ma, err1 := strconv.Atoi(major)
		mi, err2 := strconv.Atoi(minor)
		if !ok || err1 != nil || err2 != nil {
			return "", fmt.Errorf("cudaComputeCapability %q: want <major>.<minor>", g.CUDAComputeCapability)
		}
		ccMajor, ccMinor = ma, mi
	}
	return fmt.Sprintf("gpu %d %d %s %s %d %d %d %d %d %d\n", g.Index, minor, fakegpu.FakeGPUUUID(nodeName, g.Index),
		nvmlBusID(g.PCIBusID), q.Value(), numa, arch, brand, ccMajor, ccMinor), nil
}

// WithReservedMemory returns the devices file with the given reserved
// bytes (by card index) in the cards' gpu lines: the memory the driver
// keeps, which the library reports as nvmlDeviceGetMemoryInfo_v2's reserved
// and within v1's used. A card not named keeps its line (none reserved).
func WithReservedMemory(devices []byte, reserved map[int]int64) ([]byte, error) {
	lines := strings.SplitAfter(string(devices), "\n")
	seen := map[int]bool{}
	for i, line := range lines {
		fields := strings.Fields(line)
		if len(fields) < 2 || fields[0] != "gpu" {
			continue
		}
		index, err := strconv.Atoi(fields[1])
		if err != nil {
			return nil, fmt.Errorf("mock NVML devices: line %d: bad card index %q", i+1, fields[1])
		}
		r, ok := reserved[index]
		if !ok {
			continue
		}
		if len(fields) != 11 {
			return nil, fmt.Errorf("mock NVML devices: line %d: gpu line with %d fields, want 11 (and no reserved column yet)", i+1, len(fields))
		}
		if r < 0 {
			return nil, fmt.Errorf("mock NVML devices: card %d: reserved memory %d is negative", index, r)
		}
		lines[i] = strings.Join(append(fields, strconv.FormatInt(r, 10)), " ") + "\n"
		seen[index] = true
	}
	for index := range reserved {
		if !seen[index] {
			return nil, fmt.Errorf("mock NVML devices: no card %d to reserve memory on", index)
		}
	}
	return []byte(strings.Join(lines, "")), nil
}

// nvmlBusID writes a canonical bus ID ("0000:1b:00.0") the way NVML does
// ("00000000:1B:00.0").
func nvmlBusID(canonical string) string {
	id, err := gpu.NormalizePCIBusID(canonical)
	if err != nil {
		return canonical // validated by the profile; cannot happen
	}
	return "0000" + strings.ToUpper(id)
}

func fabric(id string) (string, uint32, error) {
	cluster, clique, ok := strings.Cut(id, "/")
	u, err := uuid.Parse(cluster)
	n, err2 := strconv.ParseUint(clique, 10, 32)
	if !ok || err != nil || err2 != nil {
		return "", 0, fmt.Errorf("%q: want <cluster UUID>/<clique id>", id)
	}
	return fmt.Sprintf("%x", u[:]), uint32(n), nil
}

// nvlinks returns each card's link far ends as NVML bus IDs.
func nvlinks(cards []fakegpu.ProfileGPU, busIDs map[int]string) (map[int][]string, error) {
	var linked []fakegpu.ProfileGPU
	for _, g := range cards {
		if len(g.NVLinks) > 0 {
			linked = append(linked, g)
		}
	}
	out := map[int][]string{}
	if len(linked) >= 3 && isClique(linked) {
		switches := switchBusIDs(busIDs)
		for _, g := range linked {
			out[g.Index] = switches
		}
		return out, nil
	}
	for _, g := range linked {
		if len(g.NVLinks) > maxLinks {
			return nil, fmt.Errorf("mock NVML devices: gpus[index=%d] has %d NVLink peers; NVML has at most %d links per card", g.Index, len(g.NVLinks), maxLinks)
		}
		for _, peer := range g.NVLinks {
			out[g.Index] = append(out[g.Index], busIDs[peer])
		}
	}
	return out, nil
}

func isClique(cards []fakegpu.ProfileGPU) bool {
	for _, g := range cards {
		for _, h := range cards {
			if g.Index != h.Index && !slices.Contains(g.NVLinks, h.Index) {
				return false
			}
		}
	}
	return true
}

// switchBusIDs picks bus IDs for the NVSwitches that no card uses.
func switchBusIDs(busIDs map[int]string) []string {
	used := map[string]bool{}
	for _, id := range busIDs {
		used[id] = true
	}
	var out []string
	for bus := 1; len(out) < switchLinksPerCard; bus++ {
		id := fmt.Sprintf("00000000:%02X:00.0", bus)
		if !used[id] {
			out = append(out, id)
		}
	}
	return out
}

// CSource returns the devices file as the C source the build compiles into
// the library as its built-in table, with the default state directory.
func CSource(devices []byte, stateDir string) string {
	return "/* Generated by hack/mock-nvml/cmd/mock-nvml-profile. */\n" +
		"const char tangram_mock_builtin_devices[] = " + cString(string(devices)) + ";\n" +
		"const char tangram_mock_default_state_dir[] = " + cString(stateDir) + ";\n"
}

func cString(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for _, r := range []byte(s) {
		switch {
		case r == '\n':
			b.WriteString(`\n"` + "\n" + `  "`)
		case r == '"' || r == '\\':
			b.WriteByte('\\')
			b.WriteByte(r)
		case r < 0x20 || r >= 0x7f:
			fmt.Fprintf(&b, `\%03o`, r)
		default:
			b.WriteByte(r)
		}
	}
	b.WriteByte('"')
	return b.String()
}
