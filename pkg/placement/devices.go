package placement

import (
	"fmt"

	resourceapi "k8s.io/api/resource/v1"

	"github.com/tangram-gpu/tangram/pkg/device"
	"github.com/tangram-gpu/tangram/pkg/placement/consumable"
)

// NodeFromDevices builds the model of a node from the devices our driver
// publishes for it (in slice order, which is the allocator's order), with
// nothing allocated yet. The MIG partitions of a card in MIG mode (type
// "mig") become one card holding them, at the place of its first
// partition, with the capacities of its counter set from sets; whole-card
// and share requests never land on it.
func NodeFromDevices(name string, cpuMilli, memoryMiB int64, devices []resourceapi.Device, sets ...resourceapi.CounterSet) (*Node, error) {
	n := &Node{Name: name, CPUMilli: cpuMilli, MemoryMiB: memoryMiB}
	migs, err := migCards(name, devices, sets)
	if err != nil {
		return nil, err
	}
	placed := map[string]bool{}
	for _, d := range devices {
		if device.StringAttribute(d, device.AttrType) == device.TypeMIG {
			for _, c := range migs {
				if c.mig.CounterSet() == d.ConsumesCounters[0].CounterSet && !placed[c.Device] {
					placed[c.Device] = true
					n.Cards = append(n.Cards, c)
				}
			}
			continue
		}
		c := Card{
			Device:    d.Name,
			UUID:      device.StringAttribute(d, device.AttrUUID),
			Model:     device.StringAttribute(d, device.AttrProductName),
			Shareable: d.AllowMultipleAllocations != nil && *d.AllowMultipleAllocations,
		}
		var err error
		if c.Memory, err = consumable.Of(d, device.CapacityMemory); err != nil {
			return nil, fmt.Errorf("node %s, device %s: %w", name, d.Name, err)
		}
		if c.Compute, err = consumable.Of(d, device.CapacityCompute); err != nil {
			return nil, fmt.Errorf("node %s, device %s: %w", name, d.Name, err)
		}
		n.Cards = append(n.Cards, c)
	}
	return n, nil
}
