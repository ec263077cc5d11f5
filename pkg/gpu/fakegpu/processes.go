package fakegpu

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"

	"github.com/tangram-gpu/tangram/pkg/gpu"
)

// ProcessesFileName is the fake cards' process list in the plugin's state
// directory (ProcessesFile).
const ProcessesFileName = "fake-processes.json"

// ProcessesFile lists the processes "running" on fake cards: what a test
// or the demo writes to Path, a JSON array of
// {"card": UUID, "pid": PID, "usedBytes": N, "gpuInstance": GI, "smPercent": P}
// (gpuInstance optional, outside MIG when left out; usedBytes -1 for
// memory NVML would not report; smPercent optional, not known when left
// out). PIDs are the host's, so that the usage
// watcher finds their pods as it does NVML's. No file: nothing runs.
type ProcessesFile struct{ Path string }

type fileProcess struct {
	Card        string `json:"card"`
	PID         int    `json:"pid"`
	UsedBytes   int64  `json:"usedBytes"`
	GPUInstance *int   `json:"gpuInstance,omitempty"`
	MPSClient   bool   `json:"mpsClient,omitempty"`
	SMPercent   *int   `json:"smPercent,omitempty"`
}

// GPUProcesses implements gpu.ProcessLister. A malformed file lists
// nothing and says what is wrong with it.
func (f ProcessesFile) GPUProcesses(context.Context) ([]gpu.Process, error) {
	data, err := os.ReadFile(f.Path)
	if errors.Is(err, fs.ErrNotExist) {
		return []gpu.Process{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading the fake cards' processes: %w", err)
	}
	var in []fileProcess
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&in); err != nil {
		return nil, fmt.Errorf("the fake cards' processes in %s: want a JSON array of {\"card\", \"pid\", \"usedBytes\", \"gpuInstance\"}: %w", f.Path, err)
	}
	out := make([]gpu.Process, 0, len(in))
	for i, p := range in {
		if p.Card == "" || p.PID <= 0 {
			return nil, fmt.Errorf("the fake cards' processes in %s: entry %d needs a card UUID and a PID above 0", f.Path, i)
		}
		gi := gpu.NoGPUInstance
		if p.GPUInstance != nil {
			gi = *p.GPUInstance
		}
		proc := gpu.Process{Card: p.Card, GPUInstance: gi, PID: p.PID, UsedBytes: p.UsedBytes, MPSClient: p.MPSClient}
		if p.SMPercent != nil {
			if *p.SMPercent < 0 || *p.SMPercent > 100 {
				return nil, fmt.Errorf("the fake cards' processes in %s: entry %d's smPercent %d is not between 0 and 100", f.Path, i, *p.SMPercent)
			}
			proc.SMPercent, proc.SMKnown = *p.SMPercent, true
		}
		out = append(out, proc)
	}
	return out, nil
}

// WriteProcesses makes the fake cards report exactly procs (tests, the
// demo), replacing the file at once.
func WriteProcesses(path string, procs []gpu.Process) error {
	out := make([]fileProcess, 0, len(procs))
	for _, p := range procs {
		fp := fileProcess{Card: p.Card, PID: p.PID, UsedBytes: p.UsedBytes, MPSClient: p.MPSClient}
		if p.SMKnown {
			sm := p.SMPercent
			fp.SMPercent = &sm
		}
		if p.GPUInstance != gpu.NoGPUInstance {
			gi := p.GPUInstance
			fp.GPUInstance = &gi
		}
		out = append(out, fp)
	}
	data, err := json.Marshal(out)
	if err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o644); err != nil {
		return fmt.Errorf("writing the fake cards' processes: %w", err)
	}
	return os.Rename(tmp, path)
}
