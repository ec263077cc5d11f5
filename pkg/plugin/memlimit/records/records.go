// Package records keeps, for tangram-cdi-hook (pkg/plugin/memlimit), which
// pod holds each hard share claim and the claim's limits, in small files
// on the host, and lets the plugin remove a claim's record at unprepare.
// It needs no cgo, unlike NVML.
package records

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
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
// <state-dir>/memory-limits on the host): claims/<claim UID>.json, and a
// lock file serialising the hooks of one node.
type Dir struct {
	Path string
}

// ClaimsDir is where the records of claims are.
func (r Dir) ClaimsDir() string { return filepath.Join(r.Path, "claims") }

func (r Dir) file(claimUID string) string {
	return filepath.Join(r.ClaimsDir(), claimUID+".json")
}

// Lock takes the node-wide lock of the records; call the function it
// returns to release it.
func (r Dir) Lock() (func(), error) {
	if err := os.MkdirAll(r.ClaimsDir(), 0o700); err != nil {
		return nil, fmt.Errorf("creating the memory limit records directory %s: %w", r.ClaimsDir(), err)
	}
	f, err := os.OpenFile(filepath.Join(r.Path, "lock"), os.O_RDWR|os.O_CREATE|syscall.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, fmt.Errorf("opening the memory limit records lock: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("locking the memory limit records: %w", err)
	}
	return func() { _ = f.Close() }, nil
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

// Save writes a claim's record atomically.
func (r Dir) Save(claimUID string, rec Claim) error {
	data, err := json.Marshal(rec)
	if err != nil {
		return fmt.Errorf("encoding the memory limit record of claim %s: %w", claimUID, err)
	}
	tmp := r.file(claimUID) + ".tmp"
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		return fmt.Errorf("writing the memory limit record of claim %s: %w", claimUID, err)
	}
	if err := os.Rename(tmp, r.file(claimUID)); err != nil {
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
// names podCgroup, with rec standing for claimUID's own (not yet saved).
// Several claims of one pod with shares of one card share the pod's one
// limit on that card, so it is their sum.
func (r Dir) PodTotals(podCgroup, claimUID string, rec Claim) (map[string]uint64, error) {
	totals := map[string]uint64{}
	for uuid, b := range rec.Limits {
		totals[uuid] += b
	}
	entries, err := os.ReadDir(r.ClaimsDir())
	if err != nil {
		return nil, fmt.Errorf("listing memory limit records: %w", err)
	}
	for _, e := range entries {
		uid, ok := strings.CutSuffix(e.Name(), ".json")
		if !ok || uid == claimUID {
			continue
		}
		other, err := r.Load(uid)
		if err != nil {
			return nil, err
		}
		if other.PodCgroup != podCgroup {
			continue
		}
		for uuid, b := range other.Limits {
			totals[uuid] += b
		}
	}
	return totals, nil
}

// OwnerAlive says whether the pod cgroup holding the record still exists.
func (rec Claim) OwnerAlive() bool {
	if rec.PodCgroup == "" {
		return false
	}
	st, err := os.Stat(rec.PodCgroup)
	return err == nil && st.IsDir()
}
