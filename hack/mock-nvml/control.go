package mocknvml

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/tangram-gpu/tangram/internal/reporoot"
	"github.com/tangram-gpu/tangram/pkg/gpu/fakegpu"
)

// Environment variables the library reads when NVML is initialised.
const (
	// EnvDevicesFile names a devices file (Flatten's output) to serve
	// instead of the table built in.
	EnvDevicesFile = "TANGRAM_MOCK_NVML_DEVICES_FILE"
	// EnvStateDir names the state directory (calls.log, events, compute
	// modes) instead of the one built in.
	EnvStateDir = "TANGRAM_MOCK_NVML_STATE_DIR"
	// EnvKernelDmem, "1" or "0", says whether the kernel the library
	// stands in on has the dmem cgroup controller (then a memory limit
	// needs a cgroup with dmem.* files); unset, the running kernel's.
	EnvKernelDmem = "TANGRAM_MOCK_NVML_KERNEL_DMEM"
	// EnvBuildDriverVersion, at build time, is the driver version built
	// in; from 615 the library has the per-cgroup memory limit calls.
	EnvBuildDriverVersion = "TANGRAM_MOCK_NVML_DRIVER_VERSION"
)

// MemoryLimitsDriver is a driver version whose library has the per-cgroup
// memory limit calls (release 615 and later); BuildDriver(dir,
// MemoryLimitsDriver) builds one.
const MemoryLimitsDriver = "615.23.01"

// Build compiles the library into outDir with hack/mock-nvml/build.sh and
// returns its path; an empty outDir means the build's cache directory
// (~/.cache/tangram/mock-nvml/<hash of the inputs>), reused while the
// inputs stay the same. It needs gcc and the go command.
func Build(outDir string) (string, error) { return BuildDriver(outDir, "") }

// BuildDriver is Build as driver version driverVersion (empty: the
// profile's, or $TANGRAM_MOCK_NVML_DRIVER_VERSION): a library before
// release 615 has no nvmlDeviceSetMemoryLimits_v1 symbol, and Init fails
// when a devices file names a driver of the other kind.
func BuildDriver(outDir, driverVersion string) (string, error) {
	root, err := reporoot.Find()
	if err != nil {
		return "", fmt.Errorf("building the mock NVML library: %w", err)
	}
	script := filepath.Join(root, "hack", "mock-nvml", "build.sh")
	cmd := exec.Command(script)
	cmd.Env = os.Environ()
	if outDir != "" {
		cmd.Env = append(cmd.Env, "MOCK_NVML_OUT="+outDir)
	}
	if driverVersion != "" {
		cmd.Env = append(cmd.Env, EnvBuildDriverVersion+"="+driverVersion)
	}
	out, err := cmd.Output()
	if err != nil {
		var stderr []byte
		var exitErr *exec.ExitError
		if errors.As(err, &exitErr) {
			stderr = exitErr.Stderr
		}
		return "", fmt.Errorf("building the mock NVML library with %s: %w\n%s", script, err, stderr)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	return lines[len(lines)-1], nil
}

// State is the library's state directory, as tests see it.
type State struct {
	Dir string
}

// TriggerXID makes the card with NVML index index report an XID critical
// error to every event set registered for it.
func (s State) TriggerXID(index int, xid uint64) error {
	return s.appendEvent(fmt.Sprintf("xid %d %d\n", index, xid))
}

// LoseGPU makes waits on event sets registered for the card answer
// NVML_ERROR_GPU_IS_LOST, as when a card falls off the bus.
func (s State) LoseGPU(index int) error {
	return s.appendEvent(fmt.Sprintf("gpu-lost %d\n", index))
}

// EventsFile is where the library reads events from.
func (s State) EventsFile() string { return filepath.Join(s.Dir, "events") }

// FailMemoryLimits makes every nvmlDeviceSetMemoryLimits_v1 answer ret
// (still logged, with its result) until AllowMemoryLimits.
func (s State) FailMemoryLimits(ret int) error {
	if err := os.MkdirAll(s.Dir, 0o755); err != nil {
		return fmt.Errorf("creating mock NVML state directory: %w", err)
	}
	if err := os.WriteFile(s.failMemoryLimitsFile(), []byte(fmt.Sprintf("%d\n", ret)), 0o644); err != nil {
		return fmt.Errorf("making mock NVML memory limits fail: %w", err)
	}
	return nil
}

// AllowMemoryLimits undoes FailMemoryLimits.
func (s State) AllowMemoryLimits() error {
	if err := os.Remove(s.failMemoryLimitsFile()); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("letting mock NVML memory limits succeed again: %w", err)
	}
	return nil
}

// SetMigMode turns MIG mode of the card with this UUID on or off, current
// and pending alike, as nvmlDeviceGetMigMode then reports it. A card the
// devices file does not declare MIG-capable (no migType in its profile)
// then reports the mode but offers no profiles.
func (s State) SetMigMode(uuid string, enabled bool) error {
	return s.SetMigModes(uuid, enabled, enabled)
}

