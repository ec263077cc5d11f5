package fakegpu

import (
	"fmt"
	"regexp"
	"sort"

	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/tangram-gpu/tangram/pkg/gpu"
)

var (
	majorMinorVersion = regexp.MustCompile(`^[0-9]+\.[0-9]+$`)
	driverVersion     = regexp.MustCompile(`^[0-9]+(\.[0-9]+){1,3}$`)
	architectureName  = regexp.MustCompile(`^[a-z][a-z0-9-]*$`)
)

// Validate checks a Profile built in Go (a parsed one is already checked).
// Problems carry no line numbers, only field paths.
func (p *Profile) Validate() error {
	if p == nil {
		return &ProfileError{Problems: []ProfileProblem{{Message: "no profile given"}}}
	}
	d := newProfileDecoder()
	validateProfile(d, p)
	if len(d.problems) > 0 {
		return &ProfileError{Source: p.Name, Problems: d.sortedProblems()}
	}
	return nil
}

// validateProfile checks values and the relations between cards; problems
// are added to d, with lines from d.pos where the profile came from a file.
func validateProfile(d *profileDecoder, p *Profile) {
	if len(p.GPUs) == 0 {
		d.addf(d.pos.gpusLine, "gpus", "the list is empty: a profile needs at least one card")
		return
	}
	at := func(i int, field string) (int, string) {
		path := fmt.Sprintf("gpus[%d].%s", i, field)
		if i >= len(d.pos.gpus) {
			return 0, path
		}
		if fp, ok := d.pos.gpus[i].fields[field]; ok {
			return fp.line, fp.path
		}
		return d.pos.gpus[i].line, path
	}
	problem := func(i int, field, format string, args ...any) {
		line, path := at(i, field)
		d.addf(line, path, format, args...)
	}

	byIndex := map[int]int{} // card index -> position in the list
	byMinor := map[int]int{}
	byBusID := map[string]int{}
	for i, g := range p.GPUs {
		indexOK := false
		if g.Index < 0 {
			problem(i, "index", "must not be negative, got %d", g.Index)
		} else if first, dup := byIndex[g.Index]; dup {
			problem(i, "index", "%d is already the index of gpus[%d]: every card needs its own index", g.Index, first)
		} else {
			byIndex[g.Index] = i
			indexOK = true
		}
		minor := g.Index
		if g.Minor != nil {
			minor = *g.Minor
		}
		first, dupMinor := byMinor[minor]
		switch {
		case g.Minor == nil && !indexOK:
			// The minor is the index, whose problem is already reported.
		case minor < 0:
			problem(i, "minor", "must not be negative, got %d", minor)
		case dupMinor:
			problem(i, "minor", "%d is already the minor number of gpus[%d] (minor defaults to the index)", minor, first)
		default:
			byMinor[minor] = i
		}
		if g.NUMANode != nil && *g.NUMANode < 0 {
			problem(i, "numaNode", "must not be negative, got %d (leave the field out when unknown)", *g.NUMANode)
		}
		if g.ProductName == "" {
			problem(i, "productName", `missing (e.g. productName: "NVIDIA H100 80GB HBM3", or set it under defaults:)`)
		}
		validateMemory(g.Memory, func(format string, args ...any) { problem(i, "memory", format, args...) })
		if g.PCIBusID != "" {
			if busID, err := gpu.NormalizePCIBusID(g.PCIBusID); err != nil {
				problem(i, "pciBusID", "%v", err)
			} else if first, dup := byBusID[busID]; dup {
				problem(i, "pciBusID", "%q is already the PCI bus ID of gpus[%d]", g.PCIBusID, first)
			} else {
				byBusID[busID] = i
			}
		}
		if g.Architecture != "" && !architectureName.MatchString(g.Architecture) {
			problem(i, "architecture", "%q is not a lower-case architecture name (e.g. hopper, ampere, ada-lovelace)", g.Architecture)
		}
		if g.CUDAComputeCapability != "" && !majorMinorVersion.MatchString(g.CUDAComputeCapability) {
			problem(i, "cudaComputeCapability", `%q is not <major>.<minor> (e.g. "9.0")`, g.CUDAComputeCapability)
		}
		if g.CUDADriverVersion != "" && !majorMinorVersion.MatchString(g.CUDADriverVersion) {
			problem(i, "cudaDriverVersion", `%q is not <major>.<minor> (e.g. "13.0")`, g.CUDADriverVersion)
		}
		if g.DriverVersion != "" && !driverVersion.MatchString(g.DriverVersion) {
			problem(i, "driverVersion", `%q is not a driver version (e.g. "580.95.05")`, g.DriverVersion)
		}
		validateMIG(g, func(field, format string, args ...any) { problem(i, field, format, args...) })
	}

	// NVLinks need every index first.
	for i, g := range p.GPUs {
		seen := map[int]bool{}
		for j, peer := range g.NVLinks {
			line, path := 0, fmt.Sprintf("gpus[%d].nvlinks[%d]", i, j)
			if i < len(d.pos.gpus) && j < len(d.pos.gpus[i].nvlinks) {
				line = d.pos.gpus[i].nvlinks[j]
			}
			switch {
			case peer == g.Index:
				d.addf(line, path, "card %d cannot have an NVLink to itself", g.Index)
			case seen[peer]:
				d.addf(line, path, "card %d is listed twice", peer)
			default:
				if _, ok := byIndex[peer]; !ok {
					d.addf(line, path, "there is no card with index %d (indexes in this profile: %s)", peer, indexList(byIndex))
				}
			}
			seen[peer] = true
		}
	}
}

