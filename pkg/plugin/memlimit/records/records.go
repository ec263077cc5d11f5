// Package records keeps, for tangram-cdi-hook (pkg/plugin/memlimit), which
// pod holds each hard share claim and the claim's limits, in small files
// on the host, and lets the plugin remove a claim's record at unprepare.
// It needs no cgo, unlike NVML.
package records

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tangram-gpu/tangram/pkg/plugin/durable"
)

// Claim is what the hook keeps of a claim whose share limits it set:
// the pod cgroup holding it and the claim's bytes on each card. A hard
// share bounds one pod's containers together; a second pod cannot join
// that bound, so the claim belongs to the first pod that started a
// container with it, until that pod's cgroup is gone.
type Claim struct {
	// PodCgroup is the owning pod's cgroup directory, as the hook sees it.
	PodCgroup string `json:"podCgroup"`
	// PodUID is that pod's UID.
	PodUID string `json:"podUID"`
	// Limits are the claim's bytes by card UUID.
	Limits map[string]uint64 `json:"limits"`
}

// Dir is the claim records under one directory (the plugin's
// <state-dir>/memory-limits on the host): claims/<claim UID>.json, a lock
// file serialising their reads and writes on the node (Lock), and the
// locks of pods (LockPod), under which a pod's limits are set.
type Dir struct {
	Path string
}

// ClaimsDir is where the records of claims are.
func (r Dir) ClaimsDir() string { return filepath.Join(r.Path, "claims") }

func (r Dir) file(claimUID string) string {
	return filepath.Join(r.ClaimsDir(), claimUID+".json")
}

// LockFile is the node-wide lock of the records, under Dir.
const LockFile = "lock"

// podLocksFile holds the locks of pods (LockPod), one byte range each.
const podLocksFile = "pods.lock"

// lockPoll is how often a held lock is tried again until its deadline.
const lockPoll = 10 * time.Millisecond

// Lock takes the node-wide lock of the records, waiting at most wait for
// another holder to release it, and returns the function that releases
// it. Holders only read and write records under it, never call NVML: a
// hook hung in the driver must not stop the hooks of other pods. holder
// says who takes it (the process ID and the time are added); it is
// written into the lock file, so that one who times out can name the
// process that may hold it.
func (r Dir) Lock(wait time.Duration, holder string) (func(), error) {
	if err := os.MkdirAll(r.ClaimsDir(), 0o700); err != nil {
		return nil, fmt.Errorf("creating the memory limit records directory %s: %w", r.ClaimsDir(), err)
	}
	path := filepath.Join(r.Path, LockFile)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|syscall.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, fmt.Errorf("opening the memory limit records lock: %w", err)
	}
	err = retryUntil(wait, func() error { return unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB) })
	if err != nil {
		_ = f.Close()
		if errors.Is(err, errStillHeld) {
			last, _ := os.ReadFile(path)
			return nil, fmt.Errorf("the memory limit records lock %s is still held after %s, last taken by %s; "+
				"a tangram-cdi-hook or kubelet plugin process hung while holding it (the container runtime kills a hook after its timeout, and the lock goes with it)",
				path, wait, cmp.Or(strings.TrimSpace(string(last)), "an unknown process"))
		}
		return nil, fmt.Errorf("locking the memory limit records (%s): %w", path, err)
	}
	// Who holds it, for whoever waits in vain: best effort, the lock is
	// what matters.
	if err := f.Truncate(0); err == nil {
		_, _ = f.WriteAt([]byte(fmt.Sprintf("pid %d (%s) since %s\n", os.Getpid(), holder, time.Now().UTC().Format(time.RFC3339))), 0)
	}
	return func() { _ = f.Close() }, nil
}

