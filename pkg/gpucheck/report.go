package gpucheck

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"time"
)

// Machine describes the machine a report is about.
type Machine struct {
	Hostname string `json:"hostname"`
	// GPUs are the cards' product names, one per card.
	GPUs          []string `json:"gpus"`
	DriverVersion string   `json:"driverVersion"`
	CUDAVersion   string   `json:"cudaVersion,omitempty"`
	Kernel        string   `json:"kernel"`
	DriverRoot    string   `json:"driverRoot"`
	// Version is the plugin build that ran the checks.
	Version string `json:"version,omitempty"`
}

// Report is a finished run.
type Report struct {
	Machine  Machine   `json:"machine"`
	Started  time.Time `json:"started"`
	Records  []Record  `json:"checks"`
	Summary  string    `json:"summary"`
	ExitCode int       `json:"exitCode"`
}

// NewReport fills the summary and exit code from the records: non-zero
// when any check failed.
func NewReport(m Machine, started time.Time, records []Record) Report {
	c := Count(records)
	exit := 0
	if c.Failed > 0 {
		exit = 1
	}
	return Report{Machine: m, Started: started.UTC(), Records: records, Summary: c.Summary(), ExitCode: exit}
}

// FileStem names the report files: GPU, driver, kernel and date, so that
// reports of several machines can sit in one folder (docs/gpu-reports).
func (r Report) FileStem() string {
	gpu := "no-gpu"
	if len(r.Machine.GPUs) > 0 {
		gpu = r.Machine.GPUs[0]
		gpu = strings.TrimPrefix(gpu, "NVIDIA ")
	}
	return fmt.Sprintf("gpu-check-%s-driver-%s-kernel-%s-%s", slug(gpu), slug(r.Machine.DriverVersion),
		slug(r.Machine.Kernel), r.Started.UTC().Format("20060102T150405Z"))
}

// slug keeps letters, digits, dots and dashes.
func slug(s string) string {
	var b strings.Builder
	dash := false
	for _, r := range strings.ToLower(strings.TrimSpace(s)) {
		ok := r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '.'
		switch {
		case ok:
			b.WriteRune(r)
			dash = false
		case !dash && b.Len() > 0:
			b.WriteByte('-')
			dash = true
		}
	}
	out := strings.TrimSuffix(b.String(), "-")
	if out == "" {
		return "unknown"
	}
	return out
}

// WriteMarkdown writes the report for people.
func WriteMarkdown(w io.Writer, r Report) error {
	var b strings.Builder
	m := r.Machine
	fmt.Fprintf(&b, "# Tangram GPU check: %s\n\n", orUnknown(m.Hostname))
	fmt.Fprintf(&b, "| | |\n|---|---|\n")
	row := func(k, v string) { fmt.Fprintf(&b, "| %s | %s |\n", k, cell(v)) }
	row("Date", r.Started.UTC().Format(time.RFC3339))
	row("GPUs", gpuList(m.GPUs))
	row("Driver", orUnknown(m.DriverVersion)+cudaSuffix(m.CUDAVersion))
	row("Kernel", orUnknown(m.Kernel))
	row("Driver root", orUnknown(m.DriverRoot))
	if m.Version != "" {
		row("Plugin", m.Version)
	}
	row("Result", r.Summary)
	fmt.Fprintf(&b, "\n## Checks\n\n| Check | Result | Time | Detail |\n|---|---|---|---|\n")
	for _, rec := range r.Records {
		fmt.Fprintf(&b, "| %s | %s | %s | %s |\n", cell(rec.Name), resultMark(rec.Outcome), rec.Duration.Round(100*time.Millisecond), cell(rec.Detail))
	}
	fmt.Fprintf(&b, "\n%s\n", r.Summary)
	_, err := io.WriteString(w, b.String())
	return err
}

// WriteJSON writes the report for programs.
func WriteJSON(w io.Writer, r Report) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

func resultMark(o Outcome) string {
	switch o.Result {
	case Passed:
		if o.Noted {
			return "PASS, note"
		}
		return "PASS"
	case Skipped:
		return "skip"
	default:
		return "**FAIL**"
	}
}

func gpuList(gpus []string) string {
	if len(gpus) == 0 {
		return "none found"
	}
	counts := map[string]int{}
	var order []string
	for _, g := range gpus {
		if counts[g] == 0 {
			order = append(order, g)
		}
		counts[g]++
	}
	parts := make([]string, len(order))
	for i, g := range order {
		parts[i] = fmt.Sprintf("%d × %s", counts[g], g)
	}
	return strings.Join(parts, ", ")
}

func cudaSuffix(v string) string {
	if v == "" {
		return ""
	}
	return " (CUDA " + v + ")"
}

func orUnknown(s string) string {
	if strings.TrimSpace(s) == "" {
		return "unknown"
	}
	return s
}

// cell makes text safe inside a Markdown table cell.
func cell(s string) string {
	s = strings.ReplaceAll(s, "|", `\|`)
	return strings.Join(strings.Fields(s), " ")
}
