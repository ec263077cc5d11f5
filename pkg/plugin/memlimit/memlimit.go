// Package memlimit is the logic of tangram-cdi-hook, the CDI createRuntime
// hook that holds a share claim to its GPU memory: it finds the container's
// cgroup from the OCI state the runtime passes on stdin, goes up to its
// pod's cgroup, and sets the claim's limit on each card there through
// NVML's per-cgroup memory limits (nvmlDeviceSetMemoryLimits_v1, driver
// 615+), so that all containers of the pod share one limit. A claim belongs
// to one pod at a time. It fails closed: any error stops the container
// (docs/enforcement.md).
package memlimit

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/tangram-gpu/tangram/pkg/plugin/memlimit/records"
	"github.com/tangram-gpu/tangram/pkg/plugin/podcgroup"
)

// Limit is a claim's hard memory limit on one card.
type Limit struct {
	// UUID is the card's NVML UUID, GPU-….
	UUID string
	// Bytes is the most the claim's containers may allocate on the card.
	Bytes uint64
}

// String is the hook's argument form, <uuid>=<bytes>.
func (l Limit) String() string { return fmt.Sprintf("%s=%d", l.UUID, l.Bytes) }

// ParseLimit parses a --limit argument, <uuid>=<bytes>.
func ParseLimit(s string) (Limit, error) {
	uuid, bytes, ok := strings.Cut(s, "=")
	if !ok || uuid == "" || bytes == "" {
		return Limit{}, fmt.Errorf("limit %q: want <card UUID>=<bytes>, e.g. GPU-8f3c…=21474836480", s)
	}
	if !strings.HasPrefix(uuid, "GPU-") {
		return Limit{}, fmt.Errorf("limit %q: %q is not a GPU UUID (GPU-…)", s, uuid)
	}
	n, err := strconv.ParseUint(bytes, 10, 64)
	if err != nil || n == 0 {
		return Limit{}, fmt.Errorf("limit %q: %q is not a positive number of bytes", s, bytes)
	}
	return Limit{UUID: uuid, Bytes: n}, nil
}

// ReadState reads the OCI state JSON a runtime hook receives on stdin: the
// container's ID, bundle and init process ID, which must be set.
func ReadState(r io.Reader) (specs.State, error) {
	var state specs.State
	if err := json.NewDecoder(r).Decode(&state); err != nil {
		return specs.State{}, fmt.Errorf("reading the container's OCI state from stdin: %w", err)
	}
	if state.Pid <= 0 {
		return specs.State{}, fmt.Errorf("container %q: the OCI state on stdin has no pid (status %q); the hook must run as createRuntime or later", state.ID, state.Status)
	}
	return state, nil
}

// ContainerCgroup returns the directory of process pid's cgroup under
// cgroupRoot (the host's /sys/fs/cgroup), read from <procRoot>/<pid>/cgroup.
// With cgroup v2 (the unified hierarchy alone) it is the "0::" entry's
// path; on a cgroup v1 or hybrid host, the memory controller's hierarchy
// (<cgroupRoot>/memory/<path>). The directory must exist.
func ContainerCgroup(procRoot, cgroupRoot string, pid int) (string, error) {
	c, err := podcgroup.Read(procRoot, pid)
	if err != nil {
		return "", fmt.Errorf("finding the cgroup of the container's process %d: %w", pid, err)
	}
	var dir string
	switch {
	case c.Lines == 1 && c.Unified != "":
		dir = filepath.Join(cgroupRoot, c.Unified)
	case c.Memory != "":
		dir = filepath.Join(cgroupRoot, "memory", c.Memory)
	default:
		return "", fmt.Errorf("%s names neither a cgroup v2 path nor a memory cgroup", filepath.Join(procRoot, strconv.Itoa(pid), "cgroup"))
	}
	st, err := os.Stat(dir)
	if err != nil {
		return "", fmt.Errorf("the cgroup of the container's process %d: %w", pid, err)
	}
	if !st.IsDir() {
		return "", fmt.Errorf("the cgroup of the container's process %d: %s is not a directory", pid, dir)
	}
	return dir, nil
}

