package mpstest

import (
	"context"
	"os"
	"testing"
	"time"
)

// ShortRoot returns a short MPS root: unix socket paths are limited to
// 108 bytes, and t.TempDir's names are long.
func ShortRoot(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "mps")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// WaitAnswering waits until probe succeeds, e.g. standin.Probe on a
// stand-in daemon's pipe directory.
func WaitAnswering(t *testing.T, probe func(context.Context) error) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for probe(context.Background()) != nil {
		if time.Now().After(deadline) {
			t.Fatal("the stand-in daemon does not answer")
		}
		time.Sleep(10 * time.Millisecond)
	}
}
