package mocknvml

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/tangram-gpu/tangram/pkg/gpu"
	"github.com/tangram-gpu/tangram/pkg/gpu/fakegpu"
)

// PCIeRoot is the root complex the mock sysfs puts a card under: each card
// gets its own, named after the bus just before the card's
// ("0000:1b:00.0" -> "pci0000:1a"), behind one bridge, as a card in its own
// x16 slot has it.
func PCIeRoot(busID string) (string, error) {
	id, err := gpu.NormalizePCIBusID(busID)
	if err != nil {
		return "", err
	}
	domain, rest, _ := strings.Cut(id, ":")
	busHex, _, _ := strings.Cut(rest, ":")
	bus, err := strconv.ParseUint(busHex, 16, 8)
	if err != nil || bus == 0 {
		return "", fmt.Errorf("bus ID %s: the mock sysfs needs a bus above 00 to put a root port before it", busID)
	}
	return fmt.Sprintf("pci%s:%02x", domain, bus-1), nil
}

// WriteSysfs lays out the cards' PCI devices under sysDir the way the
// kernel does, as far as PCIe-root attributes read them:
// bus/pci/devices/<bus ID> links to devices/pci<root>/<bridge>/<bus ID>,
// which holds vendor, device, class and numa_node.
func WriteSysfs(sysDir string, p *fakegpu.Profile) error {
	links := filepath.Join(sysDir, "bus/pci/devices")
	if err := os.MkdirAll(links, 0o755); err != nil {
		return fmt.Errorf("creating mock sysfs: %w", err)
	}
	for _, g := range p.GPUs {
		if g.PCIBusID == "" {
			continue
		}
		id, err := gpu.NormalizePCIBusID(g.PCIBusID)
		if err != nil {
			return fmt.Errorf("mock sysfs: gpus[index=%d]: %w", g.Index, err)
		}
		root, err := PCIeRoot(id)
		if err != nil {
			return fmt.Errorf("mock sysfs: gpus[index=%d]: %w", g.Index, err)
		}
		bridge := strings.TrimPrefix(root, "pci") + ":00.0"
		rel := filepath.Join("devices", root, bridge, id)
		dev := filepath.Join(sysDir, rel)
		if err := os.MkdirAll(dev, 0o755); err != nil {
			return fmt.Errorf("creating mock sysfs device %s: %w", dev, err)
		}
		numa := -1
		if g.NUMANode != nil {
			numa = *g.NUMANode
		}
		for name, value := range map[string]string{"vendor": "0x10de", "device": "0x2330", "class": "0x030200", "numa_node": strconv.Itoa(numa)} {
			if err := os.WriteFile(filepath.Join(dev, name), []byte(value+"\n"), 0o644); err != nil {
				return fmt.Errorf("writing mock sysfs: %w", err)
			}
		}
		link := filepath.Join(links, id)
		_ = os.Remove(link) // rewriting a tree: the link may be there already
		if err := os.Symlink(filepath.Join("../../..", rel), link); err != nil {
			return fmt.Errorf("linking mock sysfs device %s: %w", id, err)
		}
	}
	return nil
}
