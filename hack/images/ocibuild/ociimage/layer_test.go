package ociimage

import (
	"archive/tar"
	"bytes"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// file is one entry of a test tree: a directory, a symbolic link (target)
// or a regular file.
type file struct {
	path, content, target string
	dir                   bool
	mode                  os.FileMode
}

var sampleTree = []file{
	{path: "etc", dir: true, mode: 0o755},
	{path: "etc/passwd", content: "root:x:0:0:root:/:/nonexistent\n", mode: 0o644},
	{path: "lib64", dir: true, mode: 0o755},
	{path: "lib64/ld.so", content: "loader", mode: 0o755},
	{path: "lib", target: "lib64"},
	{path: "tmp", dir: true, mode: 0o777 | os.ModeSticky},
	{path: "plugin", content: "program", mode: 0o755},
}

// writeTree creates files in the given order, each with its own mtime.
func writeTree(t *testing.T, dir string, files []file, mtime time.Time) {
	t.Helper()
	for i, f := range files {
		p := filepath.Join(dir, f.path)
		var err error
		switch {
		case f.target != "":
			err = os.Symlink(f.target, p)
		case f.dir:
			err = os.Mkdir(p, 0o700)
			if err == nil {
				err = os.Chmod(p, f.mode)
			}
		default:
			err = os.WriteFile(p, []byte(f.content), 0o600)
			if err == nil {
				err = os.Chmod(p, f.mode)
			}
		}
		if err != nil {
			t.Fatal(err)
		}
		if f.target == "" {
			at := mtime.Add(time.Duration(i) * time.Hour)
			if err := os.Chtimes(p, at, at); err != nil {
				t.Fatal(err)
			}
		}
	}
}

func reversed(files []file) []file {
	// Parents must exist first: reverse only the order of siblings by
	// creating leaves of each directory last-to-first.
	var dirs, rest []file
	for _, f := range files {
		if f.dir {
			dirs = append(dirs, f)
		} else {
			rest = append(rest, f)
		}
	}
	for i, j := 0, len(rest)-1; i < j; i, j = i+1, j-1 {
		rest[i], rest[j] = rest[j], rest[i]
	}
	return append(dirs, rest...)
}

func tarOf(t *testing.T, files []file, mtime time.Time, epoch time.Time) []byte {
	t.Helper()
	dir := t.TempDir()
	writeTree(t, dir, files, mtime)
	data, err := DirTar(dir, epoch)
	if err != nil {
		t.Fatalf("DirTar: %v", err)
	}
	return data
}

func TestDirTarIsReproducible(t *testing.T) {
	epoch := time.Unix(1700000000, 0)
	want := tarOf(t, sampleTree, time.Now(), epoch)

	withContent := func(path, content string) []file {
		out := append([]file(nil), sampleTree...)
		for i := range out {
			if out[i].path == path {
				out[i].content = content
			}
		}
		return out
	}
	withMode := func(path string, mode os.FileMode) []file {
		out := append([]file(nil), sampleTree...)
		for i := range out {
			if out[i].path == path {
				out[i].mode = mode
			}
		}
		return out
	}
	tests := []struct {
		name     string
		files    []file
		mtime    time.Time
		epoch    time.Time
		wantSame bool
	}{
		{name: "files created at other times", files: sampleTree, mtime: time.Unix(0, 0), epoch: epoch, wantSame: true},
		{name: "files created in another order", files: reversed(sampleTree), mtime: time.Now(), epoch: epoch, wantSame: true},
		{name: "group-writable file (another umask)", files: withMode("etc/passwd", 0o664), mtime: time.Now(), epoch: epoch, wantSame: true},
		{name: "other content", files: withContent("plugin", "program v2"), mtime: time.Now(), epoch: epoch},
		{name: "not executable", files: withMode("plugin", 0o644), mtime: time.Now(), epoch: epoch},
		{name: "other SOURCE_DATE_EPOCH", files: sampleTree, mtime: time.Now(), epoch: epoch.Add(time.Second)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := tarOf(t, tc.files, tc.mtime, tc.epoch)
			if same := bytes.Equal(got, want); same != tc.wantSame {
				t.Errorf("same bytes = %v, want %v", same, tc.wantSame)
			}
		})
	}
}

func TestDirTarEntries(t *testing.T) {
	epoch := time.Unix(1700000000, 0)
	data := tarOf(t, sampleTree, time.Now(), epoch)
	type entry struct {
		typ            byte
		mode           int64
		linkname, body string
	}
	want := map[string]entry{
		"etc/":        {typ: tar.TypeDir, mode: 0o755},
		"etc/passwd":  {typ: tar.TypeReg, mode: 0o644, body: "root:x:0:0:root:/:/nonexistent\n"},
		"lib":         {typ: tar.TypeSymlink, mode: 0o777, linkname: "lib64"},
		"lib64/":      {typ: tar.TypeDir, mode: 0o755},
		"lib64/ld.so": {typ: tar.TypeReg, mode: 0o755, body: "loader"},
		"plugin":      {typ: tar.TypeReg, mode: 0o755, body: "program"},
		"tmp/":        {typ: tar.TypeDir, mode: 0o1777},
	}
	var order []string
	tr := tar.NewReader(bytes.NewReader(data))
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		order = append(order, h.Name)
		body, _ := io.ReadAll(tr)
		w, ok := want[h.Name]
		if !ok {
			t.Errorf("unexpected entry %q", h.Name)
			continue
		}
		got := entry{typ: h.Typeflag, mode: h.Mode, linkname: h.Linkname, body: string(body)}
		if got != w {
			t.Errorf("%s = %+v, want %+v", h.Name, got, w)
		}
		if h.Uid != 0 || h.Gid != 0 || h.Uname != "" || h.Gname != "" {
			t.Errorf("%s owner = %d:%d (%q:%q), want 0:0", h.Name, h.Uid, h.Gid, h.Uname, h.Gname)
		}
		if !h.ModTime.Equal(epoch) {
			t.Errorf("%s mtime = %v, want %v", h.Name, h.ModTime, epoch)
		}
	}
	wantOrder := []string{"etc/", "etc/passwd", "lib", "lib64/", "lib64/ld.so", "plugin", "tmp/"}
	if strings.Join(order, " ") != strings.Join(wantOrder, " ") {
		t.Errorf("entry order = %v, want %v", order, wantOrder)
	}
}

func TestDirTarRefuses(t *testing.T) {
	dir := t.TempDir()
	if err := syscall.Mkfifo(filepath.Join(dir, "pipe"), 0o644); err != nil {
		t.Fatal(err)
	}
	regular := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(regular, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, dir, wantErr string
	}{
		{name: "named pipe inside", dir: dir, wantErr: "only files, directories and symbolic links"},
		{name: "missing directory", dir: filepath.Join(dir, "nope"), wantErr: "no such file"},
		{name: "a file, not a directory", dir: regular, wantErr: "is not a directory"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := DirTar(tc.dir, time.Unix(0, 0))
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("err = %v, want it to mention %q", err, tc.wantErr)
			}
		})
	}
}
