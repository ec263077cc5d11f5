// Package hostbin installs a program from the plugin's image onto the host,
// for the container runtime to run (tangram-cdi-hook): the runtime runs CDI
// hooks from host paths, outside any container.
package hostbin

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
)

// Install copies src into dir (created if missing) under src's base name,
// executable, and returns the installed path. A file already there with
// the same content is left alone; otherwise the new one replaces it
// atomically (write beside, then rename), so a runtime starting a
// container meanwhile runs either the old program or the new, never half
// of one.
func Install(src, dir string) (string, error) {
	data, err := os.ReadFile(src)
	if err != nil {
		return "", fmt.Errorf("installing %s on the host: %w", filepath.Base(src), err)
	}
	dst := filepath.Join(dir, filepath.Base(src))
	if have, err := os.ReadFile(dst); err == nil && bytes.Equal(have, data) {
		if err := os.Chmod(dst, 0o755); err != nil {
			return "", fmt.Errorf("installing %s on the host: %w", dst, err)
		}
		return dst, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("installing %s on the host: %w", dst, err)
	}
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(src)+".*")
	if err != nil {
		return "", fmt.Errorf("installing %s on the host: %w", dst, err)
	}
	defer func() { _ = os.Remove(tmp.Name()) }()
	_, err = io.Copy(tmp, bytes.NewReader(data))
	if err == nil {
		err = tmp.Chmod(0o755)
	}
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), dst)
	}
	if err != nil {
		return "", fmt.Errorf("installing %s on the host: %w", dst, err)
	}
	return dst, nil
}
