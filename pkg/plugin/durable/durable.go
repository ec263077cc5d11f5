// Package durable writes small state files so that they survive a crash or
// a power loss whole: the old content or the new, never a torn or empty
// file. It needs only the standard library, so the node's small helpers
// (tangram-cdi-hook) use it as well as the plugin's checkpoint.
package durable

import (
	"fmt"
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
func WriteFile(path string, data []byte) error { return replace(path, data, true) }

// ReplaceFile replaces path with data atomically but does not wait for the
// disk: every process reads the old content or the new, never a torn file,
// also after this process crashes (the page cache outlives it), but a power
// loss may keep the old content. It is for a state that a reboot makes
// moot anyway, on its way to a WriteFile that makes the final state
// durable; it saves WriteFile's two fsyncs.
func ReplaceFile(path string, data []byte) error { return replace(path, data, false) }

func replace(path string, data []byte, sync bool) error {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("creating directory: %w", err)
	}
	tmp, err := os.CreateTemp(dir, filepath.Base(path)+TempInfix+"*")
	if err != nil {
		return fmt.Errorf("creating temporary file: %w", err)
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
		return fmt.Errorf("writing %s: %w", tmpName, err)
	}
	if sync {
		if err := tmp.Sync(); err != nil {
			return fmt.Errorf("syncing %s: %w", tmpName, err)
		}
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("closing %s: %w", tmpName, err)
	}
	if err := os.Rename(tmpName, path); err != nil {
		return fmt.Errorf("renaming %s: %w", tmpName, err)
	}
	ok = true
	if !sync {
		return nil
	}
	if err := SyncDir(dir); err != nil {
		return fmt.Errorf("syncing directory %s: %w", dir, err)
	}
	return nil
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
