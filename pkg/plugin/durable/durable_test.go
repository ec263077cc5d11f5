package durable

import (
	"os"
	"path/filepath"
	"testing"
)

// writers are the two ways of replacing a file; whether the disk has the
// result is not observable here, only what every reader sees.
var writers = []struct {
	name  string
	write func(path string, data []byte) error
}{
	{"WriteFile", WriteFile},
	{"ReplaceFile", ReplaceFile},
}

func TestWriteFile(t *testing.T) {
	for _, w := range writers {
		t.Run(w.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "new", "dir")
			path := filepath.Join(dir, "x.json")
			for _, content := range []string{"first", "second"} {
				if err := w.write(path, []byte(content)); err != nil {
					t.Fatal(err)
				}
				got, err := os.ReadFile(path)
				if err != nil || string(got) != content {
					t.Fatalf("read %q, %v; want %q", got, err, content)
				}
			}
			st, err := os.Stat(path)
			if err != nil {
				t.Fatal(err)
			}
			if st.Mode().Perm() != 0o600 {
				t.Errorf("mode %v, want 0600", st.Mode().Perm())
			}
			entries, err := os.ReadDir(dir)
			if err != nil {
				t.Fatal(err)
			}
			if len(entries) != 1 {
				t.Errorf("directory holds %d entries, want the file alone (no temporary file left)", len(entries))
			}
		})
	}
}

func TestWriteFileIntoAFile(t *testing.T) {
	for _, w := range writers {
		t.Run(w.name, func(t *testing.T) {
			parent := filepath.Join(t.TempDir(), "file")
			if err := os.WriteFile(parent, nil, 0o600); err != nil {
				t.Fatal(err)
			}
			if err := w.write(filepath.Join(parent, "x"), []byte("x")); err == nil {
				t.Fatal("writing under a regular file succeeded")
			}
		})
	}
}