func validateMemory(s string, problem func(format string, args ...any)) {
	if s == "" {
		problem("missing: the card's total memory as a quantity (e.g. memory: 80Gi)")
		return
	}
	q, err := resource.ParseQuantity(s)
	if err != nil {
		problem("%q is not a quantity (use e.g. 80Gi)", s)
		return
	}
	if q.Sign() <= 0 {
		problem("%q must be more than zero", s)
		return
	}
	if q.Cmp(*resource.NewQuantity(q.Value(), resource.BinarySI)) != 0 {
		problem("%q is not a whole number of bytes (use e.g. 80Gi)", s)
	}
}

// memoryBytes converts a validated memory quantity.
func memoryBytes(s string) int64 {
	q, err := resource.ParseQuantity(s)
	if err != nil {
		return 0
	}
	return q.Value()
}

func indexList(byIndex map[int]int) string {
	idx := make([]int, 0, len(byIndex))
	for i := range byIndex {
		idx = append(idx, i)
	}
	sort.Ints(idx)
	return fmt.Sprint(idx)
}

// symmetriseNVLinks makes every link two-way and sorts the lists: NVLink is
// undirected, so writing a link on either card is enough.
func symmetriseNVLinks(p *Profile) {
	pos := map[int]int{}
	for i, g := range p.GPUs {
		pos[g.Index] = i
	}
	peers := make([]map[int]bool, len(p.GPUs))
	for i := range peers {
		peers[i] = map[int]bool{}
	}
	for i, g := range p.GPUs {
		for _, peer := range g.NVLinks {
			j, ok := pos[peer]
			if !ok || j == i {
				continue
			}
			peers[i][peer] = true
			peers[j][g.Index] = true
		}
	}
	for i := range p.GPUs {
		if len(peers[i]) == 0 {
			p.GPUs[i].NVLinks = nil
			continue
		}
		list := make([]int, 0, len(peers[i]))
		for peer := range peers[i] {
			list = append(list, peer)
		}
		sort.Ints(list)
		p.GPUs[i].NVLinks = list
	}
}

// validateMIG checks a card's MIG fields: a known card type, modes spelled
// "enabled" or "disabled", and no mode without a type.
func validateMIG(g ProfileGPU, problem func(field, format string, args ...any)) {
	if g.MIGType != "" && MIGTable(g.MIGType) == nil {
		problem("migType", "%q is not a MIG card type this fake knows (known: %s)", g.MIGType, migTypeList())
	} else if gib, ok := migCardGiB[g.MIGType]; ok {
		// The profiles' memory is a share of the card's: a card of another
		// size would get profiles named after memory it does not have.
		if b := memoryBytes(g.Memory); b > 0 && (float64(b) < 0.9*float64(gib<<30) || float64(b) > 1.1*float64(gib<<30)) {
			problem("migType", "%q is for cards of about %d GiB, but the card's memory is %s: give the card that memory or the MIG type of its size", g.MIGType, gib, g.Memory)
		}
	}
	for _, f := range [][2]string{{"migMode", g.MIGMode}, {"migPendingMode", g.MIGPendingMode}} {
		field, v := f[0], f[1]
		if !validMIGMode(v) {
			problem(field, "%q is not a MIG mode: want %q or %q", v, MIGModeEnabled, MIGModeDisabled)
		} else if v != "" && g.MIGType == "" {
			problem(field, "is set but the card has no migType: name its MIG card type (one of %s) or leave the mode out", migTypeList())
		}
	}
}
