package clusterview

import (
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"

	"sigs.k8s.io/yaml"

	"github.com/tangram-gpu/tangram/pkg/cluster"
	"github.com/tangram-gpu/tangram/pkg/device"
)

// Output formats of the -o flag.
const (
	FormatTable = "table"
	FormatJSON  = "json"
	FormatYAML  = "yaml"
)

// CheckFormat rejects an unknown -o value with the valid ones.
func CheckFormat(format string) error {
	switch format {
	case FormatTable, FormatJSON, FormatYAML:
		return nil
	}
	return fmt.Errorf("unknown output format %q: use -o table, -o json or -o yaml", format)
}

// WriteData writes v as indented JSON or as YAML.
func WriteData(w io.Writer, format string, v any) error {
	data, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return fmt.Errorf("encoding output as JSON: %w", err)
	}
	if format == FormatYAML {
		if data, err = yaml.JSONToYAML(data); err != nil {
			return fmt.Errorf("encoding output as YAML: %w", err)
		}
	} else {
		data = append(data, '\n')
	}
	_, err = w.Write(data)
	return err
}

// WriteStatus renders the view as text: one table per node, then the
// cluster totals and the pending claims.
func WriteStatus(w io.Writer, v *View, st Style) error {
	var b strings.Builder
	if len(v.Nodes) == 0 {
		b.WriteString("No gpu.tangram.dev devices found: is the Tangram kubelet plugin running on any node?\n")
	}
	for _, n := range v.Nodes {
		fmt.Fprintf(&b, "%s %s  %s%s\n", st.Paint(Bold, "NODE"), st.Paint(Bold, n.Name), totalsLine(n.Totals), SharesText(n, st))
		t := Table{Indent: "  "}
		t.Add(header("CARD", "PRODUCT", "MEMORY", "", "COMPUTE", "SHARES", "NVLINK", "CLAIM", "PODS")...)
		for _, c := range n.Cards {
			addCardRows(&t, c)
		}
		if err := t.Write(&b, st); err != nil {
			return err
		}
		writeTaints(&b, n.Cards, st)
		b.WriteByte('\n')
	}
	fmt.Fprintf(&b, "%s  %d %s, %s\n", st.Paint(Bold, "CLUSTER"), len(v.Nodes), plural(len(v.Nodes), "node"), totalsLine(v.Totals))
	if len(v.Gangs) > 0 {
		writeGangs(&b, v.Gangs, st)
	}
	if len(v.Pending) > 0 {
		writePending(&b, v.Pending, st)
	}
	for _, warn := range v.Warnings {
		fmt.Fprintf(&b, "%s  %s\n", st.Paint(Red, "WARNING"), warn)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// SharesText says how the node's shares are enforced, e.g. "  shares:
// advisory (NVIDIA driver older than r615: ...)"; "" when its cards publish
// no level.
func SharesText(n NodeView, st Style) string {
	if n.ShareEnforcement == "" {
		return ""
	}
	level := n.ShareEnforcement
	if n.ShareBackend == device.ShareBackendNone {
		level = "accounted only (sharing backend none)"
	}
	if n.ShareEnforcement == device.ShareEnforcementHard && n.ShareBackend != device.ShareBackendNone {
		return "  shares: " + st.Paint(Green, level)
	}
	text := "  shares: " + st.Paint(Yellow, level)
	if n.ShareEnforcementReason != "" {
		text += " (" + device.ShareEnforcementReasonText(n.ShareEnforcementReason) + ")"
	}
	return text
}

func plural(n int, word string) string {
	if n == 1 {
		return word
	}
	return word + "s"
}

func header(names ...string) []Cell {
	cells := make([]Cell, len(names))
	for i, n := range names {
		cells[i] = Cell{Text: n, Colour: Dim}
	}
	return cells
}

func totalsLine(t Totals) string {
	return fmt.Sprintf("%d %s: %d free, %d partly used, %d full; memory %s used of %s",
		t.Cards, plural(t.Cards, "card"), t.Free, t.Partial, t.Full, cluster.FormatBytes(t.MemoryUsedBytes), cluster.FormatBytes(t.MemoryBytes))
}

// addCardRows writes one row per allocation of the card (one row when it
// has none); the card's own columns are only on the first.
func addCardRows(t *Table, c CardView) {
	memColour := UsageColour(c.MemoryUsedBytes, c.MemoryBytes)
	shares := "-"
	switch {
	case c.MIG != nil:
		shares = "mig " + strconv.Itoa(len(c.Allocations)) + "/" + strconv.Itoa(c.MIG.Offered)
	case c.State == CardFree:
	case wholeHeld(c):
		shares = "whole"
	default:
		shares = strconv.Itoa(len(c.Allocations))
	}
	nvlink := c.NVLinkDomain
	if nvlink == "" {
		nvlink = "-"
	}
	device, deviceColour := c.Device, stateColour(c.State)
	if len(c.Taints) > 0 {
		// Marked here, explained under the table.
		device += "!"
		if taintsBlock(c.Taints) {
			deviceColour = Red
		}
	}
	first := []Cell{
		{Text: device, Colour: deviceColour},
		{Text: c.ProductName},
		{Text: Bar(c.MemoryUsedBytes, c.MemoryBytes), Colour: memColour},
		{Text: cluster.FormatBytes(c.MemoryUsedBytes) + " / " + cluster.FormatBytes(c.MemoryBytes), AlignRight: true},
		{Text: strconv.FormatInt(c.ComputeUsedPercent, 10) + "%", AlignRight: true},
		{Text: shares, AlignRight: true},
		{Text: nvlink},
	}
	if len(c.Allocations) == 0 {
		t.Add(append(first, Cell{Text: "-"}, Cell{Text: "-"})...)
		return
	}
	for i, a := range c.Allocations {
		row := first
		if i > 0 {
			row = make([]Cell, len(first))
		}
		pods := strings.Join(append(append([]string{}, a.Pods...), a.OtherConsumers...), ",")
		if pods == "" {
			pods = "(not reserved)"
		}
		t.Add(append(row, Cell{Text: allocationText(a), Colour: Cyan}, Cell{Text: pods})...)
	}
}

// taintsBlock reports whether a taint keeps new claims off the card.
func taintsBlock(taints []TaintView) bool {
	for _, t := range taints {
		if t.Effect == "NoSchedule" || t.Effect == "NoExecute" {
			return true
		}
	}
	return false
}

// writeTaints lists the node's tainted cards under its table: which taint
// and since when, so `status` says why a card takes no new claims.
func writeTaints(b *strings.Builder, cards []CardView, st Style) {
	for _, c := range cards {
		for _, t := range c.Taints {
			colour := Yellow
			if taintsBlock([]TaintView{t}) {
				colour = Red
			}
			fmt.Fprintf(b, "  %s %s: %s", st.Paint(colour, "TAINTED"), c.Device, t.String())
			if t.Since != "" {
				fmt.Fprintf(b, " since %s", t.Since)
			}
			switch t.Effect {
			case "None":
				b.WriteString(" (informational; the card is still allocated)")
			case "NoSchedule":
				b.WriteString(" (no new claims; running pods keep the card)")
			case "NoExecute":
				b.WriteString(" (no new claims; pods without a toleration are evicted)")
			}
			b.WriteByte('\n')
		}
	}
}

func wholeHeld(c CardView) bool {
	for _, a := range c.Allocations {
		if a.Whole && !a.AdminAccess {
			return true
		}
	}
	return false
}

// allocationText is "ns/claim" for a whole card, "ns/claim (20 GiB, 40%)"
// for a share.
func allocationText(a AllocationView) string {
	s := a.Claim.String()
	if a.Gang != "" {
		s += " [gang " + a.Gang + "]"
	}
	switch {
	case a.MIG != nil:
		s += " (" + a.MIG.Profile + " @" + strconv.FormatInt(a.MIG.PlacementStart, 10) + ")"
	case a.AdminAccess:
		s += " (admin access)"
	case !a.Whole:
		s += " (" + cluster.FormatBytes(a.MemoryBytes)
		if a.ComputePercent > 0 {
			s += ", " + strconv.FormatInt(a.ComputePercent, 10) + "%"
		}
		s += ")"
	}
	return s
}

func stateColour(state string) Colour {
	switch state {
	case CardFree:
		return Green
	case CardPartial:
		return Yellow
	default:
		return Red
	}
}

// writeGangs lists the GpuGangs after the cluster totals.
func writeGangs(b *strings.Builder, gangs []GangView, st Style) {
	fmt.Fprintf(b, "%s\n", st.Paint(Bold, "GANGS"))
	t := Table{Indent: "  "}
	t.Add(header("GANG", "PHASE", "MEMBERS", "PLACED", "RUNNING", "NODES", "WHY PENDING")...)
	for _, g := range gangs {
		phase := g.Phase
		if phase == "" {
			phase = "-"
		}
		colour := Yellow
		switch phase {
		case "Running", "Scheduled":
			colour = Green
		case "Failed":
			colour = Red
		}
		nodes := strings.Join(g.Nodes, ",")
		if nodes == "" {
			nodes = "-"
		}
		why := g.Diagnosis
		if why == "" {
			why = "-"
		}
		t.Add(Cell{Text: g.Namespace + "/" + g.Name, Colour: Cyan}, Cell{Text: phase, Colour: colour},
			Cell{Text: strconv.Itoa(int(g.Members)), AlignRight: true}, Cell{Text: strconv.Itoa(int(g.Placed)), AlignRight: true},
			Cell{Text: strconv.Itoa(int(g.Running)), AlignRight: true}, Cell{Text: nodes}, Cell{Text: why})
	}
	_ = t.Write(b, st)
}

// writePending lists the unallocated claims, with why where it is known.
func writePending(b *strings.Builder, pending []PendingClaim, st Style) {
	withWhy := 0
	refs := make([]string, len(pending))
	for i, p := range pending {
		refs[i] = p.String()
		if p.Why != "" {
			withWhy++
		}
	}
	hint := "(see kubectl tangram describe claim/NAME -n NAMESPACE)"
	if withWhy == 0 {
		fmt.Fprintf(b, "%s  %d %s not allocated: %s %s\n",
			st.Paint(Yellow, "PENDING"), len(pending), plural(len(pending), "claim"), strings.Join(refs, ", "), hint)
		return
	}
	fmt.Fprintf(b, "%s  %d %s not allocated %s\n", st.Paint(Yellow, "PENDING"), len(pending), plural(len(pending), "claim"), hint)
	t := Table{Indent: "  "}
	for _, p := range pending {
		why := p.Why
		if why == "" {
			why = "(not diagnosed here)"
		}
		t.Add(Cell{Text: p.String(), Colour: Cyan}, Cell{Text: why})
	}
	_ = t.Write(b, st)
}
