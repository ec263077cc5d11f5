// Package trace reads GPU cluster traces in the format Alibaba published with
// cluster-trace-gpu-v2023 ("openb"): a node list and a task (pod) list, both
// CSV with a header row. Only the columns the simulator needs are read;
// others may be present or absent, in any order.
package trace

import (
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
)

// Node is one row of a node list.
type Node struct {
	Name      string
	CPUMilli  int64
	MemoryMiB int64
	// GPUs is the number of cards; all are of Model.
	GPUs  int
	Model string
}

// Task is one row of a task list.
type Task struct {
	Name      string
	CPUMilli  int64
	MemoryMiB int64
	// NumGPU is the number of cards; with NumGPU == 1, GPUMilli < 1000 is a
	// share of one card.
	NumGPU   int
	GPUMilli int
	// GPUSpec lists the card models the task accepts; empty means any.
	GPUSpec []string
	// MIGProfile, set only by derived traces (the simulator's MIG
	// variant), asks for one MIG partition of that profile; GPUMilli is
	// then the partition's share of a card.
	MIGProfile string
}

// IsShare reports whether the task takes a fraction of one card.
func (t Task) IsShare() bool { return t.NumGPU == 1 && t.GPUMilli > 0 && t.GPUMilli < 1000 }

// RequestedMilliGPU is the task's GPU request in thousandths of a card.
func (t Task) RequestedMilliGPU() int64 {
	if t.IsShare() {
		return int64(t.GPUMilli)
	}
	return int64(t.NumGPU) * 1000
}

// ParseError points at the offending cell of a trace file.
type ParseError struct {
	File   string
	Line   int
	Column string
	Err    error
}

func (e *ParseError) Error() string {
	if e.Column == "" {
		return fmt.Sprintf("%s:%d: %v", e.File, e.Line, e.Err)
	}
	return fmt.Sprintf("%s:%d: column %q: %v", e.File, e.Line, e.Column, e.Err)
}

func (e *ParseError) Unwrap() error { return e.Err }

// ReadNodes reads a node list file.
func ReadNodes(path string) ([]Node, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("opening node list: %w", err)
	}
	defer f.Close()
	return ParseNodes(f, path)
}

// ReadTasks reads a task list file.
func ReadTasks(path string) ([]Task, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("opening task list: %w", err)
	}
	defer f.Close()
	return ParseTasks(f, path)
}

// ParseNodes parses a node list; file names the source in errors. Required
// columns: sn, cpu_milli, memory_mib, gpu, model.
func ParseNodes(r io.Reader, file string) ([]Node, error) {
	var nodes []Node
	seen := map[string]int{}
	err := readRows(r, file, []string{"sn", "cpu_milli", "memory_mib", "gpu", "model"}, func(row rowReader) error {
		n := Node{Name: row.str("sn"), Model: row.str("model")}
		n.CPUMilli = row.int64("cpu_milli", 1)
		n.MemoryMiB = row.int64("memory_mib", 1)
		n.GPUs = int(row.int64("gpu", 0))
		if row.err != nil {
			return row.err
		}
		if n.Name == "" {
			return row.fail("sn", errors.New("empty node name"))
		}
		if n.GPUs > 64 {
			return row.fail("gpu", fmt.Errorf("%d cards on one node is not plausible; expected 0..64", n.GPUs))
		}
		if n.GPUs > 0 && n.Model == "" {
			return row.fail("model", errors.New("a node with GPUs needs a model (e.g. T4)"))
		}
		if prev, dup := seen[n.Name]; dup {
			return row.fail("sn", fmt.Errorf("node %q already defined on line %d", n.Name, prev))
		}
		seen[n.Name] = row.line
		nodes = append(nodes, n)
		return nil
	})
	return nodes, err
}

