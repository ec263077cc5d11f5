package mps

import (
	"context"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"k8s.io/klog/v2"

	"github.com/tangram-gpu/tangram/pkg/plugin/mps/control"
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
	// PinnedMemoryLimit in the control daemon's form (e.g. "20480M" or, as
	// listed, "20G"), "" for none. Compare with ParseSize, never as text.
	PinnedMemoryLimit string
	// PipeDirectory is where the daemon says clients reach the namespace;
	// set only on what the daemon lists, "" when it does not say.
	PipeDirectory string
}

// Namespace names: the control daemon takes lowercase letters, digits and
// underscores only, at most 64 characters (NVIDIA's KAI project validates
// ^[a-z0-9_]+$ against r615; docs/nvml.md).
const (
	namespacePrefix = "tangram_"
	// legacyNamespacePrefix is what earlier versions of the plugin named
	// their namespaces; a real daemon refuses such names, but start-up
	// still removes any a daemon lists.
	legacyNamespacePrefix = "tangram-"
)

var namespaceNameForm = regexp.MustCompile(`^[a-z0-9_]{1,64}$`)

// NamespaceName is the v3 namespace of a claim: the prefix and the claim
// UID with dashes as underscores (a UID is 36 characters: 44 in all).
func NamespaceName(claimUID string) string {
	return namespacePrefix + strings.ReplaceAll(strings.ToLower(claimUID), "-", "_")
}

// ValidNamespaceName checks a name against the daemon's rule.
func ValidNamespaceName(name string) error {
	if !namespaceNameForm.MatchString(name) {
		return fmt.Errorf("%q is not a valid MPS v3 namespace name: lowercase letters, digits and underscores only, 1 to 64 characters", name)
	}
	return nil
}

// ownNamespace reports whether the plugin made the namespace.
func ownNamespace(name string) bool {
	return strings.HasPrefix(name, namespacePrefix) || strings.HasPrefix(name, legacyNamespacePrefix)
}

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

// ParseSize reads a memory size as the control daemon writes or takes
// it: a number with a binary unit K, M, G or T (optionally followed by B
// or iB, any case; "20G" and "20480M" are the same), or bare bytes. "",
// "0", "none", "unlimited", "-" and "n/a" mean no limit: 0.
func ParseSize(s string) (int64, error) {
	t := strings.TrimSpace(s)
	switch strings.ToLower(t) {
	case "", "0", "none", "unlimited", "-", "n/a":
		return 0, nil
	}
	i := 0
	for i < len(t) && (t[i] >= '0' && t[i] <= '9' || t[i] == '.') {
		i++
	}
	num, unit := t[:i], strings.ToUpper(strings.TrimSpace(t[i:]))
	unit = strings.TrimSuffix(strings.TrimSuffix(unit, "B"), "I")
	shift := 0
	if unit != "" {
		shift = strings.Index("KMGT", unit) + 1
	}
	if len(unit) > 1 || (unit != "" && shift == 0) {
		return 0, fmt.Errorf("memory size %q: unknown unit %q", s, unit)
	}
	v, err := strconv.ParseFloat(num, 64)
	if err != nil || v < 0 {
		return 0, fmt.Errorf("memory size %q is not a number with a unit", s)
	}
	return int64(math.Round(v * float64(int64(1)<<(10*shift)))), nil
}

// parsePercent reads an active-thread percentage as listed ("30.00",
// "30", "30%"), rounded to a whole percent; "", "none" and "-" are 0.
func parsePercent(s string) (int64, error) {
	t := strings.TrimSuffix(strings.TrimSpace(s), "%")
	switch strings.ToLower(t) {
	case "", "none", "-", "n/a":
		return 0, nil
	}
	v, err := strconv.ParseFloat(t, 64)
	if err != nil || v < 0 || v > 100 {
		return 0, fmt.Errorf("%q is not a percentage", s)
	}
	return int64(math.Round(v)), nil
}

// sameLimits compares the limits of what a claim wants with what the
// daemon lists, as numbers: "20G" is "20480M", and no cap is 100%.
func sameLimits(want, have NamespaceSpec) bool {
	capOf := func(p int64) int64 {
		if p <= 0 || p >= 100 {
			return 100
		}
		return p
	}
	if capOf(want.ActiveThreadPercentage) != capOf(have.ActiveThreadPercentage) {
		return false
	}
	w, errW := ParseSize(want.PinnedMemoryLimit)
	h, errH := ParseSize(have.PinnedMemoryLimit)
	return errW == nil && errH == nil && w == h
}