// SetMigModes sets the current and the pending MIG mode apart, as after an
// admin's nvidia-smi -mig that waits for a reset. Turning the current mode
// off removes the card's GPU and compute instances, as a real mode change
// (a reset) does.
func (s State) SetMigModes(uuid string, current, pending bool) error {
	dir := filepath.Join(s.Dir, "mig-mode")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("creating mock NVML MIG mode directory: %w", err)
	}
	bit := func(b bool) int {
		if b {
			return 1
		}
		return 0
	}
	mode := fmt.Sprintf("%d %d\n", bit(current), bit(pending))
	if err := os.WriteFile(filepath.Join(dir, uuid), []byte(mode), 0o644); err != nil {
		return fmt.Errorf("setting mock NVML MIG mode of %s: %w", uuid, err)
	}
	if !current {
		if err := os.Remove(filepath.Join(s.Dir, "mig", uuid)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("removing the MIG instances of %s with its MIG mode: %w", uuid, err)
		}
	}
	return nil
}

// SetMigDeviceBusy marks the compute instance of the MIG device with this
// UUID ("MIG-...") as running processes (busy) or not: destroying it, or
// its GPU instance, answers NVML_ERROR_IN_USE while it is busy.
func (s State) SetMigDeviceBusy(migUUID string, busy bool) error {
	dir := filepath.Join(s.Dir, "mig-busy")
	path := filepath.Join(dir, migUUID)
	if !busy {
		if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("marking mock MIG device %s idle: %w", migUUID, err)
		}
		return nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("creating mock NVML MIG busy directory: %w", err)
	}
	if err := os.WriteFile(path, nil, 0o644); err != nil {
		return fmt.Errorf("marking mock MIG device %s busy: %w", migUUID, err)
	}
	return nil
}

// Process is a process a test "runs" on a card (RunProcesses).
type Process struct {
	Card string
	PID  int
	// UsedBytes is its memory; negative: NVML_VALUE_NOT_AVAILABLE.
	UsedBytes int64
	// GPUInstance is the MIG GPU instance it runs in; negative: none.
	GPUInstance int
	// MPSClient lists it among the card's MPS clients rather than its
	// compute processes.
	MPSClient bool
}

// RunProcesses makes the library report exactly procs as the cards'
// running processes (nvmlDeviceGetComputeRunningProcesses_v3 and
// nvmlDeviceGetMPSComputeRunningProcesses_v3), replacing what it reported.
func (s State) RunProcesses(procs []Process) error {
	if err := os.MkdirAll(s.Dir, 0o755); err != nil {
		return fmt.Errorf("creating mock NVML state directory: %w", err)
	}
	var b strings.Builder
	for _, p := range procs {
		used, gi := "-", "-"
		if p.UsedBytes >= 0 {
			used = strconv.FormatInt(p.UsedBytes, 10)
		}
		if p.GPUInstance >= 0 {
			gi = strconv.Itoa(p.GPUInstance)
		}
		fmt.Fprintf(&b, "%s %d %s %s", p.Card, p.PID, used, gi)
		if p.MPSClient {
			b.WriteString(" mps")
		}
		b.WriteString("\n")
	}
	// Replaced whole, so a reader never sees half a list.
	tmp := filepath.Join(s.Dir, "processes.tmp")
	if err := os.WriteFile(tmp, []byte(b.String()), 0o644); err != nil {
		return fmt.Errorf("writing the mock NVML processes: %w", err)
	}
	if err := os.Rename(tmp, filepath.Join(s.Dir, "processes")); err != nil {
		return fmt.Errorf("writing the mock NVML processes: %w", err)
	}
	return nil
}

// Sample is one process's utilisation sample (SetUtilization).
type Sample struct {
	Card    string
	PID     int
	SM, Mem int
}

// SetUtilization makes the processes of samples keep those rates:
// nvmlDeviceGetProcessUtilization returns a sample of each with a
// non-zero rate at every call, stamped with the call's time, until the
// next SetUtilization (none with a non-zero rate: NVML_ERROR_NOT_FOUND).
// Before the first, the cards do not support the call.
func (s State) SetUtilization(samples []Sample) error {
	if err := os.MkdirAll(s.Dir, 0o755); err != nil {
		return fmt.Errorf("creating mock NVML state directory: %w", err)
	}
	var b strings.Builder
	for _, smp := range samples {
		fmt.Fprintf(&b, "%s %d %d %d\n", smp.Card, smp.PID, smp.SM, smp.Mem)
	}
	tmp := filepath.Join(s.Dir, "utilization.tmp")
	if err := os.WriteFile(tmp, []byte(b.String()), 0o644); err != nil {
		return fmt.Errorf("writing the mock NVML utilisation samples: %w", err)
	}
	if err := os.Rename(tmp, filepath.Join(s.Dir, "utilization")); err != nil {
		return fmt.Errorf("writing the mock NVML utilisation samples: %w", err)
	}
	return nil
}

