package daemon

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tangram-gpu/tangram/pkg/plugin/mps/mpstest"
)

// TestClaimDirs: a claim's /dev/shm is made world-writable and sticky and
// bounded by the configured size, made again at no cost, removed with its
// contents and its bound; Sweep removes the directories of claims not kept
// and leaves what is not a claim's; a failed bound leaves nothing behind
// and says how to fix it.
func TestClaimDirs(t *testing.T) {
	ctx := context.Background()
	const uid = "0b5e5a43-6b8e-4c16-9c7a-3d1d2b6f1a00"
	for _, tt := range []struct {
		name string
		run  func(t *testing.T, dirs ClaimDirs, m *mpstest.RecordingMounter)
	}{
		{"create: mode 1777, bounded, idempotent", func(t *testing.T, dirs ClaimDirs, m *mpstest.RecordingMounter) {
			for range 2 {
				if err := dirs.Create(ctx, uid); err != nil {
					t.Fatal(err)
				}
			}
			fi, err := os.Stat(dirs.ShmDir(uid))
			if err != nil || fi.Mode().Perm() != 0o777 || fi.Mode()&os.ModeSticky == 0 {
				t.Errorf("%s: %v, %v; want drwxrwxrwt", dirs.ShmDir(uid), fi, err)
			}
			if got := m.Bounds[dirs.ShmDir(uid)]; got != 64<<20 {
				t.Errorf("bound %d, want %d", got, 64<<20)
			}
		}},
		{"create over a directory an interrupted preparation left unbounded: bounded now", func(t *testing.T, dirs ClaimDirs, m *mpstest.RecordingMounter) {
			if err := os.MkdirAll(dirs.ShmDir(uid), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := dirs.Create(ctx, uid); err != nil {
				t.Fatal(err)
			}
			if got := m.Bounds[dirs.ShmDir(uid)]; got != 64<<20 {
				t.Errorf("bound %d, want %d", got, 64<<20)
			}
			if !dirs.Exists(uid) {
				t.Error("Exists = false after Create")
			}
		}},
		{"remove: unbounded, gone with its contents; removing again succeeds", func(t *testing.T, dirs ClaimDirs, m *mpstest.RecordingMounter) {
			if err := dirs.Create(ctx, uid); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dirs.ShmDir(uid), "segment"), []byte("x"), 0o600); err != nil {
				t.Fatal(err)
			}
			for range 2 {
				if err := dirs.Remove(ctx, uid); err != nil {
					t.Fatal(err)
				}
			}
			if _, err := os.Stat(filepath.Join(dirs.Layout.ClaimsDir(), uid)); !os.IsNotExist(err) {
				t.Errorf("the claim's directory is left: %v", err)
			}
			if len(m.Bounds) != 0 {
				t.Errorf("bounds left: %v", m.Bounds)
			}
		}},
		{"sweep: orphans go, kept claims and other names stay", func(t *testing.T, dirs ClaimDirs, m *mpstest.RecordingMounter) {
			for _, c := range []string{uid, "orphan"} {
				if err := dirs.Create(ctx, c); err != nil {
					t.Fatal(err)
				}
			}
			other := filepath.Join(dirs.Layout.ClaimsDir(), "Not.A-Claim")
			if err := os.MkdirAll(other, 0o755); err != nil {
				t.Fatal(err)
			}
			if err := dirs.Sweep(ctx, []string{uid}); err != nil {
				t.Fatal(err)
			}
			if _, err := os.Stat(filepath.Join(dirs.Layout.ClaimsDir(), "orphan")); !os.IsNotExist(err) {
				t.Errorf("the orphan's directory is left: %v", err)
			}
			for _, keep := range []string{dirs.ShmDir(uid), other} {
				if _, err := os.Stat(keep); err != nil {
					t.Errorf("%s was swept: %v", keep, err)
				}
			}
			if _, bounded := m.Bounds[dirs.ShmDir("orphan")]; bounded {
				t.Error("the orphan's bound is left")
			}
		}},
		{"a failed bound leaves nothing and says how to fix it", func(t *testing.T, dirs ClaimDirs, m *mpstest.RecordingMounter) {
			m.Fail = errors.New("operation not permitted")
			err := dirs.Create(ctx, uid)
			if err == nil || !strings.Contains(err.Error(), "operation not permitted") || !strings.Contains(err.Error(), "kubeletPlugin.privileged=true") {
				t.Errorf("Create with a failing bound: %v", err)
			}
			if _, err := os.Stat(filepath.Join(dirs.Layout.ClaimsDir(), uid)); !os.IsNotExist(err) {
				t.Errorf("a directory is left after the failure: %v", err)
			}
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			m := mpstest.NewRecordingMounter()
			tt.run(t, ClaimDirs{Layout: Layout{Root: t.TempDir()}, Mounter: m, ShmSizeBytes: 64 << 20}, m)
		})
	}
}

// TestTmpfsMounterMounted: a directory on its parent's file system is not
// a mount point (a tmpfs mount needs CAP_SYS_ADMIN, which the tests do not
// have).
func TestTmpfsMounterMounted(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "shm")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if mounted, err := (TmpfsMounter{}).Mounted(dir); err != nil || mounted {
		t.Errorf("Mounted(plain directory) = %v, %v; want false", mounted, err)
	}
	if _, err := (TmpfsMounter{}).Mounted(filepath.Join(dir, "missing")); err == nil {
		t.Error("Mounted(missing directory): no error")
	}
}

func TestClaimDirsRefuseOddNames(t *testing.T) {
	dirs := ClaimDirs{Layout: Layout{Root: t.TempDir()}}
	for _, uid := range []string{"..", "a/b", "", "UPPER"} {
		if err := dirs.Create(context.Background(), uid); err == nil {
			t.Errorf("Create(%q) succeeded", uid)
		}
	}
}