// Symbols are the NVML calls the hook needs: both arrived with driver
// release 615, and an older library has neither (NVIDIA-FACTS.md).
var Symbols = []string{"nvmlDeviceSetMemoryLimits_v1", "nvmlDeviceGetMemoryLimits_v1"}

// ErrNoMemoryLimits is the answer of a library without Symbols.
var ErrNoMemoryLimits = errors.New("the NVIDIA driver's NVML has no nvmlDeviceSetMemoryLimits_v1: a driver older than r615 has no per-cgroup memory limits")

// HasMemoryLimits looks Symbols up in lib (initialised): calling a symbol
// the library lacks would kill the process (go-nvml binds lazily), so
// every caller asks first.
func HasMemoryLimits(lib nvml.Interface) error {
	for _, sym := range Symbols {
		if err := lib.Extensions().LookupSymbol(sym); err != nil {
			return fmt.Errorf("%w (%v)", ErrNoMemoryLimits, err)
		}
	}
	return nil
}

// DefaultLockWait is how long the hook waits for each of its locks (the
// node's records, its pod's) before it refuses the container with the
// lock's name: the node's lock is held for file reads and writes only, a
// pod's for the NVML calls of that pod's other hooks. Two waits stay well
// inside the hook's OCI timeout (cdi.MemoryLimitHookTimeout, 60 s).
const DefaultLockWait = 20 * time.Second

// Locking is how Apply waits for its locks and reports what it skips.
type Locking struct {
	// Wait bounds each wait for a lock (DefaultLockWait if 0).
	Wait time.Duration
	// Warn, if set, receives each warning (one line, no newline); they
	// also go to the records' warnings file.
	Warn func(string)
}

func (l Locking) wait() time.Duration { return cmp.Or(l.Wait, DefaultLockWait) }

// Apply gives pod's cgroup the claim's limits. First, under the node-wide
// lock of recs (file reads and writes only), it refuses a claim another
// live pod holds and records the claim as pod's, with its limits: a
// second pod racing for the claim then finds it taken. Then, under the
// lock of pod alone, it sets on each of the claim's cards the sum of the
// limits of pod's claims there, unless NVML already reports exactly that
// (a second container of the pod, or a restarted one, changes nothing).
// So an NVML call that hangs holds up only other hooks of the same pod,
// never the node's records nor other pods' hooks. Soft limits are 0:
// nothing is guaranteed beyond the hard limit. Other claims' records that
// cannot be read are skipped and reported; the claim's own is an error.
func Apply(lib nvml.Interface, recs records.Dir, claimUID string, pod PodCgroup, limits []Limit, lk Locking) error {
	if len(limits) == 0 {
		return errors.New("no --limit given: the CDI spec must name at least one card")
	}
	if err := HasMemoryLimits(lib); err != nil {
		return err
	}
	rec, err := takeClaim(recs, claimUID, pod, limits, lk)
	if err != nil {
		return err
	}
	unlock, err := recs.LockPod(pod.PodUID, lk.wait())
	if err != nil {
		return err
	}
	defer unlock()
	totals, unreadable, err := recs.PodTotals(pod.Dir, claimUID, rec)
	if err != nil {
		return err
	}
	for _, e := range unreadable {
		msg := fmt.Sprintf("warning: claim %s of pod %s: skipping another claim's memory limit record: %v "+
			"(its own containers are refused until it is unprepared; the plugin removes it then, or at its next start if it is not prepared)",
			claimUID, pod.PodUID, e)
		recs.Warn(msg)
		if lk.Warn != nil {
			lk.Warn(msg)
		}
	}
	return setPodLimits(lib, pod, limits, totals)
}

