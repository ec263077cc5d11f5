package hostbin

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestInstall(t *testing.T) {
	tests := []struct {
		name     string
		existing string // "" = nothing installed yet
		mode     os.FileMode
	}{
		{"fresh", "", 0},
		{"older version", "old program", 0o755},
		{"same program, lost its x bit", "program v2", 0o644},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root := t.TempDir()
			src := filepath.Join(root, "image", "tangram-cdi-hook")
			if err := os.MkdirAll(filepath.Dir(src), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(src, []byte("program v2"), 0o755); err != nil {
				t.Fatal(err)
			}
			dir := filepath.Join(root, "host", "bin")
			if tt.existing != "" {
				if err := os.MkdirAll(dir, 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(filepath.Join(dir, "tangram-cdi-hook"), []byte(tt.existing), tt.mode); err != nil {
					t.Fatal(err)
				}
			}
			got, err := Install(src, dir)
			if err != nil {
				t.Fatal(err)
			}
			if got != filepath.Join(dir, "tangram-cdi-hook") {
				t.Errorf("installed at %s", got)
			}
			data, err := os.ReadFile(got)
			if err != nil || string(data) != "program v2" {
				t.Errorf("installed content %q, %v", data, err)
			}
			st, err := os.Stat(got)
			if err != nil || st.Mode().Perm() != 0o755 {
				t.Errorf("installed mode %v, %v, want 0755", st.Mode(), err)
			}
			entries, _ := os.ReadDir(dir)
			if len(entries) != 1 {
				t.Errorf("left behind: %v", entries)
			}
		})
	}
}

func TestInstallMissingSource(t *testing.T) {
	_, err := Install(filepath.Join(t.TempDir(), "tangram-cdi-hook"), t.TempDir())
	if err == nil || !strings.Contains(err.Error(), "installing tangram-cdi-hook on the host") {
		t.Fatalf("error %v", err)
	}
}