// NoUtilization makes the cards not support nvmlDeviceGetProcessUtilization
// again, as before the first SetUtilization.
func (s State) NoUtilization() error {
	if err := os.Remove(filepath.Join(s.Dir, "utilization")); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("removing the mock NVML utilisation samples: %w", err)
	}
	return nil
}

func (s State) failMemoryLimitsFile() string { return filepath.Join(s.Dir, "fail-memory-limits") }

// CallsFile is where the library logs mutating calls.
func (s State) CallsFile() string { return filepath.Join(s.Dir, "calls.log") }

func (s State) appendEvent(line string) error {
	if err := os.MkdirAll(s.Dir, 0o755); err != nil {
		return fmt.Errorf("creating mock NVML state directory: %w", err)
	}
	f, err := os.OpenFile(s.EventsFile(), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("opening mock NVML events file: %w", err)
	}
	// One write per line: the library never sees half a line as complete.
	if _, err := f.WriteString(line); err != nil {
		_ = f.Close()
		return fmt.Errorf("writing mock NVML event: %w", err)
	}
	return f.Close()
}

// Call is one line of calls.log: the NVML function and its arguments.
type Call struct {
	Function string
	Args     map[string]string
}

// Time is when the call was made, for calls that log it (time=, RFC 3339
// with nanoseconds, UTC).
func (c Call) Time() (time.Time, error) {
	v, ok := c.Args["time"]
	if !ok {
		return time.Time{}, fmt.Errorf("mock NVML call %s has no time", c.Function)
	}
	t, err := time.Parse(time.RFC3339Nano, v)
	if err != nil {
		return time.Time{}, fmt.Errorf("mock NVML call %s: time: %w", c.Function, err)
	}
	return t, nil
}

func (c Call) String() string {
	var b strings.Builder
	b.WriteString(c.Function)
	for _, k := range []string{"index", "uuid", "mode", "namespace", "soft", "hard", "profile", "start", "gi", "ci", "result"} {
		if v, ok := c.Args[k]; ok {
			fmt.Fprintf(&b, " %s=%s", k, v)
		}
	}
	return b.String()
}

// Calls reads the mutating calls logged so far, oldest first; none when
// the log does not exist yet.
func (s State) Calls() ([]Call, error) {
	f, err := os.Open(s.CallsFile())
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading mock NVML call log: %w", err)
	}
	defer func() { _ = f.Close() }()
	return ParseCalls(f)
}

// ParseCalls parses calls.log lines: "<function> key=value ...".
func ParseCalls(r io.Reader) ([]Call, error) {
	var calls []Call
	sc := bufio.NewScanner(r)
	line := 0
	for sc.Scan() {
		line++
		fields := strings.Fields(sc.Text())
		if len(fields) == 0 {
			continue
		}
		c := Call{Function: fields[0], Args: map[string]string{}}
		for _, f := range fields[1:] {
			k, v, ok := strings.Cut(f, "=")
			if !ok {
				return nil, fmt.Errorf("mock NVML call log line %d: %q is not key=value", line, f)
			}
			c.Args[k] = v
		}
		calls = append(calls, c)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("reading mock NVML call log: %w", err)
	}
	return calls, nil
}

// TB is what UseProfile needs of a test; *testing.T and *testing.B have it.
type TB interface {
	Helper()
	Fatal(args ...any)
	Setenv(key, value string)
	TempDir() string
}

// UseProfile points the mock library at profile p's cards, as node, for
// the rest of test t: it writes the devices file and sets EnvDevicesFile
// and EnvStateDir to a fresh state directory, which it returns.
func UseProfile(t TB, p *fakegpu.Profile, node string) State {
	t.Helper()
	devices, err := Flatten(p, node)
	if err != nil {
		t.Fatal(err)
	}
	return UseDevices(t, devices)
}

// UseDevices is UseProfile for a devices file as written (e.g. by
// WithReservedMemory).
func UseDevices(t TB, devices []byte) State {
	t.Helper()
	file := filepath.Join(t.TempDir(), "devices")
	if err := os.WriteFile(file, devices, 0o644); err != nil {
		t.Fatal(err)
	}
	state := State{Dir: t.TempDir()}
	t.Setenv(EnvDevicesFile, file)
	t.Setenv(EnvStateDir, state.Dir)
	return state
}

// UseBuiltIn points the mock library at its built-in dgx-h100 of node
// mock-node for the rest of test t, with a fresh state directory, which it
// returns.
func UseBuiltIn(t TB) State {
	t.Helper()
	state := State{Dir: t.TempDir()}
	t.Setenv(EnvDevicesFile, "")
	t.Setenv(EnvStateDir, state.Dir)
	return state
}
