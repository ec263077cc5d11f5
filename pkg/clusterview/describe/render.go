package describe

import (
	"cmp"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/tangram-gpu/tangram/pkg/cluster"
	"github.com/tangram-gpu/tangram/pkg/clusterview"
	"github.com/tangram-gpu/tangram/pkg/device"
)

// WriteClaim renders a claim report as text.
func WriteClaim(w io.Writer, r *ClaimReport, st clusterview.Style) error {
	var b strings.Builder
	writeClaim(&b, "", r, st)
	_, err := io.WriteString(w, b.String())
	return err
}

// WritePod renders a pod report as text.
func WritePod(w io.Writer, r *PodReport, st clusterview.Style) error {
	var b strings.Builder
	field(&b, "", "Pod", st.Paint(clusterview.Bold, r.Namespace+"/"+r.Name), st)
	where := r.Phase
	if r.Node != "" {
		where += " on " + r.Node
	} else {
		where += ", not scheduled"
	}
	field(&b, "", "Phase", where, st)
	if p := r.Preemption; p != nil {
		field(&b, "", "Preemption", st.Paint(clusterview.Yellow, p.Summary), st)
		for _, v := range p.Victims {
			claims := "no allocated claim left"
			if len(v.Claims) > 0 {
				claims = "holds " + strings.Join(v.Claims, "; ")
			}
			fmt.Fprintf(&b, "  - %s: terminating, %s\n", v.Pod, claims)
		}
	}
	if len(r.Claims) == 0 {
		b.WriteString("The pod uses no resource claims.\n")
	} else if r.Node == "" && allAllocated(r) {
		b.WriteString("All of its claims are allocated: the pod waits for something else (see kubectl describe pod).\n")
	}
	if r.Together != "" {
		field(&b, "", "Why", st.Paint(clusterview.Yellow, r.Together), st)
	}
	for _, c := range r.Claims {
		fmt.Fprintf(&b, "\n%s %q\n", st.Paint(clusterview.Bold, "Resource claim"), c.Name)
		if c.Report == nil {
			field(&b, "  ", "Problem", st.Paint(clusterview.Yellow, c.Problem), st)
			continue
		}
		writeClaim(&b, "  ", c.Report, st)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func writeClaim(b *strings.Builder, indent string, r *ClaimReport, st clusterview.Style) {
	field(b, indent, "Claim", st.Paint(clusterview.Bold, r.Claim.String()), st)
	field(b, indent, "Asks for", r.AsksFor, st)
	pods := strings.Join(append(append([]string{}, r.Pods...), r.OtherConsumers...), ", ")
	if pods == "" {
		pods = "not reserved yet (a claim is reserved for its pod when the pod is scheduled)"
	}
	field(b, indent, "Reserved for", pods, st)
	if r.State == StatePending {
		field(b, indent, "State", st.Paint(clusterview.Yellow, "pending: not allocated"), st)
		writeDiagnosis(b, indent, r, st)
		return
	}
	field(b, indent, "State", st.Paint(clusterview.Green, "allocated")+" on "+strings.Join(r.Nodes, ", "), st)
	t := clusterview.Table{Indent: indent + "  "}
	t.Add(header("REQUEST", "DEVICE", "PRODUCT", "UUID", "NVLINK", "SHARE", "MEMORY", "COMPUTE")...)
	for _, g := range r.Devices {
		where := g.Pool + "/" + g.Device
		if g.Node != "" {
			where = g.Node + "/" + g.Device
		}
		share := "whole"
		if !g.Whole {
			share = "share"
		}
		row := []clusterview.Cell{
			{Text: g.Request}, {Text: where, Colour: clusterview.Cyan}, {Text: dash(g.ProductName)}, {Text: dash(g.UUID)},
			{Text: dash(g.NVLinkDomain)}, {Text: share},
			{Text: cluster.FormatBytes(g.MemoryBytes), AlignRight: true},
			{Text: strconv.FormatInt(g.ComputePercent, 10) + "%", AlignRight: true},
		}
		if g.Missing {
			row[1].Text += " (not published any more)"
			row[1].Colour = clusterview.Red
		}
		t.Add(row...)
	}
	field(b, indent, "Devices", "", st)
	_ = t.Write(b, st)
	if hasShare(r) {
		writeEnforcement(b, indent, r, st)
	}
}

// writeEnforcement says how each node holding a share of the claim
// enforces it, and why not harder.
func writeEnforcement(b *strings.Builder, indent string, r *ClaimReport, st clusterview.Style) {
	seen := map[string]bool{}
	var lines []string
	for _, g := range r.Devices {
		if g.Whole || g.ShareEnforcement == "" {
			continue
		}
		var line string
		switch g.ShareEnforcement {
		case device.ShareEnforcementHard:
			line = st.Paint(clusterview.Green, "hard") + ": the driver limits the memory of the pod's containers together; MPS v3 holds compute"
		default:
			line = st.Paint(clusterview.Yellow, g.ShareEnforcement)
			if g.ShareEnforcementReason != "" {
				line += ": " + device.ShareEnforcementReasonText(g.ShareEnforcementReason)
			}
		}
		node := cmp.Or(g.Node, g.Pool)
		if key := node + "\x00" + line; !seen[key] {
			seen[key] = true
			lines = append(lines, node+": "+line)
		}
	}
	if len(lines) == 0 {
		fmt.Fprintf(b, "%s  A share's memory and compute are the limits enforced in the container (MPS).\n", indent)
		return
	}
	for _, l := range lines {
		field(b, indent, "Enforcement", l, st)
	}
}

func writeDiagnosis(b *strings.Builder, indent string, r *ClaimReport, st clusterview.Style) {
	d := r.Diagnosis
	if d == nil {
		return
	}
	if len(d.FitsOn) > 0 {
		field(b, indent, "Why", d.Summary(), st)
		return
	}
	field(b, indent, "Why", "", st)
	for _, reason := range d.Reasons {
		fmt.Fprintf(b, "%s  - %s\n", indent, reason)
	}
}

func allAllocated(r *PodReport) bool {
	for _, c := range r.Claims {
		if c.Report == nil || c.Report.State != StateAllocated {
			return false
		}
	}
	return true
}

func hasShare(r *ClaimReport) bool {
	for _, g := range r.Devices {
		if !g.Whole {
			return true
		}
	}
	return false
}

func field(b *strings.Builder, indent, name, value string, st clusterview.Style) {
	label := fmt.Sprintf("%-14s", name+":")
	line := indent + st.Paint(clusterview.Dim, label) + value
	b.WriteString(strings.TrimRight(line, " ") + "\n")
}

func header(names ...string) []clusterview.Cell {
	cells := make([]clusterview.Cell, len(names))
	for i, n := range names {
		cells[i] = clusterview.Cell{Text: n, Colour: clusterview.Dim}
	}
	return cells
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