// takeClaim, under the node-wide lock of recs, refuses the claim if
// another live pod holds it, else records it as pod's with limits.
func takeClaim(recs records.Dir, claimUID string, pod PodCgroup, limits []Limit, lk Locking) (records.Claim, error) {
	unlock, err := recs.Lock(lk.wait(), fmt.Sprintf("tangram-cdi-hook, claim %s, pod %s", claimUID, pod.PodUID))
	if err != nil {
		return records.Claim{}, err
	}
	defer unlock()
	rec, err := recs.Load(claimUID)
	if err != nil {
		return records.Claim{}, fmt.Errorf("%w; the claim's limits are unknown, so its containers cannot start until it is prepared again", err)
	}
	if rec.PodCgroup != "" && rec.PodCgroup != pod.Dir && rec.OwnerAlive() {
		return records.Claim{}, fmt.Errorf("claim %s is a hard memory share held by pod %s (cgroup %s); pod %s cannot use it too: "+
			"one share bounds the containers of one pod together, so give each pod its own claim (a ResourceClaimTemplate)",
			claimUID, rec.PodUID, rec.PodCgroup, pod.PodUID)
	}
	want := rec
	if rec.PodCgroup != pod.Dir {
		// A new claim, or one whose pod is gone: the limits start afresh.
		want = records.Claim{PodCgroup: pod.Dir, PodUID: pod.PodUID, Limits: map[string]uint64{}}
	} else {
		want.Limits = maps.Clone(rec.Limits)
	}
	for _, l := range limits {
		want.Limits[l.UUID] = l.Bytes
	}
	if want.PodCgroup == rec.PodCgroup && want.PodUID == rec.PodUID && maps.Equal(want.Limits, rec.Limits) {
		return want, nil // a second container of the pod: nothing to write
	}
	if err := recs.Save(claimUID, want); err != nil {
		return records.Claim{}, err
	}
	return want, nil
}

// ApplyUnrecorded sets limits on pod's cgroup as Apply does, for a hook
// without a claim (a CDI spec of an older plugin): no record, so neither
// the one-pod-per-claim check nor the sum over the pod's claims.
func ApplyUnrecorded(lib nvml.Interface, pod PodCgroup, limits []Limit) error {
	if len(limits) == 0 {
		return errors.New("no --limit given: the CDI spec must name at least one card")
	}
	if err := HasMemoryLimits(lib); err != nil {
		return err
	}
	totals := map[string]uint64{}
	for _, l := range limits {
		totals[l.UUID] = l.Bytes
	}
	return setPodLimits(lib, pod, limits, totals)
}

// setPodLimits sets, on each card of limits, pod's hard limit to its
// total, unless NVML already reports exactly that.
func setPodLimits(lib nvml.Interface, pod PodCgroup, limits []Limit, totals map[string]uint64) error {
	for _, l := range limits {
		want := totals[l.UUID]
		dev, ret := lib.DeviceGetHandleByUUID(l.UUID)
		if ret != nvml.SUCCESS {
			return fmt.Errorf("card %s: finding it in NVML: %v", l.UUID, nvmlError(ret))
		}
		cur, ret := dev.GetMemoryLimits_v1(pod.Dir)
		if ret == nvml.SUCCESS && cur.SoftLimit == 0 && cur.HardLimit == want {
			continue
		}
		if ret := dev.SetMemoryLimits_v1(pod.Dir, 0, want); ret != nvml.SUCCESS {
			return fmt.Errorf("card %s: setting a %d-byte memory limit on pod cgroup %s: %v", l.UUID, want, pod.Dir, nvmlError(ret))
		}
	}
	return nil
}

// nvmlError is NVML's text for ret with its code, which NVIDIA's docs list.
func nvmlError(ret nvml.Return) string {
	return fmt.Sprintf("%s (NVML return %d)", ret.Error(), int32(ret))
}
