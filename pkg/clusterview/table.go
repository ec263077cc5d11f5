package clusterview

import (
	"io"
	"strings"
	"unicode/utf8"
)

// Colour is an ANSI SGR code, applied only when the output is a terminal.
type Colour string

// The few colours the views use.
const (
	NoColour Colour = ""
	Bold     Colour = "1"
	Dim      Colour = "2"
	Red      Colour = "31"
	Green    Colour = "32"
	Yellow   Colour = "33"
	Cyan     Colour = "36"
)

// Style says how text is written: with colour (a terminal without NO_COLOR)
// or plain.
type Style struct{ Colour bool }

// Paint wraps s in the colour's escape codes when colour is on.
func (st Style) Paint(c Colour, s string) string {
	if !st.Colour || c == NoColour || s == "" {
		return s
	}
	return "\x1b[" + string(c) + "m" + s + "\x1b[0m"
}

// Cell is one table cell.
type Cell struct {
	Text   string
	Colour Colour
	// AlignRight pads on the left (numbers).
	AlignRight bool
}

// Table lays out rows in columns. Widths are counted in runes of the plain
// text, so colour codes never break the alignment (text/tabwriter would
// count them).
type Table struct {
	Indent string
	Rows   [][]Cell
}

// Add appends a row.
func (t *Table) Add(cells ...Cell) { t.Rows = append(t.Rows, cells) }

// AddText appends a row of plain cells.
func (t *Table) AddText(texts ...string) {
	row := make([]Cell, len(texts))
	for i, s := range texts {
		row[i] = Cell{Text: s}
	}
	t.Add(row...)
}

// Write renders the table. The last cell of a row is not padded, so lines
// carry no trailing blanks.
func (t *Table) Write(w io.Writer, st Style) error {
	var widths []int
	for _, row := range t.Rows {
		for i, c := range row {
			if i >= len(widths) {
				widths = append(widths, 0)
			}
			widths[i] = max(widths[i], utf8.RuneCountInString(c.Text))
		}
	}
	var b strings.Builder
	for _, row := range t.Rows {
		line := strings.Builder{}
		line.WriteString(t.Indent)
		for i, c := range row {
			pad := strings.Repeat(" ", widths[i]-utf8.RuneCountInString(c.Text))
			last := i == len(row)-1
			switch {
			case c.AlignRight:
				line.WriteString(pad + st.Paint(c.Colour, c.Text))
			case last:
				line.WriteString(st.Paint(c.Colour, c.Text))
			default:
				line.WriteString(st.Paint(c.Colour, c.Text) + pad)
			}
			if !last {
				line.WriteString("  ")
			}
		}
		b.WriteString(strings.TrimRight(line.String(), " "))
		b.WriteByte('\n')
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// Bar draws used/total as ten blocks.
func Bar(used, total int64) string {
	const width = 10
	filled := 0
	if total > 0 {
		// Round up so any use shows at least one block.
		filled = int((used*width + total - 1) / total)
	}
	filled = min(max(filled, 0), width)
	return strings.Repeat("█", filled) + strings.Repeat("░", width-filled)
}

// UsageColour is green below half, yellow below full, red when full.
func UsageColour(used, total int64) Colour {
	switch {
	case total <= 0 || used*2 < total:
		return Green
	case used < total:
		return Yellow
	default:
		return Red
	}
}
