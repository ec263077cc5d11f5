package daemon

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"

	"golang.org/x/sys/unix"
	"k8s.io/klog/v2"
)

// Per-claim directories: each claim's containers get a /dev/shm of their
// own, <mps-root>/claims/<claimUID>/shm, shared by every container of every
// pod of the claim (so CUDA IPC between them works without hostIPC) and by
// nothing else: a tenant cannot see or fill another claim's shared memory.
// Every claim gets one (whole cards, shares, admin access); the MPS
// Manager gives its shares the same directory, in classic and v3 mode (a
// classic MPS client needs nothing of the server's /dev/shm: a GPU run
// showed it, see docs/enforcement.md). The directory is created at prepare, removed at unprepare, and those no
// prepared claim owns are swept at start-up (pkg/plugin recover.go).

// claimUIDForm is what a claim UID looks like; anything else under the
// claims directory is not ours to remove.
var claimUIDForm = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$|^[a-z0-9][a-z0-9-]{0,62}$`)

// ShmMounter bounds a claim's /dev/shm directory.
type ShmMounter interface {
	// Mount makes dir a tmpfs of at most sizeBytes.
	Mount(dir string, sizeBytes int64) error
	// Unmount undoes Mount; a directory that is not a mount point is fine.
	Unmount(dir string) error
	// Mounted reports whether dir is bounded already (a mount point).
	Mounted(dir string) (bool, error)
}

// TmpfsMounter mounts a tmpfs per claim (needs CAP_SYS_ADMIN and, in a
// pod, the MPS root mounted with Bidirectional propagation so that the
// container runtime sees it).
type TmpfsMounter struct{}

// Mount mounts a size-bounded tmpfs on dir, with the options of a
// container's /dev/shm.
func (TmpfsMounter) Mount(dir string, sizeBytes int64) error {
	opts := fmt.Sprintf("size=%d,mode=1777", sizeBytes)
	if err := unix.Mount("tmpfs", dir, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, opts); err != nil {
		return fmt.Errorf("mounting a %d-byte tmpfs on %s: %w", sizeBytes, dir, err)
	}
	return nil
}

// Mounted reports whether dir is a mount point: on another file system
// than its parent.
func (TmpfsMounter) Mounted(dir string) (bool, error) {
	var st, parent unix.Stat_t
	if err := unix.Stat(dir, &st); err != nil {
		return false, fmt.Errorf("checking whether %s is mounted: %w", dir, err)
	}
	if err := unix.Stat(filepath.Dir(dir), &parent); err != nil {
		return false, fmt.Errorf("checking whether %s is mounted: %w", dir, err)
	}
	return st.Dev != parent.Dev, nil
}

// Unmount detaches the tmpfs on dir, if any.
func (TmpfsMounter) Unmount(dir string) error {
	err := unix.Unmount(dir, unix.MNT_DETACH)
	if err == nil || errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOENT) {
		return nil
	}
	return fmt.Errorf("unmounting the tmpfs on %s: %w", dir, err)
}

// ClaimDirs creates, removes and sweeps the per-claim directories.
// Negative sizes, and 0 on real GPUs, are refused before it is built (the
// plugin's options); no Mounter leaves plain directories.
type ClaimDirs struct {
	Layout Layout
	// Mounter bounds each directory; nil leaves plain directories on the
	// MPS root's file system (fake GPUs, tests).
	Mounter ShmMounter
	// ShmSizeBytes is the bound, used with Mounter.
	ShmSizeBytes int64
}

// ShmDir is the claim's /dev/shm directory on the host.
func (c ClaimDirs) ShmDir(claimUID string) string { return c.Layout.ClaimShmDir(claimUID) }

// Create makes the claim's /dev/shm: world-writable and sticky like
// /dev/shm, for the containers' UIDs. Creating it again is a no-op, but
// for a directory left unbounded (a crash between making and mounting
// it, in a preparation that recorded no intent), which is bounded now.
func (c ClaimDirs) Create(ctx context.Context, claimUID string) error {
	if !claimUIDForm.MatchString(claimUID) {
		return fmt.Errorf("claim UID %q cannot name a directory", claimUID)
	}
	dir := c.Layout.ClaimShmDir(claimUID)
	if _, err := os.Stat(dir); err == nil {
		if c.Mounter == nil {
			return nil
		}
		mounted, err := c.Mounter.Mounted(dir)
		if err != nil || mounted {
			return err
		}
		klog.FromContext(ctx).Info("Bounding the claim's /dev/shm that an interrupted preparation left unbounded", "claimUID", claimUID, "dir", dir)
		return c.mount(dir, claimUID)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("creating the /dev/shm directory of claim %s: %w", claimUID, err)
	}
	if err := os.Chmod(dir, 0o777|os.ModeSticky); err != nil {
		return fmt.Errorf("setting the mode of claim %s's /dev/shm directory: %w", claimUID, err)
	}
	if c.Mounter != nil {
		if err := c.mount(dir, claimUID); err != nil {
			return err
		}
	}
	klog.FromContext(ctx).V(2).Info("Created the claim's /dev/shm", "claimUID", claimUID, "dir", dir, "sizeBytes", c.ShmSizeBytes)
	return nil
}

// mount bounds the claim's /dev/shm directory; on failure it removes the
// claim's directory, so that no unbounded one is left.
func (c ClaimDirs) mount(dir, claimUID string) error {
	if err := c.Mounter.Mount(dir, c.ShmSizeBytes); err != nil {
		_ = os.RemoveAll(filepath.Dir(dir))
		return fmt.Errorf("bounding the /dev/shm of claim %s: %w; the plugin needs CAP_SYS_ADMIN for it (chart kubeletPlugin.privileged=true, with the MPS root mounted Bidirectional); an unbounded plain directory on the host is not offered (--mps-shm-size=0 is refused on real GPUs)", claimUID, err)
	}
	return nil
}

// Exists reports whether the claim has a /dev/shm directory.
func (c ClaimDirs) Exists(claimUID string) bool {
	_, err := os.Stat(filepath.Join(c.Layout.ClaimsDir(), claimUID))
	return err == nil
}

// Remove unmounts and deletes the claim's directory and what its
// containers left there. Removing a missing one succeeds.
func (c ClaimDirs) Remove(ctx context.Context, claimUID string) error {
	if !claimUIDForm.MatchString(claimUID) {
		return fmt.Errorf("claim UID %q cannot name a directory", claimUID)
	}
	dir := filepath.Join(c.Layout.ClaimsDir(), claimUID)
	if c.Mounter != nil {
		if err := c.Mounter.Unmount(filepath.Join(dir, "shm")); err != nil {
			return err
		}
	}
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("removing the directory of claim %s: %w", claimUID, err)
	}
	return nil
}

// Sweep removes the directories of claims not in keep, left by claims
// unprepared while the plugin was down or by a crash between creating and
// recording one.
func (c ClaimDirs) Sweep(ctx context.Context, keep []string) error {
	entries, err := os.ReadDir(c.Layout.ClaimsDir())
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("listing per-claim MPS directories: %w", err)
	}
	var errs []error
	for _, e := range entries {
		if !e.IsDir() || !claimUIDForm.MatchString(e.Name()) || slices.Contains(keep, e.Name()) {
			continue
		}
		klog.FromContext(ctx).Info("Removing the MPS directory of a claim that is not prepared", "claimUID", e.Name())
		if err := c.Remove(ctx, e.Name()); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
