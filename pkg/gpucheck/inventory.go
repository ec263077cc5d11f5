package gpucheck

import (
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/tangram-gpu/tangram/pkg/gpu"
	"github.com/tangram-gpu/tangram/pkg/gpucheck/nvidiasmi"
)

// Reference is what the machine says about its cards, independently of
// the plugin: the driver's own tool and the kernel.
type Reference struct {
	SMI nvidiasmi.Report
	// Topology is `nvidia-smi topo -m`; nil when it could not be read
	// (NVLink is then not compared, and the comparison says so).
	Topology nvidiasmi.Topology
	// NUMA maps a canonical PCI bus id to the kernel's
	// /sys/bus/pci/devices/<bus id>/numa_node (-1: none); a card missing
	// here is not compared.
	NUMA map[string]int
}

// Mismatch is one value the plugin and the reference disagree on.
type Mismatch struct {
	Card   string // UUID, or "node"
	Field  string
	Plugin string
	Want   string
}

func (m Mismatch) String() string {
	return fmt.Sprintf("%s %s: plugin %q, machine %q", m.Card, m.Field, m.Plugin, m.Want)
}

// CompareInventory matches the plugin's cards (NVML, pkg/gpu/nvmlgpu) to
// nvidia-smi's by UUID and compares memory, PCI bus id, minor number,
// product, driver version, NUMA node and NVLink peers. It returns what
// differs and how many values were compared.
func CompareInventory(cards []gpu.GPU, ref Reference) (mismatches []Mismatch, compared int) {
	add := func(card, field, plugin, want string) {
		compared++
		if plugin != want {
			mismatches = append(mismatches, Mismatch{Card: card, Field: field, Plugin: plugin, Want: want})
		}
	}
	add("node", "cards", strconv.Itoa(len(cards)), strconv.Itoa(len(ref.SMI.Cards)))
	byUUID := map[string]gpu.GPU{}
	for _, c := range cards {
		byUUID[c.UUID] = c
	}
	// NVLink peers are compared as UUIDs: the plugin's are NVML indexes,
	// nvidia-smi's topology rows are in its card order (the XML's).
	seen := map[string]bool{}
	for i, sc := range ref.SMI.Cards {
		id := strings.TrimSpace(sc.UUID)
		seen[id] = true
		g, ok := byUUID[id]
		if !ok {
			add(id, "listed by the plugin", "no", "yes")
			continue
		}
		if mib, ok := sc.MemoryMiB(); ok {
			// nvidia-smi rounds the byte count down to MiB.
			add(id, "memory (MiB)", strconv.FormatInt(g.MemoryBytes>>20, 10), strconv.FormatInt(mib, 10))
		} else {
			add(id, "memory (MiB)", strconv.FormatInt(g.MemoryBytes>>20, 10), "unreadable: "+sc.MemoryTotal)
		}
		add(id, "PCI bus id", g.PCIBusID, sc.BusID())
		add(id, "minor number", strconv.Itoa(g.Minor), strings.TrimSpace(sc.Minor))
		add(id, "product name", g.ProductName, strings.TrimSpace(sc.ProductName))
		if v := strings.TrimSpace(sc.Architecture); v != "" && !strings.EqualFold(v, "N/A") {
			add(id, "architecture", g.Architecture, strings.ReplaceAll(strings.ToLower(v), " ", "-"))
		}
		add(id, "driver version", g.DriverVersion, strings.TrimSpace(ref.SMI.DriverVersion))
		if numa, ok := ref.NUMA[sc.BusID()]; ok {
			add(id, "NUMA node", numaString(g.NUMANode), numaString(numaPtr(numa)))
		}
		if ref.Topology != nil {
			want := "unlisted"
			if peers, ok := ref.Topology[i]; ok {
				want = indexList(peersByUUID(peers, ref.SMI.Cards))
			}
			add(id, "NVLink peers", indexList(uuidsOf(g.NVLinkPeers, cards)), want)
		}
	}
	var extra []string
	for id := range byUUID {
		if !seen[id] {
			extra = append(extra, id)
		}
	}
	sort.Strings(extra)
	for _, id := range extra {
		add(id, "listed by nvidia-smi", "yes", "no")
	}
	return mismatches, compared
}

// uuidsOf turns the plugin's peer indexes into UUIDs, so that peers are
// compared by identity rather than by two tools' numbering.
func uuidsOf(indexes []int, cards []gpu.GPU) []string {
	out := make([]string, 0, len(indexes))
	for _, i := range indexes {
		id := fmt.Sprintf("index %d (unknown)", i)
		for _, c := range cards {
			if c.Index == i {
				id = c.UUID
			}
		}
		out = append(out, id)
	}
	return out
}

func peersByUUID(rows []int, smi []nvidiasmi.Card) []string {
	out := make([]string, 0, len(rows))
	for _, r := range rows {
		if r >= 0 && r < len(smi) {
			out = append(out, strings.TrimSpace(smi[r].UUID))
		} else {
			out = append(out, fmt.Sprintf("GPU%d (not in nvidia-smi -q)", r))
		}
	}
	return out
}

func indexList(ids []string) string {
	ids = slices.Clone(ids)
	sort.Strings(ids)
	if len(ids) == 0 {
		return "none"
	}
	return strings.Join(ids, ",")
}

func numaPtr(n int) *int {
	if n < 0 {
		return nil
	}
	return &n
}

func numaString(n *int) string {
	if n == nil {
		return "none"
	}
	return strconv.Itoa(*n)
}

// InventoryOutcome turns a comparison into a check result.
func InventoryOutcome(cards []gpu.GPU, ref Reference) Outcome {
	mismatches, compared := CompareInventory(cards, ref)
	note := ""
	if ref.Topology == nil {
		note = "; NVLink not compared (nvidia-smi topo -m unreadable)"
	}
	if len(mismatches) == 0 {
		return Pass("%d cards, %d values equal to nvidia-smi -q -x, nvidia-smi topo -m and sysfs (memory, UUID, PCI bus id, minor, product, driver, NUMA, NVLink)%s", len(cards), compared, note)
	}
	parts := make([]string, len(mismatches))
	for i, m := range mismatches {
		parts[i] = m.String()
	}
	return Fail("%d of %d values differ: %s%s", len(mismatches), compared, strings.Join(parts, "; "), note)
}
