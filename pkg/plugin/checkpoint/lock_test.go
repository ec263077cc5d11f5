package checkpoint

import (
	"bufio"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// lockOrFail takes l within a short time or fails the test.
func lockOrFail(t *testing.T, l *FileLock) func() {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	unlock, err := l.Lock(ctx)
	if err != nil {
		t.Fatalf("Lock: %v", err)
	}
	return unlock
}

// assertHeld checks that l cannot be taken now.
func assertHeld(t *testing.T, l *FileLock) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	unlock, err := l.Lock(ctx)
	if err == nil {
		unlock()
		t.Fatal("Lock succeeded while another holder has the lock")
	}
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Lock error %v, want one wrapping context.DeadlineExceeded", err)
	}
}

func TestFileLockExcludesAndHandsOver(t *testing.T) {
	path := filepath.Join(t.TempDir(), "checkpoint.lock")
	a, b := NewFileLock(path), NewFileLock(path)
	unlockA := lockOrFail(t, a)
	assertHeld(t, b)

	// A waiter gets the lock as soon as the holder releases it.
	got := make(chan func(), 1)
	go func() {
		unlock, err := b.Lock(context.Background())
		if err != nil {
			t.Errorf("waiting Lock: %v", err)
			close(got)
			return
		}
		got <- unlock
	}()
	select {
	case <-got:
		t.Fatal("the waiter got the lock while it was held")
	case <-time.After(50 * time.Millisecond):
	}
	unlockA()
	unlockB, ok := <-got
	if !ok {
		return
	}
	assertHeld(t, a)
	unlockB()
	lockOrFail(t, a)()
}

func TestFileLockBadPath(t *testing.T) {
	l := NewFileLock(filepath.Join(t.TempDir(), "missing-dir", "checkpoint.lock"))
	if _, err := l.Lock(context.Background()); err == nil {
		t.Fatal("Lock in a missing directory succeeded")
	}
}

const lockHelperEnv = "TANGRAM_TEST_HOLD_LOCK"

// TestFileLockReleasedWhenTheHolderDies kills a process holding the lock
// (as a crashed plugin pod would be) and takes the lock after it.
func TestFileLockReleasedWhenTheHolderDies(t *testing.T) {
	if path := os.Getenv(lockHelperEnv); path != "" {
		// The child: hold the lock until killed.
		unlock, err := NewFileLock(path).Lock(context.Background())
		if err != nil {
			os.Exit(3)
		}
		defer unlock()
		os.Stdout.WriteString("locked\n")
		time.Sleep(time.Minute)
		os.Exit(4)
	}
	path := filepath.Join(t.TempDir(), "checkpoint.lock")
	child := exec.Command(os.Args[0], "-test.run=^TestFileLockReleasedWhenTheHolderDies$")
	child.Env = append(os.Environ(), lockHelperEnv+"="+path)
	out, err := child.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || line != "locked\n" {
		_ = child.Process.Kill()
		t.Fatalf("child did not lock: %q, %v", line, err)
	}
	l := NewFileLock(path)
	assertHeld(t, l)
	if err := child.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = child.Wait()
	lockOrFail(t, l)()
}
