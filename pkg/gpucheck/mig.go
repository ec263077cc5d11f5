package gpucheck

import (
	"fmt"
	"slices"
	"strings"

	"github.com/tangram-gpu/tangram/pkg/gpu"
)

// MIGExpectation is what the mock serves for a card type (pkg/gpu/fakegpu's
// tables, from NVIDIA's MIG user guide), to compare a real driver's answers
// with. Name is the fake card type ("h200-141gb").
type MIGExpectation struct {
	Name     string
	Profiles []gpu.MIGProfile
}

const nvmlSuccess = "SUCCESS"

// MIGOutcome judges what NVML answered to the MIG queries (read only):
// every profile NVML names must get the same name from the plugin, and
// where the card matches a mock table (expect returns it by product name
// and memory), each profile of the table must be what the driver reports:
// ID, compute slices, instances, multiprocessors, copy engines, memory in
// MiB, name and placements. A profile the driver has and the table lacks
// is listed, not failed: the tables hold the guide's profiles, not every
// one. Whether NVML answers profile queries while MIG mode is off is
// recorded (the plugin reads them in either mode and publishes partitions
// only in MIG mode).
func MIGOutcome(cards []gpu.MIGQuery, expect func(product string, memoryMiB int64) (MIGExpectation, bool)) Outcome {
	if len(cards) == 0 {
		return Skip("NVML reports no card")
	}
	var notes, problems []string
	capable := 0
	for _, c := range cards {
		label := fmt.Sprintf("card %d (%s)", c.Index, c.Product)
		if c.ModeReturn != nvmlSuccess {
			notes = append(notes, fmt.Sprintf("%s: MIG mode %s", label, c.ModeReturn))
			continue
		}
		capable++
		answered := 0
		var first string
		for _, p := range c.Profiles {
			if first == "" {
				first = p.Return
			}
			if p.Return != nvmlSuccess {
				continue
			}
			answered++
			if p.NameError != "" {
				problems = append(problems, fmt.Sprintf("%s profile %d (ID %d, NVML %q): the plugin cannot name it: %s", label, p.Profile, p.ID, p.NVMLName, p.NameError))
			} else if nv := strings.TrimPrefix(p.NVMLName, "MIG "); nv != "" && nv != p.TangramName {
				problems = append(problems, fmt.Sprintf("%s profile %d (ID %d): NVML names it %q, the plugin %q", label, p.Profile, p.ID, nv, p.TangramName))
			}
		}
		mode := "off"
		if c.Enabled {
			mode = "on"
		}
		if c.Pending != c.Enabled {
			mode += ", pending change"
		}
		if answered == 0 {
			notes = append(notes, fmt.Sprintf("%s: MIG mode %s; NVML answers no profile (profile 0: %s)", label, mode, first))
			continue
		}
		notes = append(notes, fmt.Sprintf("%s: MIG mode %s; NVML answers %d profile(s)", label, mode, answered))
		want, ok := expect(c.Product, c.MemoryMiB)
		if !ok {
			notes = append(notes, fmt.Sprintf("%s: no mock table for this card", label))
			continue
		}
		diffs, extra := compareMIG(c, want)
		for _, d := range diffs {
			problems = append(problems, fmt.Sprintf("%s vs the mock's %s: %s", label, want.Name, d))
		}
		if len(extra) > 0 {
			notes = append(notes, fmt.Sprintf("%s: profiles the mock's %s lacks: %s", label, want.Name, strings.Join(extra, ", ")))
		}
	}
	detail := strings.Join(notes, "; ")
	if len(problems) > 0 {
		return Fail("%s; %s", strings.Join(problems, "; "), detail)
	}
	if capable == 0 {
		return Skip("no card can do MIG: %s", detail)
	}
	return Pass("%s", detail)
}

// compareMIG lists the differences between a card's answers and a mock
// table, by profile ID, and the answered profiles the table lacks.
func compareMIG(c gpu.MIGQuery, want MIGExpectation) (diffs, extra []string) {
	byID := map[int]gpu.MIGProfileQuery{}
	for _, p := range c.Profiles {
		if p.Return == nvmlSuccess {
			byID[p.ID] = p
		}
	}
	known := map[int]bool{}
	for _, w := range want.Profiles {
		known[w.ID] = true
		got, ok := byID[w.ID]
		if !ok {
			diffs = append(diffs, fmt.Sprintf("profile ID %d (%s) not reported by the driver", w.ID, w.Name))
			continue
		}
		field := func(what string, have, mock any) {
			if fmt.Sprint(have) != fmt.Sprint(mock) {
				diffs = append(diffs, fmt.Sprintf("profile ID %d (%s) %s: driver %v, mock %v", w.ID, w.Name, what, have, mock))
			}
		}
		field("name", got.TangramName, w.Name)
		field("compute slices", got.ComputeSlices, w.ComputeSlices)
		field("instances", got.Instances, w.Instances)
		field("multiprocessors", got.Multiprocessors, w.Multiprocessors)
		field("copy engines", got.CopyEngines, w.CopyEngines)
		field("decoders", got.Decoders, w.Decoders)
		field("JPEG engines", got.JPEGs, w.JPEGs)
		field("OFAs", got.OFAs, w.OFAs)
		if w.MemoryBytes > 0 {
			field("memory (MiB)", got.MemoryMiB, w.MemoryBytes>>20)
		}
		if got.PlacementsReturn == nvmlSuccess {
			field("placements", placementList(got.Placements), placementList(w.Placements))
		}
	}
	for _, p := range c.Profiles {
		if p.Return == nvmlSuccess && !known[p.ID] {
			extra = append(extra, fmt.Sprintf("ID %d %s", p.ID, orName(p)))
		}
	}
	slices.Sort(extra)
	return diffs, extra
}

func orName(p gpu.MIGProfileQuery) string {
	if p.NVMLName != "" {
		return strings.TrimPrefix(p.NVMLName, "MIG ")
	}
	return p.TangramName
}

func placementList(ps []gpu.MIGPlacement) string {
	parts := make([]string, len(ps))
	for i, p := range ps {
		parts[i] = fmt.Sprintf("%d:%d", p.Start, p.Size)
	}
	return strings.Join(parts, " ")
}