// The v3 control commands, as the words given to nvidia-cuda-mps-control
// after "-p 3".

func v3ServerCreate(server string, uid int, devices []string) []string {
	return []string{"server", "create", server, fmt.Sprintf("--uid=%d", uid), "--allowed-devices=" + strings.Join(devices, ",")}
}

func v3ServerList() []string { return []string{"server", "list", "--format=csv"} }

func v3NamespaceCreate(server, name string) []string {
	return []string{"namespace", "create", name, "--server=" + server}
}

// v3NamespaceSet sets what the spec names; nil when it names nothing.
func v3NamespaceSet(server string, spec NamespaceSpec) []string {
	var opts []string
	if spec.ActiveThreadPercentage > 0 {
		opts = append(opts, fmt.Sprintf("--active-thread-percentage=%d", spec.ActiveThreadPercentage))
	}
	if spec.PinnedMemoryLimit != "" {
		opts = append(opts, "--pinned-memory-limit="+spec.PinnedMemoryLimit)
	}
	if len(opts) == 0 {
		return nil
	}
	return append([]string{"namespace", "set", spec.Name, "--server=" + server}, opts...)
}

func v3NamespaceList(server string) []string {
	return []string{"namespace", "list", "--server=" + server, "--format=csv"}
}

// v3NamespacePipeDir asks where clients reach a namespace, in the form
// NVIDIA's KAI project verified on r615 (server positional).
func v3NamespacePipeDir(server, name string) []string {
	return []string{"namespace", "get", name, server, "pipe_directory"}
}

// v3ClientList lists a server's clients; the table form truncates PIDs,
// so CSV without a header (KAI, r615).
func v3ClientList(server string) []string {
	return []string{"client", "list", "--server=" + server, "--format=csv,noheader"}
}

func v3ClientTerminate(server string, pid int) []string {
	return []string{"client", "terminate", strconv.Itoa(pid), "--server=" + server}
}

func v3NamespaceDelete(server, name string, force bool) []string {
	cmd := []string{"namespace", "delete", name, "--server=" + server}
	if force {
		cmd = append(cmd, "--force")
	}
	return cmd
}

// parseCSV reads a --format=csv answer: a header, then one row per entry,
// each a map from column name to value. Columns are found by name, with
// hyphens and underscores alike (NVIDIA's page spells pipe-directory, KAI
// reads pipe_directory: which the CSV uses is unconfirmed), so a driver
// that adds, reorders or respells columns is still read right. Keys are
// the hyphenated spelling.
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
		header[i] = columnKey(header[i])
	}
	for _, col := range required {
		if !slices.Contains(header, columnKey(col)) {
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
			return nil, fmt.Errorf("the MPS control daemon's CSV row %q has %d fields, the header %d", strings.Join(rec, ","), len(rec), len(header))
		}
		row := map[string]string{}
		for i, col := range header {
			row[col] = strings.TrimSpace(rec[i])
		}
		if len(rec) > len(header) {
			// A last column may hold commas (a device list) written
			// unquoted.
			row[header[len(header)-1]] = strings.Join(rec[len(header)-1:], ",")
		}
		rows = append(rows, row)
	}
}

// columnKey is a column's name in one spelling: lower case, hyphens.
func columnKey(col string) string {
	return strings.NewReplacer("_", "-", " ", "-").Replace(strings.ToLower(strings.TrimSpace(col)))
}

// ServerState is the node's server as "server list" shows it.
type ServerState struct {
	// Listed is false when the server is not in the list.
	Listed bool
	Status string
	PID    string
}

// Ready reports whether clients can use the server: status Ready (the
// documented status, any case), or the server's PID listed (its process
// runs: NVIDIA documents no other status word, so one we do not know must
// not hold every share back).
func (s ServerState) Ready() bool {
	if !s.Listed {
		return false
	}
	if strings.EqualFold(s.Status, "ready") {
		return true
	}
	pid, err := strconv.Atoi(s.PID)
	return err == nil && pid > 0
}

// serverState finds server in a "server list --format=csv" answer.
func serverState(out, server string) (ServerState, error) {
	rows, err := parseCSV(out, "name")
	if err != nil {
		return ServerState{}, err
	}
	for _, r := range rows {
		if r["name"] == server {
			return ServerState{Listed: true, Status: r["status"], PID: r["pid"]}, nil
		}
	}
	return ServerState{}, nil
}

