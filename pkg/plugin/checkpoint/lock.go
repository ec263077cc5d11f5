package checkpoint

import (
	"context"
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// FileLock is an exclusive lock between processes on one node: flock(2) on
// a file. During a rolling update two plugin pods of a node run side by
// side on the same checkpoint; each holds the lock from reading the
// checkpoint to writing it back. The kernel releases the lock when the
// holder's process dies, so a crashed holder never blocks the other.
//
// flock locks belong to an open file, not a process: two FileLocks on the
// same path exclude each other also inside one process (the tests use
// that).
type FileLock struct {
	path string
}

// NewFileLock returns a lock on path; the file is created when first
// locked and never removed (removing it would let two holders lock
// different files).
func NewFileLock(path string) *FileLock { return &FileLock{path: path} }

// Path is the lock file.
func (l *FileLock) Path() string { return l.path }

// Lock waits until it holds the lock or ctx ends, and returns the function
// that releases it.
func (l *FileLock) Lock(ctx context.Context) (unlock func(), err error) {
	f, err := os.OpenFile(l.path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("opening lock file: %w", err)
	}
	release := func() { _ = f.Close() } // closing the file releases the lock
	fd := int(f.Fd())
	err = flock(fd, unix.LOCK_EX|unix.LOCK_NB)
	if err == nil {
		return release, nil
	}
	if !errors.Is(err, unix.EWOULDBLOCK) {
		release()
		return nil, fmt.Errorf("locking %s: %w", l.path, err)
	}
	// Held by another process: wait for it in the background so that ctx
	// can end the wait.
	locked := make(chan error, 1)
	go func() { locked <- flock(fd, unix.LOCK_EX) }()
	select {
	case err := <-locked:
		if err != nil {
			release()
			return nil, fmt.Errorf("locking %s: %w", l.path, err)
		}
		return release, nil
	case <-ctx.Done():
		// The file is closed only once the waiting flock returns; closing
		// it under a blocked system call is not safe.
		go func() {
			<-locked
			release()
		}()
		return nil, fmt.Errorf("waiting for lock %s held by another process: %w", l.path, context.Cause(ctx))
	}
}

func flock(fd, how int) error {
	for {
		err := unix.Flock(fd, how)
		if !errors.Is(err, unix.EINTR) {
			return err
		}
	}
}
