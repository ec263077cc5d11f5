package mpstest

import (
	"context"
	"os"
	"strings"
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

// ReturnsWithin runs f and fails the test if it has not returned after
// limit: a call that waits for a blocked daemon never returns, so this
// tells "did not wait" from "waited", not how fast the call is.
func ReturnsWithin[T any](t *testing.T, limit time.Duration, what string, f func() T) T {
	t.Helper()
	done := make(chan T, 1)
	go func() { done <- f() }()
	select {
	case v := <-done:
		return v
	case <-time.After(limit):
		t.Fatalf("%s did not return within %s: it waits on the MPS daemon", what, limit)
		panic("unreachable")
	}
}

// CheckError fails the test unless err is nil when wantErr is "", or
// contains wantErr; it reports whether an error was wanted.
func CheckError(t *testing.T, err error, wantErr string) bool {
	t.Helper()
	if wantErr == "" {
		if err != nil {
			t.Fatal(err)
		}
		return false
	}
	if err == nil || !strings.Contains(err.Error(), wantErr) {
		t.Fatalf("error %v, want one containing %q", err, wantErr)
	}
	return true
}
