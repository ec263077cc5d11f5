package images

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// buildDeb makes a small Debian package, the way dpkg-deb builds any, so
// debian-base.sh can be tested without a mirror. It returns the .deb's path
// and sha256.
func buildDeb(t *testing.T, dir string) (string, string) {
	t.Helper()
	pkg := filepath.Join(dir, "pkg")
	files := map[string]string{
		"DEBIAN/control":                   "Package: fakelibc\nVersion: 1.0\nArchitecture: amd64\nMaintainer: Tangram tests <tests@example.com>\nDescription: stand-in for libc6\n",
		"lib64/ld-linux-x86-64.so.2":       "loader",
		"usr/share/doc/fakelibc/copyright": "licence text",
		"usr/share/doc/fakelibc/changelog": "history",
		"usr/share/man/man1/fake.1":        "manual",
	}
	for name, content := range files {
		p := filepath.Join(pkg, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	deb := filepath.Join(dir, "fakelibc_1.0_amd64.deb")
	if out, err := exec.Command("dpkg-deb", "--root-owner-group", "--build", pkg, deb).CombinedOutput(); err != nil {
		t.Fatalf("dpkg-deb --build: %v\n%s", err, out)
	}
	data, err := os.ReadFile(deb)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(data)
	return deb, hex.EncodeToString(sum[:])
}

// fakeAptGet answers `apt-get update` with success and `apt-get download X`
// by copying the file named by FAKE_DEB_<mode> into the current directory:
// pinned downloads (name=version) use FAKE_PINNED, unpinned ones
// FAKE_UNPINNED; an empty value means "not available" (exit 100). Every call
// is appended to $FAKE_APT_LOG.
const fakeAptGet = `#!/bin/sh
echo "$*" >>"$FAKE_APT_LOG"
[ "$1" = update ] && exit 0
for a in "$@"; do spec="$a"; done
case "$spec" in
*=*) src="$FAKE_PINNED" ;;
*) src="$FAKE_UNPINNED" ;;
esac
[ -n "$src" ] || { echo "E: Version not found" >&2; exit 100; }
cp "$src" ./fakelibc_1.0_amd64.deb
`

func TestDebianBase(t *testing.T) {
	dir := t.TempDir()
	deb, sum := buildDeb(t, dir)
	garbage := filepath.Join(dir, "garbage.deb")
	if err := os.WriteFile(garbage, []byte("not a package"), 0o644); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "bin")
	if err := os.Mkdir(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(bin, "apt-get"), []byte(fakeAptGet), 0o755); err != nil {
		t.Fatal(err)
	}
	lock := filepath.Join(dir, "debian-base.lock")
	if err := os.WriteFile(lock, []byte("# test pins\nfakelibc 1.0 "+sum+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}

	tests := []struct {
		name          string
		cached        string // file put in the cache under the pinned sha256
		pinned        string // what `apt-get download fakelibc=1.0` gets
		unpinned      string // what `apt-get download fakelibc` gets
		allowUnpinned bool
		wantErr       string
		wantOutput    string
		wantDownload  bool
	}{
		{name: "pinned package in the cache", cached: deb},
		{name: "pinned package downloaded", pinned: deb, wantDownload: true},
		{name: "corrupt cache entry is downloaded again", cached: garbage, pinned: deb, wantOutput: "does not match its sha256", wantDownload: true},
		{name: "download does not match the pin", pinned: garbage, wantErr: "refusing it", wantDownload: true},
		{name: "pinned version gone", unpinned: deb, wantErr: "debian-base.sh --update-lock", wantDownload: true},
		{name: "pinned version gone, unpinned allowed", unpinned: deb, allowUnpinned: true, wantOutput: "is gone from Debian", wantDownload: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cache := t.TempDir()
			if tc.cached != "" {
				data, err := os.ReadFile(tc.cached)
				if err != nil {
					t.Fatal(err)
				}
				if err := os.MkdirAll(filepath.Join(cache, "debs"), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(filepath.Join(cache, "debs", sum+".deb"), data, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			rootfs := filepath.Join(t.TempDir(), "rootfs")
			aptLog := filepath.Join(t.TempDir(), "apt.log")
			args := []string{"debian-base.sh"}
			if tc.allowUnpinned {
				args = append(args, "--allow-unpinned")
			}
			cmd := exec.Command("bash", append(args, rootfs)...)
			cmd.Env = append(os.Environ(),
				"PATH="+bin+":"+os.Getenv("PATH"), "TANGRAM_CACHE="+cache, "TANGRAM_BASE_LOCK="+lock,
				"FAKE_APT_LOG="+aptLog, "FAKE_PINNED="+tc.pinned, "FAKE_UNPINNED="+tc.unpinned)
			out, err := cmd.CombinedOutput()
			if _, statErr := os.Stat(aptLog); (statErr == nil) != tc.wantDownload {
				t.Errorf("apt-get called = %v, want %v", statErr == nil, tc.wantDownload)
			}
			if !strings.Contains(string(out), tc.wantOutput) {
				t.Errorf("output lacks %q:\n%s", tc.wantOutput, out)
			}
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(string(out), tc.wantErr) {
					t.Fatalf("err = %v, want a failure mentioning %q:\n%s", err, tc.wantErr, out)
				}
				return
			}
			if err != nil {
				t.Fatalf("debian-base.sh: %v\n%s", err, out)
			}
			for path, want := range map[string]string{
				"lib64/ld-linux-x86-64.so.2":       "loader",
				"usr/share/doc/fakelibc/copyright": "licence text",
			} {
				if got, err := os.ReadFile(filepath.Join(rootfs, path)); err != nil || string(got) != want {
					t.Errorf("%s = %q (%v), want %q", path, got, err, want)
				}
			}
			for _, gone := range []string{"usr/share/doc/fakelibc/changelog", "usr/share/man"} {
				if _, err := os.Stat(filepath.Join(rootfs, gone)); err == nil {
					t.Errorf("%s is still in the base", gone)
				}
			}
			status, err := os.ReadFile(filepath.Join(rootfs, "var/lib/dpkg/status.d/fakelibc"))
			if err != nil || !strings.Contains(string(status), "Package: fakelibc") || !strings.Contains(string(status), "Version: 1.0") {
				t.Errorf("status.d entry = %q (%v)", status, err)
			}
		})
	}
}
