package mps

import (
	"context"
	"fmt"
	"sync"
)

// nsLocks serializes the work on each MPS v3 namespace: one lock per name,
// taken by a claim's prepare and release and by the worker's sync of that
// name, so that a command that hangs holds up only its own claim. A wait
// for a lock ends with the waiter's context, and holders run only control
// commands that have deadlines, so no wait is unbounded.
//
// It also remembers which names a call changed (touched) after a point
// (mark), so that a sync acting on a list read before does not undo what
// a prepare or release did meanwhile.
type nsLocks struct {
	mu      sync.Mutex
	held    map[string]chan struct{}
	seq     uint64
	touched map[string]uint64
}

func newNSLocks() nsLocks {
	return nsLocks{held: map[string]chan struct{}{}, touched: map[string]uint64{}}
}

// lock waits until it holds name's lock or ctx ends. The returned unlock
// releases it; touched records that the holder changed the namespace.
func (l *nsLocks) lock(ctx context.Context, name string) (unlock func(touched bool), err error) {
	for {
		l.mu.Lock()
		busy, held := l.held[name]
		if !held {
			mine := make(chan struct{})
			l.held[name] = mine
			l.mu.Unlock()
			return func(touched bool) {
				l.mu.Lock()
				defer l.mu.Unlock()
				if touched {
					l.seq++
					l.touched[name] = l.seq
				}
				delete(l.held, name)
				close(mine)
			}, nil
		}
		l.mu.Unlock()
		select {
		case <-busy:
		case <-ctx.Done():
			return nil, fmt.Errorf("waiting for other work on MPS v3 namespace %s to finish: %w", name, context.Cause(ctx))
		}
	}
}

// mark returns the point from which touchedSince counts.
func (l *nsLocks) mark() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.seq
}

// touchedSince reports whether a holder changed name after mark since.
func (l *nsLocks) touchedSince(name string, since uint64) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.touched[name] > since
}

// forget drops what was touched up to since: the caller that marked it
// is done, and a later mark is at least as recent.
func (l *nsLocks) forget(since uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for name, seq := range l.touched {
		if seq <= since {
			delete(l.touched, name)
		}
	}
}
