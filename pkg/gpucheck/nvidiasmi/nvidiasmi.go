// Package nvidiasmi reads what NVIDIA's `nvidia-smi` prints about a
// machine's cards, as the GPU checks use it: the XML of `nvidia-smi -q -x`
// (Parse) and the matrix of `nvidia-smi topo -m` (ParseTopology). Standard
// library only: it holds no judgment and runs nothing.
package nvidiasmi

import (
	"bufio"
	"encoding/xml"
	"fmt"
	"io"
	"regexp"
	"strconv"
	"strings"
)

// Card is one <gpu> of `nvidia-smi -q -x` (NVIDIA's nvsmi_device DTD),
// with the elements the checks read.
type Card struct {
	// ID is the <gpu id="..."> attribute, the PCI bus id.
	ID           string `xml:"id,attr"`
	ProductName  string `xml:"product_name"`
	Architecture string `xml:"product_architecture"`
	UUID         string `xml:"uuid"`
	Minor        string `xml:"minor_number"`
	PCIBusID     string `xml:"pci>pci_bus_id"`
	// MemoryTotal is e.g. "81559 MiB".
	MemoryTotal string `xml:"fb_memory_usage>total"`
	// MemoryReserved is the memory the driver keeps, e.g. "329 MiB";
	// empty from an nvidia-smi that does not report it.
	MemoryReserved string `xml:"fb_memory_usage>reserved"`
	// ComputeMode is e.g. "Default" or "Exclusive_Process".
	ComputeMode string `xml:"compute_mode"`
	// MIGMode is "Enabled", "Disabled" or "N/A" (cards without MIG).
	MIGMode string `xml:"mig_mode>current_mig"`
}

// Report is the part of `nvidia-smi -q -x` the checks read.
type Report struct {
	DriverVersion string `xml:"driver_version"`
	CUDAVersion   string `xml:"cuda_version"`
	Cards         []Card `xml:"gpu"`
}

// Parse reads the XML of `nvidia-smi -q -x`.
func Parse(r io.Reader) (Report, error) {
	var rep Report
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

// MemoryMiB parses "81559 MiB"; ok is false when it cannot.
func (c Card) MemoryMiB() (int64, bool) {
	num, unit, _ := strings.Cut(strings.TrimSpace(c.MemoryTotal), " ")
	v, err := strconv.ParseInt(num, 10, 64)
	if err != nil || unit != "MiB" {
		return 0, false
	}
	return v, true
}

// ReservedMiB parses the reserved memory, "329 MiB"; ok is false when
// nvidia-smi does not report it or it cannot be read.
func (c Card) ReservedMiB() (int64, bool) {
	return Card{MemoryTotal: c.MemoryReserved}.MemoryMiB()
}

// BusID turns nvidia-smi's "00000000:1B:00.0" into the plugin's canonical
// "0000:1b:00.0"; "" when it cannot.
func (c Card) BusID() string { return NormalBusID(c.PCIBusID) }

// MIGEnabled reports whether MIG mode is on now.
func (c Card) MIGEnabled() bool {
	return strings.EqualFold(strings.TrimSpace(c.MIGMode), "Enabled")
}

// NormalBusID turns a PCI bus id with a 4- or 8-digit domain, in either
// case, into domain:bus:device.function with a 4-digit lower-case domain.
func NormalBusID(s string) string {
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

// Topology is `nvidia-smi topo -m`: for each GPU index, the indexes of the
// GPUs it reaches over NVLink ("NV<n>" in the matrix).
type Topology map[int][]int

var (
	topoGPU    = regexp.MustCompile(`^GPU([0-9]+)$`)
	topoDevice = regexp.MustCompile(`^(GPU|NIC|NVS)[0-9]+$`)
	topoNVLink = regexp.MustCompile(`^NV[0-9]+$`)
)

// ParseTopology reads the matrix `nvidia-smi topo -m` prints: a header of
// device columns (GPU<i>, NIC<i>, …) followed by affinity columns, and a
// row per device whose leading cells are the links to those columns ("X"
// for itself, "NV<n>" for n bonded NVLinks, PCIe path kinds otherwise).
// Legend lines after the matrix are ignored.
func ParseTopology(r io.Reader) (Topology, error) {
	sc := bufio.NewScanner(r)
	var columns []string
	topo := Topology{}
	for sc.Scan() {
		// The tool colours its header with escape sequences on a terminal.
		line := stripEscapes(sc.Text())
		fields := strings.Fields(line)
		if len(fields) == 0 {
			continue
		}
		if columns == nil {
			if topoDevice.MatchString(fields[0]) && fields[0] == "GPU0" {
				for _, f := range fields {
					if !topoDevice.MatchString(f) {
						break
					}
					columns = append(columns, f)
				}
			}
			continue
		}
		m := topoGPU.FindStringSubmatch(fields[0])
		if m == nil {
			if !topoDevice.MatchString(fields[0]) {
				break // the legend
			}
			continue
		}
		row, _ := strconv.Atoi(m[1])
		cells := fields[1:]
		if len(cells) < len(columns) {
			return nil, fmt.Errorf("nvidia-smi topo -m: row %s has %d cells, want at least %d", fields[0], len(cells), len(columns))
		}
		peers := []int{}
		for i, col := range columns {
			cm := topoGPU.FindStringSubmatch(col)
			if cm == nil || !topoNVLink.MatchString(cells[i]) {
				continue
			}
			peer, _ := strconv.Atoi(cm[1])
			if peer != row {
				peers = append(peers, peer)
			}
		}
		topo[row] = peers
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("reading nvidia-smi topo -m output: %w", err)
	}
	if columns == nil {
		return nil, fmt.Errorf("nvidia-smi topo -m: no header row starting with GPU0")
	}
	return topo, nil
}

var escapes = regexp.MustCompile("\x1b\\[[0-9;]*m")

func stripEscapes(s string) string { return escapes.ReplaceAllString(s, "") }
