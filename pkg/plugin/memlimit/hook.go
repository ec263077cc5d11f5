package memlimit

import (
	"cmp"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/tangram-gpu/tangram/pkg/plugin/memlimit/records"
	"github.com/tangram-gpu/tangram/pkg/plugin/podsecurity"
)

// Config is the hook's command line.
type Config struct {
	// Limits are the claim's limits, one --limit per card.
	Limits []Limit
	// Claim is the UID of the claim the limits belong to.
	Claim string
	// StateDir holds the claim records (records.Dir), on the host.
	StateDir string
	// ProcRoot is where /proc/<pid>/cgroup is read (tests: a fixture).
	ProcRoot string
	// CgroupRoot is the host's cgroup file system (tests: a fake tree).
	CgroupRoot string
	// DriverRoot is where libnvidia-ml.so.1 is looked up, as the host sees
	// the NVIDIA driver root.
	DriverRoot string
	// LockWait bounds each wait for a lock (DefaultLockWait).
	LockWait time.Duration
	// NonRootClass, when set, is the strict class of the claim's shares:
	// the container must run locked down (podsecurity.CheckBundle), and
	// ClaimName ("namespace/name") names the claim in the refusal.
	NonRootClass, ClaimName string
	// Warn receives the hook's warnings, one line each (main: stderr,
	// which the runtime shows only when the hook fails: they also go to
	// the records' warnings file); nil drops them.
	Warn io.Writer
}

// ParseFlags parses the hook's arguments (without the program name).
func ParseFlags(args []string) (Config, error) {
	cfg := Config{}
	fs := flag.NewFlagSet("tangram-cdi-hook", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.StringVar(&cfg.ProcRoot, "proc-root", "/proc", "proc file system the container's /proc/<pid>/cgroup is read from")
	fs.StringVar(&cfg.CgroupRoot, "cgroup-root", "/sys/fs/cgroup", "the host's cgroup file system")
	fs.StringVar(&cfg.DriverRoot, "driver-root", "/", "NVIDIA driver root on the host, where libnvidia-ml.so.1 is looked up")
	fs.StringVar(&cfg.Claim, "claim", "", "UID of the claim whose share limits these are")
	fs.StringVar(&cfg.StateDir, "state-dir", "", "directory of the node's memory limit records (the plugin's <state-dir>/memory-limits)")
	fs.DurationVar(&cfg.LockWait, "lock-wait", DefaultLockWait, "how long to wait for each lock (the node's records, the pod's) before refusing the container")
	fs.StringVar(&cfg.NonRootClass, "non-root-class", "", "the claim's strict device class: refuse a container that runs as root or may gain privileges (pkg/plugin/podsecurity)")
	fs.StringVar(&cfg.ClaimName, "claim-name", "", "the claim as namespace/name, for messages")
	fs.Func("limit", "<card UUID>=<bytes>: the claim's hard memory limit on that card (repeatable)", func(s string) error {
		l, err := ParseLimit(s)
		if err != nil {
			return err
		}
		cfg.Limits = append(cfg.Limits, l)
		return nil
	})
	if err := fs.Parse(args); err != nil {
		return Config{}, fmt.Errorf("arguments: %w", err)
	}
	if cfg.LockWait <= 0 {
		return Config{}, fmt.Errorf("arguments: --lock-wait %s is not a positive duration", cfg.LockWait)
	}
	if fs.NArg() > 0 {
		return Config{}, fmt.Errorf("arguments: unexpected %q; use --limit <card UUID>=<bytes>", strings.Join(fs.Args(), " "))
	}
	if len(cfg.Limits) == 0 {
		return Config{}, errors.New("arguments: no --limit <card UUID>=<bytes> given")
	}
	// A CDI spec an older plugin wrote for a claim still prepared has
	// neither (the plugin does not rewrite kept specs): such a hook still
	// sets the pod's limit, without the one-pod-per-claim record.
	if (cfg.Claim == "") != (cfg.StateDir == "") {
		return Config{}, errors.New("arguments: give --claim and --state-dir together")
	}
	if strings.ContainsAny(cfg.Claim, "/.") {
		return Config{}, fmt.Errorf("arguments: --claim %q is not a claim UID", cfg.Claim)
	}
	seen := map[string]bool{}
	for _, l := range cfg.Limits {
		if seen[l.UUID] {
			return Config{}, fmt.Errorf("arguments: card %s has two --limit arguments; give one per card", l.UUID)
		}
		seen[l.UUID] = true
	}
	return cfg, nil
}

// NonRootError is the container refused (or not checked) by the strict
// class's rule, rather than a memory limit not set.
type NonRootError struct{ Err error }

func (e *NonRootError) Error() string { return e.Err.Error() }
func (e *NonRootError) Unwrap() error { return e.Err }

// Run is the hook: it reads the container's pid from the OCI state on
// stdin, checks a strict share's container (Config.NonRootClass), finds its pod's cgroup and sets the claim's limits there through
// lib, which it initialises and shuts down (Apply). Any error means the
// container must not start.
func Run(cfg Config, stdin io.Reader, lib nvml.Interface) error {
	state, err := ReadState(stdin)
	if err != nil {
		return err
	}
	if cfg.NonRootClass != "" {
		// Before anything is set: a container that must not run
		// leaves no record of its pod behind.
		if err := podsecurity.CheckBundle(state.Bundle, state.ID, cmp.Or(cfg.ClaimName, cfg.Claim), cfg.NonRootClass); err != nil {
			return &NonRootError{Err: err}
		}
	}
	pid := state.Pid
	container, err := ContainerCgroup(cfg.ProcRoot, cfg.CgroupRoot, pid)
	if err != nil {
		return err
	}
	pod, err := FindPodCgroup(cfg.CgroupRoot, container)
	if err != nil {
		return err
	}
	if ret := lib.Init(); ret != nvml.SUCCESS {
		return fmt.Errorf("initialising NVML to set memory limits on pod cgroup %s: %s", pod.Dir, nvmlError(ret))
	}
	defer func() { _ = lib.Shutdown() }()
	if cfg.Claim == "" {
		return ApplyUnrecorded(lib, pod, cfg.Limits)
	}
	lk := Locking{Wait: cfg.LockWait}
	if cfg.Warn != nil {
		lk.Warn = func(msg string) { _, _ = fmt.Fprintf(cfg.Warn, "tangram-cdi-hook: %s\n", msg) }
	}
	return Apply(lib, records.Dir{Path: cfg.StateDir}, cfg.Claim, pod, cfg.Limits, lk)
}