// LockPod takes the lock of one pod, waiting at most wait, and returns the
// function that releases it. The hooks of one pod's containers set the
// pod's limits under it, one at a time, each from every record naming the
// pod, so the last limit set counts every claim of the pod. Hooks of
// other pods never wait for it: it is a byte range of one file chosen by
// the pod's UID (two pods whose UIDs hash alike only take turns), an
// open-file-description lock the kernel releases when the hook exits.
func (r Dir) LockPod(podUID string, wait time.Duration) (func(), error) {
	if err := os.MkdirAll(r.Path, 0o700); err != nil {
		return nil, fmt.Errorf("creating the memory limit records directory %s: %w", r.Path, err)
	}
	path := filepath.Join(r.Path, podLocksFile)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|syscall.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, fmt.Errorf("opening the memory limit lock of pods: %w", err)
	}
	h := fnv.New64a()
	_, _ = h.Write([]byte(podUID))
	lk := unix.Flock_t{Type: unix.F_WRLCK, Whence: io.SeekStart, Start: int64(h.Sum64() % (1 << 40)), Len: 1}
	err = retryUntil(wait, func() error { return unix.FcntlFlock(f.Fd(), unix.F_OFD_SETLK, &lk) })
	if err != nil {
		_ = f.Close()
		if errors.Is(err, errStillHeld) {
			return nil, fmt.Errorf("another tangram-cdi-hook of pod %s has been setting the pod's GPU memory limits for over %s (lock %s, byte %d): "+
				"it hung, most likely in an NVML call; the container runtime kills it after its timeout", podUID, wait, path, lk.Start)
		}
		return nil, fmt.Errorf("locking pod %s's memory limits (%s): %w", podUID, path, err)
	}
	return func() { _ = f.Close() }, nil
}

var errStillHeld = errors.New("still held")

// retryUntil calls try, a non-blocking lock, until it succeeds or wait has
// passed (errStillHeld). Polling rather than a blocking call leaves no
// system call behind that nobody can interrupt.
func retryUntil(wait time.Duration, try func() error) error {
	deadline := time.Now().Add(wait)
	for {
		err := try()
		if err == nil {
			return nil
		}
		if !errors.Is(err, unix.EWOULDBLOCK) && !errors.Is(err, unix.EAGAIN) && !errors.Is(err, unix.EACCES) && !errors.Is(err, unix.EINTR) {
			return err
		}
		if !time.Now().Before(deadline) {
			return errStillHeld
		}
		time.Sleep(min(lockPoll, time.Until(deadline)))
	}
}

// Load reads a claim's record; a claim without one gets an empty record.
func (r Dir) Load(claimUID string) (Claim, error) {
	data, err := os.ReadFile(r.file(claimUID))
	if errors.Is(err, fs.ErrNotExist) {
		return Claim{Limits: map[string]uint64{}}, nil
	}
	if err != nil {
		return Claim{}, fmt.Errorf("reading the memory limit record of claim %s: %w", claimUID, err)
	}
	var rec Claim
	if err := json.Unmarshal(data, &rec); err != nil {
		return Claim{}, fmt.Errorf("reading the memory limit record of claim %s (%s): %w", claimUID, r.file(claimUID), err)
	}
	if rec.Limits == nil {
		rec.Limits = map[string]uint64{}
	}
	return rec, nil
}

// writeFile is how records are written: durably (durable.WriteFile), so
// that a power loss leaves a claim's old record or its new one, never a
// torn one. A variable for the tests.
var writeFile = durable.WriteFile

// Save writes a claim's record atomically and durably.
func (r Dir) Save(claimUID string, rec Claim) error {
	data, err := json.Marshal(rec)
	if err != nil {
		return fmt.Errorf("encoding the memory limit record of claim %s: %w", claimUID, err)
	}
	if err := writeFile(r.file(claimUID), data); err != nil {
		return fmt.Errorf("writing the memory limit record of claim %s: %w", claimUID, err)
	}
	return nil
}

// Remove deletes a claim's record (the plugin, at unprepare); none is fine.
func (r Dir) Remove(claimUID string) error {
	if err := os.Remove(r.file(claimUID)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("removing the memory limit record of claim %s: %w", claimUID, err)
	}
	return nil
}

