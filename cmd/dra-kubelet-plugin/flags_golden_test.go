package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spf13/pflag"
)

// TestRunFlagsGolden pins every flag of `dra-kubelet-plugin run` (and the
// root's persistent klog flags it inherits): name, type, default and help
// text, as the chart and operators rely on them. Rewrite the golden file
// with `go test ./cmd/dra-kubelet-plugin -run TestRunFlagsGolden -update`
// only when a flag is meant to change.
func TestRunFlagsGolden(t *testing.T) {
	// Defaults read from the environment are pinned to their empty value.
	for _, env := range []string{"POD_UID", "NVIDIA_DRIVER_ROOT"} {
		t.Setenv(env, "")
		os.Unsetenv(env)
	}
	root := newRootCommand()
	run, _, err := root.Find([]string{"run"})
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	list := func(title string, fs *pflag.FlagSet) {
		fmt.Fprintf(&b, "# %s\n", title)
		fs.VisitAll(func(f *pflag.Flag) {
			fmt.Fprintf(&b, "--%s (%s) default=%q\n\t%s\n", f.Name, f.Value.Type(), f.DefValue, f.Usage)
		})
	}
	list("run", run.Flags())
	list("persistent", root.PersistentFlags())
	got := b.String()
	path := filepath.Join("testdata", "run-flags.golden")
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("reading %s: %v (create it with -update)", path, err)
	}
	if got != string(want) {
		t.Errorf("the flags of `dra-kubelet-plugin run` changed; if meant, rerun with -update and review the diff.\ngot:\n%s", got)
	}
}
