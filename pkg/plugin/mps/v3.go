package mps

import (
	"context"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"

	"k8s.io/klog/v2"
)

// MPS v3 (driver release 615, nvidia-cuda-mps-control -p 3) gives each
// share a namespace of one node-wide server: the namespace's active-thread
// percentage is set by the control daemon and overrides what the client's
// environment asks, so a tenant that unsets CUDA_MPS_ACTIVE_THREAD_PERCENTAGE
// keeps its cap. The command forms below are the documented ones (NVIDIA,
// "MPS v3 Interface", docs/nvml.md has the list); they are built and parsed
// here without I/O, and only V3Namespaces.ctl runs them.

// Mode chooses how shares are enforced with MPS (--mps-mode).
type Mode string

const (
	// ModeAuto picks v3 on drivers that have it, classic otherwise.
	ModeAuto Mode = "auto"
	// ModeV3 runs one MPS v3 server with a namespace per claim.
	ModeV3 Mode = "v3"
	// ModeClassic runs the legacy daemon with per-client limits.
	ModeClassic Mode = "classic"
)

// ParseMode reads a --mps-mode value.
func ParseMode(s string) (Mode, error) {
	switch m := Mode(s); m {
	case ModeAuto, ModeV3, ModeClassic:
		return m, nil
	case "":
		return ModeAuto, nil
	}
	return "", fmt.Errorf("--mps-mode=%s: want auto, v3 or classic", s)
}

// ResolveMode decides the mode for a node: auto means v3 where the node's
// driver has MPS v3 (pkg/plugin/enforcement detects it), classic elsewhere.
func ResolveMode(m Mode, v3Available bool) Mode {
	if m != ModeAuto {
		return m
	}
	if v3Available {
		return ModeV3
	}
	return ModeClassic
}

// Share is one card's share of a claim, as MPS needs to know it.
type Share struct {
	// Card is the card's UUID.
	Card string
	// MemoryBytes is the share's memory.
	MemoryBytes int64
	// ThreadPercent is the share's active-thread cap, 0 for none.
	ThreadPercent int64
}

// NamespaceSpec is the namespace of one claim on the node's v3 server.
type NamespaceSpec struct {
	Name string
	// ActiveThreadPercentage is 0 when the claim asks for no cap.
	ActiveThreadPercentage int64
	// PinnedMemoryLimit in the control daemon's form (e.g. "20480M"), ""
	// for none.
	PinnedMemoryLimit string
}

// namespacePrefix marks the namespaces this plugin owns; start-up removes
// those no prepared claim owns and leaves any other alone.
const namespacePrefix = "tangram-"

// NamespaceName is the v3 namespace of a claim. Claim UIDs are lower-case
// hex and dashes, valid in a name and a path element.
func NamespaceName(claimUID string) string { return namespacePrefix + claimUID }

// namespaceFor derives a claim's namespace from its shares. A claim has one
// namespace whatever its number of cards, because its containers reach one
// namespace's pipe directory: the cap is the smallest of its shares' caps
// (the same rule as the client environment), the pinned-memory limit the
// largest share. The pinned-memory limit is defence in depth only: NVIDIA
// documents that a client naming, in CUDA_MPS_PINNED_DEVICE_MEM_LIMIT, a
// device it cannot see drops every MPS memory limit, so memory is held by
// the per-container cgroup limit, not by MPS.
func namespaceFor(claimUID string, shares []Share) NamespaceSpec {
	spec := NamespaceSpec{Name: NamespaceName(claimUID)}
	var mem int64
	for _, s := range shares {
		if s.ThreadPercent > 0 && (spec.ActiveThreadPercentage == 0 || s.ThreadPercent < spec.ActiveThreadPercentage) {
			spec.ActiveThreadPercentage = min(s.ThreadPercent, 100)
		}
		mem = max(mem, s.MemoryBytes)
	}
	if mem > 0 {
		// Rounded up to MiB: never below what the share was given.
		spec.PinnedMemoryLimit = fmt.Sprintf("%dM", (mem+mib-1)/mib)
	}
	return spec
}

const mib = 1 << 20

// The v3 control commands, one line each.

func v3ServerCreate(server string, uid int, devices []string) string {
	return fmt.Sprintf("server create %s --uid=%d --allowed-devices=%s", server, uid, strings.Join(devices, ","))
}

func v3ServerList() string { return "server list --format=csv" }

func v3NamespaceCreate(server, name string) string {
	return fmt.Sprintf("namespace create %s --server=%s", name, server)
}

// v3NamespaceSet sets what the spec names; "" when it names nothing.
func v3NamespaceSet(server string, spec NamespaceSpec) string {
	var opts []string
	if spec.ActiveThreadPercentage > 0 {
		opts = append(opts, fmt.Sprintf("--active-thread-percentage=%d", spec.ActiveThreadPercentage))
	}
	if spec.PinnedMemoryLimit != "" {
		opts = append(opts, "--pinned-memory-limit="+spec.PinnedMemoryLimit)
	}
	if len(opts) == 0 {
		return ""
	}
	return fmt.Sprintf("namespace set %s --server=%s %s", spec.Name, server, strings.Join(opts, " "))
}