// PodTotals sums, card by card, the limits of every claim whose record
// names podCgroup, with rec standing for claimUID's own. Several claims of
// one pod with shares of one card share the pod's one limit on that card,
// so it is their sum. Another claim's record that cannot be read (torn,
// not a record) is skipped and returned in unreadable, for the caller to
// report: it must not refuse the containers of every other tenant of the
// node. Its own claim's hook fails on it, and the plugin removes it when
// that claim is unprepared or at its next start.
func (r Dir) PodTotals(podCgroup, claimUID string, rec Claim) (totals map[string]uint64, unreadable []error, err error) {
	totals = map[string]uint64{}
	for uuid, b := range rec.Limits {
		totals[uuid] += b
	}
	entries, err := os.ReadDir(r.ClaimsDir())
	if err != nil {
		return nil, nil, fmt.Errorf("listing memory limit records: %w", err)
	}
	for _, e := range entries {
		uid, ok := strings.CutSuffix(e.Name(), ".json")
		if !ok || uid == claimUID {
			continue
		}
		other, err := r.Load(uid)
		if err != nil {
			unreadable = append(unreadable, err)
			continue
		}
		if other.PodCgroup != podCgroup {
			continue
		}
		for uuid, b := range other.Limits {
			totals[uuid] += b
		}
	}
	return totals, unreadable, nil
}

// Sweep removes, under the records lock (waiting at most wait), the
// records of claims not in keep and the temporary files of writes a crash
// interrupted: the plugin at start-up, keeping the claims it holds
// prepared, since records outlive reboots and the plugin's restarts. It
// returns what it removed, and also the records of kept claims that
// cannot be read (their hooks refuse their containers until the claim is
// prepared again).
func (r Dir) Sweep(keep []string, wait time.Duration, holder string) (removed []string, unreadable []error, err error) {
	if _, err := os.Stat(r.ClaimsDir()); errors.Is(err, fs.ErrNotExist) {
		return nil, nil, nil
	}
	unlock, err := r.Lock(wait, holder)
	if err != nil {
		return nil, nil, err
	}
	defer unlock()
	entries, err := os.ReadDir(r.ClaimsDir())
	if err != nil {
		return nil, nil, fmt.Errorf("listing memory limit records: %w", err)
	}
	var errs []error
	for _, e := range entries {
		name := e.Name()
		uid, isRecord := strings.CutSuffix(name, ".json")
		// Temporary files: durable.WriteFile's, and <uid>.json.tmp of
		// plugins before it.
		_, isTemp := strings.CutSuffix(name, ".json.tmp")
		isTemp = isTemp || strings.Contains(name, ".json"+durable.TempInfix)
		switch {
		case isRecord && slices.Contains(keep, uid):
			if _, err := r.Load(uid); err != nil {
				unreadable = append(unreadable, err)
			}
			continue
		case !isRecord && !isTemp:
			continue // not ours
		case e.IsDir():
			continue
		}
		if err := os.Remove(filepath.Join(r.ClaimsDir(), name)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, fmt.Errorf("removing memory limit record %s: %w", name, err))
			continue
		}
		removed = append(removed, name)
	}
	if len(removed) > 0 {
		if err := durable.SyncDir(r.ClaimsDir()); err != nil {
			errs = append(errs, fmt.Errorf("syncing %s: %w", r.ClaimsDir(), err))
		}
	}
	return removed, unreadable, errors.Join(errs...)
}

// OwnerAlive says whether the pod cgroup holding the record still exists.
func (rec Claim) OwnerAlive() bool {
	if rec.PodCgroup == "" {
		return false
	}
	st, err := os.Stat(rec.PodCgroup)
	return err == nil && st.IsDir()
}

// WarningsFile, under Dir, keeps the hooks' warnings: what a hook that
// succeeded says on stderr, the container runtime drops. It is rotated to
// WarningsFile.1 beyond warningsMax bytes.
const WarningsFile = "warnings.log"

const warningsMax = 1 << 20

// Warn appends one timestamped line to WarningsFile (best effort: a
// warning must not fail the hook).
func (r Dir) Warn(msg string) {
	path := filepath.Join(r.Path, WarningsFile)
	if st, err := os.Stat(path); err == nil && st.Size() > warningsMax {
		_ = os.Rename(path, path+".1")
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE|syscall.O_CLOEXEC, 0o600)
	if err != nil {
		return
	}
	defer func() { _ = f.Close() }()
	_, _ = fmt.Fprintf(f, "%s pid %d: %s\n", time.Now().UTC().Format(time.RFC3339), os.Getpid(), strings.ReplaceAll(msg, "\n", " "))
}
