package control

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestStartKeepsStdinOpen: a started process's standard input never ends
// (a -f MPS control daemon exits at end of input), also once the starter
// no longer holds anything of it.
func TestStartKeepsStdinOpen(t *testing.T) {
	dir := t.TempDir()
	marker := filepath.Join(dir, "eof")
	proc, err := ExecCommander{}.Start(context.Background(), []string{"/bin/sh", "-c", "cat >/dev/null; touch " + marker}, nil)
	if err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- proc.Wait() }()
	select {
	case err := <-exited:
		t.Fatalf("the process saw the end of its stdin and exited: %v", err)
	case <-time.After(300 * time.Millisecond):
	}
	if _, err := os.Stat(marker); !os.IsNotExist(err) {
		t.Errorf("the process read end of file: %v", err)
	}
	_ = proc.Kill()
	<-exited
}