// parseNamespaces reads a "namespace list --format=csv" answer into specs,
// by name, columns in either spelling.
func parseNamespaces(out string) (map[string]NamespaceSpec, error) {
	rows, err := parseCSV(out, "name")
	if err != nil {
		return nil, err
	}
	specs := map[string]NamespaceSpec{}
	for _, r := range rows {
		spec := NamespaceSpec{Name: r["name"], PinnedMemoryLimit: r["pinned-memory-limit"], PipeDirectory: r["pipe-directory"]}
		if _, err := ParseSize(spec.PinnedMemoryLimit); err != nil {
			return nil, fmt.Errorf("namespace %s: pinned-memory-limit: %w", spec.Name, err)
		}
		if spec.ActiveThreadPercentage, err = parsePercent(r["active-thread-percentage"]); err != nil {
			return nil, fmt.Errorf("namespace %s: active-thread-percentage %q is not a number", spec.Name, r["active-thread-percentage"])
		}
		specs[spec.Name] = spec
	}
	return specs, nil
}

// parseClientPIDs reads "client list --format=csv,noheader": the PIDs of
// the clients of namespace. The column order is not documented: a row
// belongs to the namespace when one of its fields is the namespace's name,
// and its PID is its first whole number.
func parseClientPIDs(out, namespace string) ([]int, error) {
	r := csv.NewReader(strings.NewReader(out))
	r.TrimLeadingSpace = true
	r.FieldsPerRecord = -1
	recs, err := r.ReadAll()
	if err != nil {
		return nil, fmt.Errorf("reading the MPS control daemon's client list: %w", err)
	}
	var pids []int
	for _, rec := range recs {
		if !slices.ContainsFunc(rec, func(f string) bool { return strings.TrimSpace(f) == namespace }) {
			continue
		}
		for _, f := range rec {
			if pid, err := strconv.Atoi(strings.TrimSpace(f)); err == nil && pid > 0 {
				pids = append(pids, pid)
				break
			}
		}
	}
	return pids, nil
}

// V3Namespaces drives the node's MPS v3 server and its namespaces.
type V3Namespaces struct {
	// Server is the node's server name.
	Server string
	// Devices are the shareable cards the server may use.
	Devices []string
	// PipeDir is the control daemon's CUDA_MPS_PIPE_DIRECTORY. When set,
	// a namespace's pipe directory as the daemon reports it must be
	// <PipeDir>/<Server>/<namespace>, where the plugin mounts it: a wrong
	// directory would silently put the client in the uncapped default
	// namespace.
	PipeDir string
	ctl     control.Func
}

// DefaultV3Server is the name of the node's v3 server.
const DefaultV3Server = "tangram"

// NewV3Namespaces returns the v3 driver for the node's shared cards.
func NewV3Namespaces(ctl control.Func, devices []string) *V3Namespaces {
	return &V3Namespaces{Server: DefaultV3Server, Devices: slices.Clone(devices), ctl: ctl}
}

// ServerNotRunningError answers a share whose server is not listed as
// ready; the caller should retry.
type ServerNotRunningError struct {
	Server, Status string
}

func (e *ServerNotRunningError) Error() string {
	if e.Status == "" {
		return fmt.Sprintf("the node's MPS v3 server %q is not listed by the control daemon (server list), or not ready", e.Server)
	}
	return fmt.Sprintf("the node's MPS v3 server %q is %s, not Ready", e.Server, e.Status)
}

// EnsureServer creates the node's server if the control daemon does not
// list it. Servers run as UID 0 in a multi-user daemon: clients of any UID
// share it, and the namespaces separate them.
func (v *V3Namespaces) EnsureServer(ctx context.Context) error {
	state, err := v.serverState(ctx)
	if err != nil {
		return err
	}
	if state.Listed {
		return nil
	}
	if _, err := v.ctl(ctx, v3ServerCreate(v.Server, 0, v.Devices)); err != nil {
		return fmt.Errorf("creating the node's MPS v3 server %q: %w", v.Server, err)
	}
	klog.FromContext(ctx).Info("Created the node's MPS v3 server", "server", v.Server, "devices", v.Devices)
	return nil
}

// CheckRunning fails with *ServerNotRunningError unless the server is
// listed as ready.
func (v *V3Namespaces) CheckRunning(ctx context.Context) error {
	state, err := v.serverState(ctx)
	if err != nil {
		return err
	}
	if !state.Ready() {
		return &ServerNotRunningError{Server: v.Server, Status: state.Status}
	}
	return nil
}