func v3NamespaceList(server string) string {
	return fmt.Sprintf("namespace list --server=%s --format=csv", server)
}

func v3NamespaceDelete(server, name string) string {
	return fmt.Sprintf("namespace delete %s --server=%s", name, server)
}

// parseCSV reads a --format=csv answer: a header, then one row per entry,
// each a map from column name to value. Columns are found by name, so a
// driver that adds or reorders columns is still read right.
func parseCSV(out string, required ...string) ([]map[string]string, error) {
	r := csv.NewReader(strings.NewReader(out))
	r.TrimLeadingSpace = true
	r.FieldsPerRecord = -1
	header, err := r.Read()
	if errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("reading the MPS control daemon's CSV: no header line (got %q)", out)
	}
	if err != nil {
		return nil, fmt.Errorf("reading the MPS control daemon's CSV header: %w", err)
	}
	for i := range header {
		header[i] = strings.ToLower(strings.TrimSpace(header[i]))
	}
	for _, col := range required {
		if !slices.Contains(header, col) {
			return nil, fmt.Errorf("the MPS control daemon's CSV has no %q column (header %q)", col, strings.Join(header, ","))
		}
	}
	var rows []map[string]string
	for {
		rec, err := r.Read()
		if errors.Is(err, io.EOF) {
			return rows, nil
		}
		if err != nil {
			return nil, fmt.Errorf("reading the MPS control daemon's CSV: %w", err)
		}
		if len(rec) < len(header) {
			// A last column may hold commas (a device list): the stand-in
			// and possibly the driver write it unquoted.
			return nil, fmt.Errorf("the MPS control daemon's CSV row %q has %d fields, the header %d", strings.Join(rec, ","), len(rec), len(header))
		}
		row := map[string]string{}
		for i, col := range header {
			row[col] = strings.TrimSpace(rec[i])
		}
		if len(rec) > len(header) {
			row[header[len(header)-1]] = strings.Join(rec[len(header)-1:], ",")
		}
		rows = append(rows, row)
	}
}

// serverStatus finds server in a "server list --format=csv" answer: its
// status, "" when it is not listed.
func serverStatus(out, server string) (string, error) {
	rows, err := parseCSV(out, "name", "status")
	if err != nil {
		return "", err
	}
	for _, r := range rows {
		if r["name"] == server {
			return strings.ToLower(r["status"]), nil
		}
	}
	return "", nil
}

// parseNamespaces reads a "namespace list --format=csv" answer into specs,
// by name.
func parseNamespaces(out string) (map[string]NamespaceSpec, error) {
	rows, err := parseCSV(out, "name")
	if err != nil {
		return nil, err
	}
	specs := map[string]NamespaceSpec{}
	for _, r := range rows {
		spec := NamespaceSpec{Name: r["name"], PinnedMemoryLimit: r["pinned_memory_limit"]}
		if v := r["active_thread_percentage"]; v != "" {
			if _, err := fmt.Sscan(v, &spec.ActiveThreadPercentage); err != nil {
				return nil, fmt.Errorf("namespace %s: active_thread_percentage %q is not a number", spec.Name, v)
			}
		}
		specs[spec.Name] = spec
	}
	return specs, nil
}

// ControlFunc sends one command to the node's MPS control daemon and
// returns its answer; an answer that reports a failure is an error.
type ControlFunc func(ctx context.Context, command string) (string, error)

// BinaryControl runs the control binary as a client of the daemon on
// pipeDir, one command on its standard input, e.g. from the plugin when the
// daemon runs in a pod and shares the host's pipe directory.
func BinaryControl(commander Commander, binary, pipeDir string) ControlFunc {
	if commander == nil {
		commander = ExecCommander{}
	}
	env := []string{"CUDA_MPS_PIPE_DIRECTORY=" + pipeDir}
	return func(ctx context.Context, command string) (string, error) {
		out, err := commander.Run(ctx, []string{binary}, env, command+"\n")
		return string(out), err
	}
}

// StandInControl talks to the stand-in daemon on pipeDir directly (fake
// GPUs: the plugin has no control binary).
func StandInControl(pipeDir string) ControlFunc {
	return func(ctx context.Context, command string) (string, error) {
		return SendStandInCommand(ctx, pipeDir, command)
	}
}

// V3Namespaces drives the node's MPS v3 server and its namespaces.
type V3Namespaces struct {
	// Server is the node's server name.
	Server string
	// Devices are the shareable cards the server may use.
	Devices []string
	ctl     ControlFunc
}

