// Package durable writes small state files so that they survive a crash or
// a power loss whole: the old content or the new, never a torn or empty
// file. It needs only the standard library and golang.org/x/sys/unix, so
// the node's small helpers (tangram-cdi-hook) use it as well as the
// plugin's checkpoint.
package durable

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// TempInfix is in the name of the temporary file WriteFile writes beside
// path (<base>.tmp-<random>): one left by a crash between creating and
// renaming it can be recognised and removed.
const TempInfix = ".tmp-"

// WriteFile replaces path with data atomically and durably: a temporary
// file in the same directory (mode 0600), fsynced, renamed over path, then
// the directory fsynced, since the rename is durable only once the
// directory entry is on disk. The directory is created if missing.
func WriteFile(path string, data []byte) error {
	tmpName, err := writeTemp(path, data, true)
	if err != nil {
		return err
	}
	if err := os.Rename(tmpName, path); err != nil {
		_ = os.Remove(tmpName)
		return fmt.Errorf("renaming %s: %w", tmpName, err)
	}
	dir := filepath.Dir(path)
	if err := SyncDir(dir); err != nil {
		return fmt.Errorf("syncing directory %s: %w", dir, err)
	}
	return nil
}

// ReplaceFile replaces path with data atomically but does not wait for the
// disk: every process reads the old content or the new, never a torn file,
// also after this process crashes (the page cache outlives it). After a
// power loss the disk may hold the old content, the new, or (the new
// file's blocks not yet allocated) an empty file. It is for a state that a
// reboot makes moot anyway, on its way to a WriteFile that makes the final
// state durable; it saves WriteFile's two fsyncs.
//
// The new file is exchanged with path (where the file system can), not
// renamed over it: ext4 writes a file renamed over another to disk at once
// (auto_da_alloc), the very write this function exists to avoid; exchanged,
// its blocks stay unallocated, and a WriteFile replacing it before the
// kernel's writeback drops them unwritten. The old content, left under the
// temporary name, is removed; one a crash leaves is a temporary file like
// any other (TempInfix).
func ReplaceFile(path string, data []byte) error {
	tmpName, err := writeTemp(path, data, false)
	if err != nil {
		return err
	}
	switch err := exchange(tmpName, path); {
	case err == nil:
		_ = os.Remove(tmpName)
		return nil
	case !errors.Is(err, errNoExchange) && !errors.Is(err, fs.ErrNotExist):
		_ = os.Remove(tmpName)
		return fmt.Errorf("exchanging %s with %s: %w", tmpName, path, err)
	}
	// No file to exchange with yet, or a file system that cannot.
	if err := os.Rename(tmpName, path); err != nil {
		_ = os.Remove(tmpName)
		return fmt.Errorf("renaming %s: %w", tmpName, err)
	}
	return nil
}

// errNoExchange: the file system (or the OS) cannot exchange two files.
var errNoExchange = errors.New("exchanging files is not supported")

// writeTemp writes data into a new temporary file beside path (mode 0600),
// fsynced if sync, creating the directory if missing, and returns its name.
func writeTemp(path string, data []byte, sync bool) (string, error) {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", fmt.Errorf("creating directory: %w", err)
	}
	tmp, err := os.CreateTemp(dir, filepath.Base(path)+TempInfix+"*")
	if err != nil {
		return "", fmt.Errorf("creating temporary file: %w", err)
	}
	tmpName := tmp.Name()
	ok := false
	defer func() {
		if !ok {
			_ = tmp.Close()
			_ = os.Remove(tmpName)
		}
	}()
	if _, err := tmp.Write(data); err != nil {
		return "", fmt.Errorf("writing %s: %w", tmpName, err)
	}
	if sync {
		if err := tmp.Sync(); err != nil {
			return "", fmt.Errorf("syncing %s: %w", tmpName, err)
		}
	}
	ok = true
	if err := tmp.Close(); err != nil {
		_ = os.Remove(tmpName)
		return "", fmt.Errorf("closing %s: %w", tmpName, err)
	}
	return tmpName, nil
}

// SyncDir fsyncs a directory, making the creations, renames and removals
// of its entries durable.
func SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer func() { _ = d.Close() }()
	return d.Sync()
}
