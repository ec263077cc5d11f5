package usageview

import (
	"fmt"
	"io"
	"math"
	"strings"
	"time"

	"github.com/tangram-gpu/tangram/pkg/cluster"
	"github.com/tangram-gpu/tangram/pkg/clusterview"
)

// WriteTop renders the view: per node, each card with the memory its
// processes use, then its devices busiest first, shares over their memory
// marked OVER, and the processes no claim accounts for.
func WriteTop(w io.Writer, v *View, st clusterview.Style) error {
	var b strings.Builder
	if len(v.Nodes) == 0 {
		b.WriteString("No node's GPU usage found.\n")
	}
	for i, n := range v.Nodes {
		if i > 0 {
			b.WriteByte('\n')
		}
		writeNode(&b, n, st)
	}
	for _, note := range v.Notes {
		fmt.Fprintf(&b, "\n%s %s\n", st.Paint(clusterview.Yellow, "Note:"), note)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func writeNode(b *strings.Builder, n Node, st clusterview.Style) {
	title := st.Paint(clusterview.Bold, "NODE") + " " + st.Paint(clusterview.Bold, n.Name)
	if n.Error != "" {
		fmt.Fprintf(b, "%s  %s\n", title, st.Paint(clusterview.Red, "usage not known"))
		fmt.Fprintf(b, "  pod %s: %s\n", n.Pod, n.Error)
		return
	}
	var used int64
	for _, c := range n.Cards {
		used += c.UsedBytes
	}
	fmt.Fprintf(b, "%s  %d %s, %s used; read %s ago (pod %s)\n", title, len(n.Cards), plural(len(n.Cards), "card"),
		cluster.FormatBytes(used), age(time.Duration(n.AgeSeconds*float64(time.Second))), n.Pod)
	ambiguous := false
	t := clusterview.Table{Indent: "  "}
	t.Add(header("CARD", "MEMORY", "CLAIM", "DEVICE", "USED", "GIVEN", "USE", "SM", "")...)
	for _, c := range n.Cards {
		name := c.Name
		if name == "" {
			name = c.UUID
		}
		first := []clusterview.Cell{{Text: name}, {Text: cluster.FormatBytes(c.UsedBytes), AlignRight: true}}
		blank := []clusterview.Cell{{}, {}}
		row := func(cells ...clusterview.Cell) {
			t.Add(append(first, cells...)...)
			first = blank
		}
		if c.Idle() {
			row(clusterview.Cell{Text: "no GPU process", Colour: clusterview.Dim})
			continue
		}
		for _, d := range c.Devices {
			row(deviceCells(d)...)
		}
		if c.UnaccountedProcesses > 0 {
			row(clusterview.Cell{Text: "unaccounted", Colour: clusterview.Yellow},
				clusterview.Cell{Text: processes(c.UnaccountedProcesses)},
				clusterview.Cell{Text: cluster.FormatBytes(c.UnaccountedBytes), AlignRight: true})
		}
		if c.NodeProcesses > 0 {
			row(clusterview.Cell{Text: "node's own (MPS)", Colour: clusterview.Dim}, clusterview.Cell{Text: processes(c.NodeProcesses)})
		}
		if c.AmbiguousProcesses > 0 {
			ambiguous = true
			row(clusterview.Cell{Text: "ambiguous*", Colour: clusterview.Dim}, clusterview.Cell{Text: processes(c.AmbiguousProcesses)})
		}
		if first[0].Text != "" {
			// Its devices are on no named card (OtherDevices).
			row()
		}
	}
	for _, d := range n.OtherDevices {
		t.Add(append([]clusterview.Cell{{Text: "?"}, {}}, deviceCells(d)...)...)
	}
	_ = t.Write(b, st)
	if ambiguous {
		b.WriteString("  *: in a pod holding several devices of the card, counted on the first (NVML does not say which one a process uses)\n")
	}
	if len(n.OtherDevices) > 0 {
		b.WriteString("  ?: on a card the node's ResourceSlices do not name\n")
	}
}

// age is a round's age to the second, a long one coarser.
func age(d time.Duration) string {
	switch {
	case d < time.Hour:
		return d.Round(time.Second).String()
	case d < 48*time.Hour:
		return strings.TrimSuffix(d.Round(time.Minute).String(), "0s")
	}
	return fmt.Sprintf("%dd", int(d.Hours()/24))
}

func deviceCells(d Device) []clusterview.Cell {
	cells := []clusterview.Cell{
		{Text: d.Namespace + "/" + d.Claim},
		{Text: d.Device},
		{Text: cluster.FormatBytes(d.UsedBytes), AlignRight: true},
	}
	sm := clusterview.Cell{Text: "-", AlignRight: true}
	if d.SMPercent != nil {
		sm.Text = fmt.Sprintf("%d%%", *d.SMPercent)
	}
	if !d.Share {
		return append(cells, clusterview.Cell{Text: "-", AlignRight: true}, clusterview.Cell{}, sm)
	}
	cells = append(cells,
		clusterview.Cell{Text: cluster.FormatBytes(d.AllowedBytes), AlignRight: true},
		clusterview.Cell{Text: percent(d.Fraction()), AlignRight: true, Colour: useColour(d)},
		sm)
	if d.Over {
		cells = append(cells, clusterview.Cell{Text: "OVER", Colour: clusterview.Red})
	}
	return cells
}

func useColour(d Device) clusterview.Colour {
	if d.Over {
		return clusterview.Red
	}
	return clusterview.UsageColour(d.UsedBytes, d.AllowedBytes)
}

func percent(f float64) string {
	return fmt.Sprintf("%d%%", int(math.Round(f*100)))
}

func processes(n int) string { return fmt.Sprintf("%d %s", n, plural(n, "process")) }

func plural(n int, word string) string {
	switch {
	case n == 1:
		return word
	case strings.HasSuffix(word, "s"):
		return word + "es"
	}
	return word + "s"
}

func header(names ...string) []clusterview.Cell {
	cells := make([]clusterview.Cell, len(names))
	for i, n := range names {
		cells[i] = clusterview.Cell{Text: n, Colour: clusterview.Dim}
	}
	return cells
}
