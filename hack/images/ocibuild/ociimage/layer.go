package ociimage

import (
	"archive/tar"
	"bytes"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"time"
)

// DirTar returns an uncompressed tar of everything under dir, written so that
// only the names, types, executable bits, link targets and contents of the
// files matter: entries in lexical order of their paths (parents first),
// owner root, every time set to mtime, modes normalised (see normalMode).
// Two directories with the same tree give the same bytes whatever order the
// files were created in, when, by whom or under which umask. Device nodes, sockets and pipes are refused: no image we build needs
// them and they cannot be recreated without privileges.
func DirTar(dir string, mtime time.Time) ([]byte, error) {
	info, err := os.Stat(dir)
	if err != nil {
		return nil, fmt.Errorf("reading layer directory: %w", err)
	}
	if !info.IsDir() {
		return nil, fmt.Errorf("layer source %s is not a directory", dir)
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	// WalkDir visits the entries of each directory in lexical order, so the
	// order does not depend on the file system.
	err = filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if path == dir {
			return nil
		}
		rel, err := filepath.Rel(dir, path)
		if err != nil {
			return err
		}
		return addEntry(tw, path, filepath.ToSlash(rel), mtime)
	})
	if err != nil {
		return nil, fmt.Errorf("writing a layer of %s: %w", dir, err)
	}
	if err := tw.Close(); err != nil {
		return nil, fmt.Errorf("writing a layer of %s: %w", dir, err)
	}
	return buf.Bytes(), nil
}

func addEntry(tw *tar.Writer, path, name string, mtime time.Time) error {
	info, err := os.Lstat(path)
	if err != nil {
		return err
	}
	mode := normalMode(info.Mode())
	h := &tar.Header{Name: name, Mode: mode, ModTime: mtime}
	switch {
	case info.Mode().IsRegular():
		h.Typeflag, h.Size = tar.TypeReg, info.Size()
	case info.IsDir():
		h.Typeflag, h.Name = tar.TypeDir, name+"/"
	case info.Mode()&fs.ModeSymlink != 0:
		target, err := os.Readlink(path)
		if err != nil {
			return err
		}
		h.Typeflag, h.Linkname = tar.TypeSymlink, target
	default:
		return fmt.Errorf("%s is a %v; a layer holds only files, directories and symbolic links", path, info.Mode().Type())
	}
	if err := tw.WriteHeader(h); err != nil {
		return err
	}
	if h.Typeflag != tar.TypeReg {
		return nil
	}
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	// A file that changed size while we read it would make a corrupt entry.
	if n, err := io.Copy(tw, f); err != nil {
		return err
	} else if n != h.Size {
		return fmt.Errorf("%s changed while it was being read", path)
	}
	return nil
}

// normalMode maps a file's mode to the few an image needs, so that the umask
// of whoever staged the files does not change the digest: directories 0755
// (1777 when sticky, like /tmp), files 0755 when their owner may execute them
// and 0644 otherwise, symbolic links 0777. Setuid and setgid bits are
// dropped: nothing we ship needs them.
func normalMode(m fs.FileMode) int64 {
	switch {
	case m.IsDir() && m&fs.ModeSticky != 0:
		return 0o1777
	case m.IsDir():
		return 0o755
	case m&fs.ModeSymlink != 0:
		return 0o777
	case m&0o100 != 0:
		return 0o755
	default:
		return 0o644
	}
}