// DefaultV3Server is the name of the node's v3 server.
const DefaultV3Server = "tangram"

// NewV3Namespaces returns the v3 driver for the node's shared cards.
func NewV3Namespaces(ctl ControlFunc, devices []string) *V3Namespaces {
	return &V3Namespaces{Server: DefaultV3Server, Devices: slices.Clone(devices), ctl: ctl}
}

// ServerNotRunningError answers a share whose server is not listed as
// running; the caller should retry.
type ServerNotRunningError struct {
	Server, Status string
}

func (e *ServerNotRunningError) Error() string {
	if e.Status == "" {
		return fmt.Sprintf("the node's MPS v3 server %q is not listed by the control daemon (server list)", e.Server)
	}
	return fmt.Sprintf("the node's MPS v3 server %q is %s, not running", e.Server, e.Status)
}

// EnsureServer creates the node's server if the control daemon does not
// list it. Servers run as UID 0 in a multi-user daemon: clients of any UID
// share it, and the namespaces separate them.
func (v *V3Namespaces) EnsureServer(ctx context.Context) error {
	status, err := v.serverStatus(ctx)
	if err != nil {
		return err
	}
	if status != "" {
		return nil
	}
	if _, err := v.ctl(ctx, v3ServerCreate(v.Server, 0, v.Devices)); err != nil {
		return fmt.Errorf("creating the node's MPS v3 server %q: %w", v.Server, err)
	}
	klog.FromContext(ctx).Info("Created the node's MPS v3 server", "server", v.Server, "devices", v.Devices)
	return nil
}

// CheckRunning fails with *ServerNotRunningError unless the server is
// listed as running.
func (v *V3Namespaces) CheckRunning(ctx context.Context) error {
	status, err := v.serverStatus(ctx)
	if err != nil {
		return err
	}
	if status != "running" {
		return &ServerNotRunningError{Server: v.Server, Status: status}
	}
	return nil
}

// serverStatus is the node's server's status as the control daemon lists
// it; "" when it is not listed.
func (v *V3Namespaces) serverStatus(ctx context.Context) (string, error) {
	out, err := v.ctl(ctx, v3ServerList())
	if err != nil {
		return "", fmt.Errorf("listing MPS v3 servers: %w", err)
	}
	return serverStatus(out, v.Server)
}

// List returns the server's namespaces by name.
func (v *V3Namespaces) List(ctx context.Context) (map[string]NamespaceSpec, error) {
	out, err := v.ctl(ctx, v3NamespaceList(v.Server))
	if err != nil {
		return nil, fmt.Errorf("listing the namespaces of MPS v3 server %q: %w", v.Server, err)
	}
	return parseNamespaces(out)
}

// Ensure makes the namespace exist with spec's settings: created if
// missing, set if its settings differ (adopting one a previous plugin
// process created).
func (v *V3Namespaces) Ensure(ctx context.Context, spec NamespaceSpec, have map[string]NamespaceSpec) error {
	got, exists := have[spec.Name]
	if !exists {
		if _, err := v.ctl(ctx, v3NamespaceCreate(v.Server, spec.Name)); err != nil {
			return fmt.Errorf("creating MPS v3 namespace %s: %w", spec.Name, err)
		}
	} else if got == spec {
		return nil
	}
	if cmd := v3NamespaceSet(v.Server, spec); cmd != "" {
		if _, err := v.ctl(ctx, cmd); err != nil {
			return fmt.Errorf("setting the limits of MPS v3 namespace %s: %w", spec.Name, err)
		}
	}
	return nil
}

// Delete removes the namespace; one that is not listed is gone already.
func (v *V3Namespaces) Delete(ctx context.Context, name string, have map[string]NamespaceSpec) error {
	if _, ok := have[name]; !ok {
		return nil
	}
	if _, err := v.ctl(ctx, v3NamespaceDelete(v.Server, name)); err != nil {
		return fmt.Errorf("deleting MPS v3 namespace %s: %w", name, err)
	}
	return nil
}

// Sync makes the server's namespaces of ours exactly want: missing ones
// are created, changed ones set, and those of ours no claim wants deleted.
// Namespaces without our prefix are left alone.
func (v *V3Namespaces) Sync(ctx context.Context, want []NamespaceSpec) error {
	have, err := v.List(ctx)
	if err != nil {
		return err
	}
	var errs []error
	wanted := map[string]bool{}
	for _, spec := range want {
		wanted[spec.Name] = true
		if err := v.Ensure(ctx, spec, have); err != nil {
			errs = append(errs, err)
		}
	}
	for _, name := range slices.Sorted(maps.Keys(have)) {
		if wanted[name] || !strings.HasPrefix(name, namespacePrefix) {
			continue
		}
		klog.FromContext(ctx).Info("Deleting MPS v3 namespace no prepared claim owns", "namespace", name)
		if err := v.Delete(ctx, name, have); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