func (v *V3Namespaces) serverState(ctx context.Context) (ServerState, error) {
	out, err := v.ctl(ctx, v3ServerList())
	if err != nil {
		return ServerState{}, fmt.Errorf("listing MPS v3 servers: %w", err)
	}
	return serverState(out, v.Server)
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
// missing, set if its settings differ as numbers (adopting one a previous
// plugin process created). A namespace whose limits already match is not
// set again: the daemon refuses to change a namespace with clients
// attached. Its pipe directory is then checked against PipeDir.
func (v *V3Namespaces) Ensure(ctx context.Context, spec NamespaceSpec, have map[string]NamespaceSpec) error {
	if err := ValidNamespaceName(spec.Name); err != nil {
		return err
	}
	got, exists := have[spec.Name]
	if !exists {
		if _, err := v.ctl(ctx, v3NamespaceCreate(v.Server, spec.Name)); err != nil {
			return fmt.Errorf("creating MPS v3 namespace %s: %w", spec.Name, err)
		}
	}
	if !exists || !sameLimits(spec, got) {
		if cmd := v3NamespaceSet(v.Server, spec); cmd != nil {
			if _, err := v.ctl(ctx, cmd); err != nil {
				return fmt.Errorf("setting the limits of MPS v3 namespace %s: %w", spec.Name, err)
			}
		}
	}
	return v.checkPipeDir(ctx, spec.Name, got.PipeDirectory)
}

// NamespacePipeDir asks the daemon where clients reach the namespace.
func (v *V3Namespaces) NamespacePipeDir(ctx context.Context, name string) (string, error) {
	out, err := v.ctl(ctx, v3NamespacePipeDir(v.Server, name))
	if err != nil {
		return "", fmt.Errorf("asking for the pipe directory of MPS v3 namespace %s: %w", name, err)
	}
	dir := strings.TrimSpace(out)
	if dir == "" {
		return "", fmt.Errorf("the MPS control daemon names no pipe directory for namespace %s", name)
	}
	return dir, nil
}

// checkPipeDir compares the namespace's pipe directory, as listed (listed)
// or else asked for, with the one the plugin mounts.
func (v *V3Namespaces) checkPipeDir(ctx context.Context, name, listed string) error {
	if v.PipeDir == "" {
		return nil
	}
	got := listed
	if got == "" {
		var err error
		if got, err = v.NamespacePipeDir(ctx, name); err != nil {
			return err
		}
	}
	want := filepath.Join(v.PipeDir, v.Server, name)
	if filepath.Clean(got) != want {
		return fmt.Errorf("the MPS control daemon puts namespace %s's clients at %s, not %s where the plugin mounts it: a client there would land in the default namespace, without limits", name, got, want)
	}
	return nil
}

// Delete removes the namespace; one that is not listed is gone already.
// The daemon refuses to delete a namespace with clients attached: they
// are terminated first, and if one is still attached (or terminate is
// refused), the delete is forced.
func (v *V3Namespaces) Delete(ctx context.Context, name string, have map[string]NamespaceSpec) error {
	if _, ok := have[name]; !ok {
		return nil
	}
	logger := klog.FromContext(ctx)
	out, err := v.ctl(ctx, v3ClientList(v.Server))
	var pids []int
	if err == nil {
		pids, err = parseClientPIDs(out, name)
	}
	if err != nil {
		logger.Error(err, "Listing the clients of MPS v3 namespace failed; deleting it with --force", "namespace", name)
	}
	for _, pid := range pids {
		logger.Info("Terminating an MPS client left in a namespace being deleted", "namespace", name, "pid", pid)
		if _, err := v.ctl(ctx, v3ClientTerminate(v.Server, pid)); err != nil {
			logger.Error(err, "Terminating an MPS client failed; the delete will be forced", "namespace", name, "pid", pid)
		}
	}
	if _, err := v.ctl(ctx, v3NamespaceDelete(v.Server, name, false)); err != nil {
		if _, errForced := v.ctl(ctx, v3NamespaceDelete(v.Server, name, true)); errForced != nil {
			return fmt.Errorf("deleting MPS v3 namespace %s: %w", name, errors.Join(err, errForced))
		}
		logger.Info("Deleted MPS v3 namespace with --force", "namespace", name, "plainDeleteErr", err)
	}
	return nil
}

// Sync makes the server's namespaces of ours exactly want: missing ones
// are created, changed ones set, and those of ours no claim wants deleted
// (also any named as earlier versions named them). Other namespaces are
// left alone.
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
		if wanted[name] || !ownNamespace(name) {
			continue
		}
		klog.FromContext(ctx).Info("Deleting MPS v3 namespace no prepared claim owns", "namespace", name)
		if err := v.Delete(ctx, name, have); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
