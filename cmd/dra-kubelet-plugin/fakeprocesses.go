package main

import (
	"cmp"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/tangram-gpu/tangram/pkg/gpu"
	"github.com/tangram-gpu/tangram/pkg/gpu/fakegpu"
)

// newFakeProcessesCommand sets the processes the fake cards of the running
// plugin report, for the usage watcher (docs/observability.md): tests and
// the demo make a pod "use" a card with it.
func newFakeProcessesCommand() *cobra.Command {
	var (
		processes []string
		stateDir  string
		file      string
	)
	cmd := &cobra.Command{
		Use:   "fake-processes",
		Short: "Set the processes the fake GPUs of the running plugin report (none: nothing runs)",
		Example: `  # in the plugin's container (it shares the host's PID namespace), PIDs as the host sees them:
  dra-kubelet-plugin fake-processes --process GPU-1ac78126-...,4242,5Gi,60 --process GPU-1ac78126-...,4243,512Mi
  dra-kubelet-plugin fake-processes      # nothing runs`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			procs, err := parseFakeProcesses(processes)
			if err != nil {
				return err
			}
			path := cmp.Or(file, filepath.Join(stateDir, fakegpu.ProcessesFileName))
			if err := fakegpu.WriteProcesses(path, procs); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "the fake GPUs report %d processes (%s)\n", len(procs), path)
			return nil
		},
	}
	f := cmd.Flags()
	f.StringArrayVar(&processes, "process", nil, "a process: <card UUID>,<PID>,<memory used>[,<SM %>] (memory a quantity such as 5Gi, or -1 for memory NVML would not report; SM utilisation 0-100, not known when left out); repeat for more")
	f.StringVar(&stateDir, "state-dir", "/var/lib/tangram", "the plugin's --state-dir")
	f.StringVar(&file, "fake-processes-file", "", "the plugin's --fake-processes-file (default: "+fakegpu.ProcessesFileName+" in --state-dir)")
	return cmd
}

// parseFakeProcesses reads --process values.
func parseFakeProcesses(values []string) ([]gpu.Process, error) {
	procs := make([]gpu.Process, 0, len(values))
	for _, v := range values {
		parts := strings.Split(v, ",")
		if len(parts) < 3 || len(parts) > 4 || parts[0] == "" {
			return nil, fmt.Errorf("--process=%q: want <card UUID>,<PID>,<memory used>[,<SM %%>], e.g. GPU-1234,4242,5Gi,60", v)
		}
		pid, err := strconv.Atoi(parts[1])
		if err != nil || pid <= 0 {
			return nil, fmt.Errorf("--process=%q: the PID %q is not a number above 0", v, parts[1])
		}
		used := int64(-1)
		if parts[2] != "-1" {
			q, err := resource.ParseQuantity(parts[2])
			if err != nil || q.Sign() < 0 {
				return nil, fmt.Errorf("--process=%q: the memory used %q is not a size such as 5Gi (or -1 for not reported)", v, parts[2])
			}
			used = q.Value()
		}
		p := gpu.Process{Card: parts[0], GPUInstance: gpu.NoGPUInstance, PID: pid, UsedBytes: used}
		if len(parts) == 4 {
			sm, err := strconv.Atoi(parts[3])
			if err != nil || sm < 0 || sm > 100 {
				return nil, fmt.Errorf("--process=%q: the SM utilisation %q is not a percentage from 0 to 100", v, parts[3])
			}
			p.SMPercent, p.SMKnown = sm, true
		}
		procs = append(procs, p)
	}
	return procs, nil
}
