package mig

import (
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strconv"

	resourceapi "k8s.io/api/resource/v1"

	"github.com/tangram-gpu/tangram/pkg/device"
)

// Card is a card in MIG mode as its partition devices describe it.
type Card struct {
	// UUID and Model are the parent card's uuid and productName.
	UUID, Model string
	Layout      *Layout
}

// Cards gathers the MIG partition devices of node name into one Card per
// parent card, in the order the partitions appear, with the capacities of
// the counter sets.
func Cards(name string, devices []resourceapi.Device, sets []resourceapi.CounterSet) ([]Card, error) {
	capacity := map[string]map[string]int64{}
	for _, s := range sets {
		m := map[string]int64{}
		for c, v := range s.Counters {
			m[c] = v.Value.Value()
		}
		capacity[s.Name] = m
	}
	var cards []Card
	byParent := map[string]int{}
	counterIndex := map[string]map[string]int{}
	for _, d := range devices {
		if device.StringAttribute(d, device.AttrType) != device.TypeMIG {
			continue
		}
		if len(d.ConsumesCounters) != 1 {
			return nil, fmt.Errorf("node %s, MIG partition %s consumes %d counter sets; the placement model knows one per card", name, d.Name, len(d.ConsumesCounters))
		}
		cc := d.ConsumesCounters[0]
		caps, ok := capacity[cc.CounterSet]
		if !ok {
			return nil, fmt.Errorf("node %s, MIG partition %s consumes counter set %s, which the node does not publish", name, d.Name, cc.CounterSet)
		}
		i, ok := byParent[cc.CounterSet]
		if !ok {
			i = len(cards)
			byParent[cc.CounterSet] = i
			counterIndex[cc.CounterSet] = map[string]int{}
			cards = append(cards, Card{
				UUID:   device.StringAttribute(d, device.AttrParentUUID),
				Model:  device.StringAttribute(d, device.AttrProductName),
				Layout: &Layout{counterSet: cc.CounterSet, computeSlices: caps[device.MIGCounterComputeSlices]},
			})
		}
		layout := cards[i].Layout
		idx := counterIndex[cc.CounterSet]
		p := Partition{Device: d.Name, Profile: device.StringAttribute(d, device.AttrMIGProfile), ProfileID: int(device.IntAttribute(d, device.AttrMIGProfileID)),
			Start: int(device.IntAttribute(d, device.AttrMIGPlacementStart))}
		// In name order, so that equal cards number their counters
		// alike and share a layout id (intern).
		for _, c := range slices.Sorted(maps.Keys(cc.Counters)) {
			v := cc.Counters[c]
			limit, ok := caps[c]
			if !ok {
				return nil, fmt.Errorf("node %s, MIG partition %s consumes counter %s, which counter set %s lacks", name, d.Name, c, cc.CounterSet)
			}
			k, ok := idx[c]
			if !ok {
				if len(layout.capacity) == MaxCounters {
					return nil, fmt.Errorf("node %s, counter set %s: more than %d counters", name, cc.CounterSet, MaxCounters)
				}
				k = len(layout.capacity)
				idx[c] = k
				layout.capacity = append(layout.capacity, limit)
			}
			p.uses = append(p.uses, counterUse{counter: k, amount: v.Value.Value()})
			if c == device.MIGCounterComputeSlices {
				p.ComputeSlices = v.Value.Value()
			}
		}
		if len(layout.partitions) == maxPartitions {
			return nil, fmt.Errorf("node %s, card %s: more than %d MIG partitions; the placement model holds %d", name, cc.CounterSet, maxPartitions, maxPartitions)
		}
		layout.partitions = append(layout.partitions, p)
	}
	for i := range cards {
		cards[i].Layout.id = intern(cards[i].Layout)
	}
	return cards, nil
}

// Milli is the GPU a MIG profile named "<n>g.<mem>" stands for, in
// milli-GPU: n sevenths of a card (the MIG cards Tangram knows have seven
// compute slices); 0 for a name without the "<n>g." prefix.
func Milli(profile string) int64 {
	m := profileSlices.FindStringSubmatch(profile)
	if m == nil {
		return 0
	}
	n, _ := strconv.ParseInt(m[1], 10, 64)
	return min(n*1000/7, 1000)
}

var profileSlices = regexp.MustCompile(`^([1-9][0-9]*)g\.`)

// profileSelector reads the profile a MIG request asks for from its CEL
// selectors, in the form the docs and dra.MIGPartition write it:
// device.attributes["gpu.tangram.dev"].profile == "3g.40gb".
var profileSelector = regexp.MustCompile(`device\.attributes\["` + regexp.QuoteMeta(device.DriverName) + `"\]\.` + device.AttrMIGProfile + `\s*==\s*"([^"]+)"`)

// ProfileOf is the profile a request of class mig.tangram.dev selects,
// "" when its selectors name none the model can read.
func ProfileOf(selectors []resourceapi.DeviceSelector) string {
	for _, s := range selectors {
		if s.CEL == nil {
			continue
		}
		if m := profileSelector.FindStringSubmatch(s.CEL.Expression); m != nil {
			return m[1]
		}
	}
	return ""
}
