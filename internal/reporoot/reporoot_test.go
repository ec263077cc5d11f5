package reporoot

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestFindFrom(t *testing.T) {
	root := t.TempDir()
	write := func(path, content string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(filepath.Join(root, "go.mod"), "// the main module\nmodule "+Module+"\n\ngo 1.26\n")
	write(filepath.Join(root, "cmd", "nested", "go.mod"), "module "+Module+"/cmd/nested\n")
	write(filepath.Join(root, "cmd", "nested", "sub", "x.go"), "package sub\n")
	other := t.TempDir()
	write(filepath.Join(other, "go.mod"), "module example.com/other\n")

	for _, tc := range []struct {
		name, from, want, wantErr string
	}{
		{name: "at the root", from: root, want: root},
		{name: "in a package", from: filepath.Join(root, "cmd", "nested"), want: root},
		{name: "inside a nested module", from: filepath.Join(root, "cmd", "nested", "sub"), want: root},
		{name: "another module", from: other, wantErr: "no go.mod of " + Module},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := findFrom(tc.from)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("findFrom(%s) = %q, %v; want error containing %q", tc.from, got, err, tc.wantErr)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("findFrom(%s) = %q, %v; want %q", tc.from, got, err, tc.want)
			}
		})
	}
}

func TestFindInThisCheckout(t *testing.T) {
	got, err := Find()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(got, "internal", "reporoot", "reporoot.go")); err != nil {
		t.Fatalf("Find() = %s, which does not hold this package: %v", got, err)
	}
}
