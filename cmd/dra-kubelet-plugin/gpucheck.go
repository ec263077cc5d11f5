package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/tangram-gpu/tangram/pkg/gpucheck"
	"github.com/tangram-gpu/tangram/pkg/gpucheck/probe"
	"github.com/tangram-gpu/tangram/pkg/plugin/driverroot"
)

// errChecksFailed makes the process exit non-zero after the report is out.
var errChecksFailed = errors.New("some checks failed")

type gpuCheckFlags struct {
	cfg     probe.Config
	timeout time.Duration
}

func (f *gpuCheckFlags) register(cmd *cobra.Command) {
	fl := cmd.Flags()
	fl.StringVar(&f.cfg.DriverRoot, "driver-root", driverroot.FromEnv(), "root of the NVIDIA driver installation: / or /usr/local/nvidia")
	fl.StringVar(&f.cfg.DevRoot, "dev-root", "/", "where the host's /dev is")
	fl.StringVar(&f.cfg.OutDir, "out", "", "folder for the report (Markdown and JSON) and what the checks read (required)")
	fl.StringVar(&f.cfg.WorkDir, "work-dir", "", "private scratch folder, e.g. for the MPS pipe and log directories (default: <out>/work)")
	fl.StringVar(&f.cfg.CUDAAlloc, "cuda-alloc", "", "the client program that allocates GPU memory (hack/gpu-acceptance/cuda-alloc)")
	fl.StringVar(&f.cfg.NVIDIACDIHook, "nvidia-cdi-hook", "", "nvidia-cdi-hook the CDI specs name (default: the driver root's)")
	fl.StringVar(&f.cfg.TangramCDIHook, "tangram-cdi-hook", "", "tangram-cdi-hook, for the memory-limit check")
	fl.Int64Var(&f.cfg.ShareMiB, "share-mib", 2048, "memory limit of the MPS and memory-limit clients, in MiB")
	fl.DurationVar(&f.timeout, "timeout", 7*time.Minute, "limit for the whole run; each check has its own, shorter one")
}

// newGPUCheckCommand runs every check of a bare GPU node
// (docs/nvml.md#gpu-check-before-installing); gpu-check/run calls it.
func newGPUCheckCommand() *cobra.Command {
	var f gpuCheckFlags
	cmd := &cobra.Command{
		Use:   "gpu-check",
		Short: "Check this GPU machine through the plugin's own code: inventory, CDI, health, enforcement, MPS; writes a report",
		Long: `Runs the acceptance checks of a GPU node before Tangram is installed:
NVML inventory against nvidia-smi, CDI edits against the driver root, the
health monitor's event registration, share enforcement detection, classic
MPS with a pinned memory limit, and, on driver 615+ with cgroup v2 and dmem,
MPS v3 namespaces and the memory-limit hook; it records each card's reserved
memory beside the memory the plugin publishes, and what NVML's process lists
show of two classic MPS clients. It reads the GPUs' settings and
never changes them. Progress goes to stdout, logs to stderr; the last line
is "N passed, M failed, K skipped", and the exit status is 1 if any failed.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runGPUCheck(cmd, f, nil) },
	}
	f.register(cmd)
	return cmd
}

// newMPSCheckCommand runs only the MPS checks (and those they need).
func newMPSCheckCommand() *cobra.Command {
	var f gpuCheckFlags
	cmd := &cobra.Command{
		Use:   "mps-check",
		Short: "Drive a prepare's MPS sequence on this GPU machine (daemon, server, namespaces, clients, teardown); writes a report",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runGPUCheck(cmd, f, func(name string) bool {
				return !strings.HasPrefix(name, "CDI") && !strings.HasPrefix(name, "health") && !strings.HasPrefix(name, "enforcement") && !strings.HasPrefix(name, "MIG") && !strings.HasPrefix(name, "reserved memory")
			})
		},
	}
	f.register(cmd)
	return cmd
}

// validate refuses what would make every check meaningless: no report
// folder, a share limit of no memory (or below it), a run with no time.
func (f gpuCheckFlags) validate() error {
	switch {
	case f.cfg.OutDir == "":
		return errors.New("--out is required: the folder the report is written to")
	case f.cfg.ShareMiB <= 0:
		return fmt.Errorf("--share-mib=%d: the clients' memory limit must be positive (MiB)", f.cfg.ShareMiB)
	case f.timeout <= 0:
		return fmt.Errorf("--timeout=%s: the run needs a positive time limit", f.timeout)
	}
	return nil
}

func runGPUCheck(cmd *cobra.Command, f gpuCheckFlags, keep func(string) bool) error {
	if err := f.validate(); err != nil {
		return err
	}
	if err := os.MkdirAll(f.cfg.OutDir, 0o755); err != nil {
		return fmt.Errorf("creating the report folder: %w", err)
	}
	if f.cfg.WorkDir == "" {
		f.cfg.WorkDir = filepath.Join(f.cfg.OutDir, "work")
	}
	if err := os.MkdirAll(f.cfg.WorkDir, 0o755); err != nil {
		return fmt.Errorf("creating the work folder: %w", err)
	}
	ctx, cancel := context.WithTimeout(cmd.Context(), f.timeout)
	defer cancel()
	started := time.Now()
	checks, done := probe.Checks(f.cfg)
	if keep != nil {
		var kept []gpucheck.Check
		for _, c := range checks {
			if keep(c.Name) {
				kept = append(kept, c)
			}
		}
		checks = kept
	}
	out := cmd.OutOrStdout()
	records := gpucheck.Runner{Out: out}.Run(ctx, checks)
	done()
	machine := probe.Machine(f.cfg)
	machine.Version = version()
	report := gpucheck.NewReport(machine, started, records)
	stem := filepath.Join(f.cfg.OutDir, report.FileStem())
	if err := writeReport(stem+".md", report, gpucheck.WriteMarkdown); err != nil {
		return err
	}
	if err := writeReport(stem+".json", report, gpucheck.WriteJSON); err != nil {
		return err
	}
	fmt.Fprintf(out, "report: %s.md\n%s\n", stem, report.Summary)
	if report.ExitCode != 0 {
		// The summary is the last line; no "Error:" after it.
		cmd.SilenceErrors = true
		return errChecksFailed
	}
	return nil
}

// version is the commit the binary was built from, where Go recorded it.
func version() string {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return ""
	}
	rev, dirty := "", ""
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			if s.Value == "true" {
				dirty = " (modified)"
			}
		}
	}
	if len(rev) > 12 {
		rev = rev[:12]
	}
	if rev == "" {
		return ""
	}
	return "dra-kubelet-plugin " + rev + dirty
}

func writeReport(path string, r gpucheck.Report, write func(io.Writer, gpucheck.Report) error) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("writing the report: %w", err)
	}
	if err := write(f, r); err != nil {
		f.Close()
		return fmt.Errorf("writing the report %s: %w", path, err)
	}
	return f.Close()
}