// ParseTasks parses a task list; file names the source in errors. Required
// columns: name, cpu_milli, memory_mib, num_gpu, gpu_milli; gpu_spec is
// optional ('|'-separated models).
func ParseTasks(r io.Reader, file string) ([]Task, error) {
	var tasks []Task
	err := readRows(r, file, []string{"name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli"}, func(row rowReader) error {
		t := Task{Name: row.str("name")}
		t.CPUMilli = row.int64("cpu_milli", 0)
		t.MemoryMiB = row.int64("memory_mib", 0)
		t.NumGPU = int(row.int64("num_gpu", 0))
		t.GPUMilli = int(row.int64("gpu_milli", 0))
		if row.err != nil {
			return row.err
		}
		if t.Name == "" {
			return row.fail("name", errors.New("empty task name"))
		}
		if t.NumGPU > 64 {
			return row.fail("num_gpu", fmt.Errorf("%d cards for one task is not plausible; expected 0..64", t.NumGPU))
		}
		if t.GPUMilli > 1000 {
			return row.fail("gpu_milli", fmt.Errorf("%d is more than one card; expected 0..1000 (per card)", t.GPUMilli))
		}
		if t.NumGPU > 1 && t.GPUMilli != 1000 {
			return row.fail("gpu_milli", fmt.Errorf("a %d-card task must take whole cards (1000), not %d", t.NumGPU, t.GPUMilli))
		}
		if t.NumGPU == 1 && t.GPUMilli == 0 {
			return row.fail("gpu_milli", errors.New("a 1-card task needs gpu_milli 1..1000"))
		}
		if t.NumGPU == 0 && t.GPUMilli != 0 {
			return row.fail("gpu_milli", fmt.Errorf("%d milli-GPU with num_gpu 0; set num_gpu to 1", t.GPUMilli))
		}
		if spec := row.str("gpu_spec"); spec != "" {
			for _, m := range strings.Split(spec, "|") {
				if m = strings.TrimSpace(m); m != "" {
					t.GPUSpec = append(t.GPUSpec, m)
				}
			}
		}
		tasks = append(tasks, t)
		return nil
	})
	return tasks, err
}

// rowReader gives typed access to one CSV record; the first error sticks.
type rowReader struct {
	file   string
	line   int
	cols   map[string]int
	record []string
	err    error
}

func (r *rowReader) str(col string) string {
	i, ok := r.cols[col]
	if !ok || i >= len(r.record) {
		return ""
	}
	return strings.TrimSpace(r.record[i])
}

func (r *rowReader) int64(col string, min int64) int64 {
	if r.err != nil {
		return 0
	}
	s := r.str(col)
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		r.err = r.fail(col, fmt.Errorf("%q is not an integer", s))
		return 0
	}
	if v < min {
		r.err = r.fail(col, fmt.Errorf("%d is below the minimum %d", v, min))
		return 0
	}
	return v
}

func (r *rowReader) fail(col string, err error) error {
	return &ParseError{File: r.file, Line: r.line, Column: col, Err: err}
}

func readRows(in io.Reader, file string, required []string, handle func(rowReader) error) error {
	cr := csv.NewReader(in)
	cr.FieldsPerRecord = -1 // checked below, with a better message
	header, err := cr.Read()
	if errors.Is(err, io.EOF) {
		return &ParseError{File: file, Line: 1, Err: errors.New("empty file; expected a header row")}
	}
	if err != nil {
		return fmt.Errorf("reading %s: %w", file, err)
	}
	cols := map[string]int{}
	for i, h := range header {
		cols[strings.TrimSpace(strings.TrimPrefix(h, "\ufeff"))] = i
	}
	for _, c := range required {
		if _, ok := cols[c]; !ok {
			return &ParseError{File: file, Line: 1, Column: c, Err: fmt.Errorf("missing from the header (need %s)", strings.Join(required, ","))}
		}
	}
	for {
		record, err := cr.Read()
		if errors.Is(err, io.EOF) {
			return nil
		}
		line, _ := cr.FieldPos(0)
		if err != nil {
			var pe *csv.ParseError
			if errors.As(err, &pe) {
				return &ParseError{File: file, Line: pe.Line, Err: pe.Err}
			}
			return fmt.Errorf("reading %s: %w", file, err)
		}
		if len(record) != len(header) {
			return &ParseError{File: file, Line: line, Err: fmt.Errorf("%d fields, the header has %d", len(record), len(header))}
		}
		if err := handle(rowReader{file: file, line: line, cols: cols, record: record}); err != nil {
			return err
		}
	}
}
