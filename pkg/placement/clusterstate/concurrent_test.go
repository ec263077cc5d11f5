package clusterstate

import (
	"fmt"
	"sync"
	"testing"

	"github.com/tangram-gpu/tangram/pkg/placement"
)

// TestConcurrentEventsAndScoring is the scheduler's use of the state, for
// the race detector (make unit): informer events, Reserve and Unreserve
// write it from one goroutine while scheduling cycles snapshot it, build
// policies and score every node from others, as kube-scheduler's parallel
// Score calls do. After the writer's last event the state must still equal
// a model built from scratch.
func TestConcurrentEventsAndScoring(t *testing.T) {
	w := newWorld(t, 42)
	policies := NewPolicyCache("tangram")
	const readers = 3
	done := make(chan struct{})
	// cycles carries the index of a reader after each of its cycles, so
	// the writer can wait for every reader between its events instead of
	// hoping the scheduler interleaved them.
	cycles := make(chan int, 64)
	var running sync.WaitGroup
	for i := range readers {
		running.Add(1)
		go func() {
			defer running.Done()
			request := placement.Request{Name: fmt.Sprintf("pod-%d", i), CPUMilli: 100, MemoryMiB: 64, ShareMilli: 250}
			requestFor := func(int64) (placement.Request, bool) { return request, true }
			for {
				select {
				case <-done:
					return
				default:
				}
				snap := w.state.Snapshot(worldNodes)
				policy, err := policies.For(snap.Shapes, &request)
				if err != nil {
					t.Errorf("reader %d: building the policy: %v", i, err)
					continue
				}
				var cycle sync.WaitGroup
				for _, node := range worldNodes {
					cycle.Add(1)
					go func() {
						defer cycle.Done()
						w.state.Score(node, policy, requestFor, Resources{AllocatableCPU: 64000, AllocatableMemMiB: 1 << 20})
						w.state.Model(node)
					}()
				}
				cycle.Wait()
				select {
				case cycles <- i:
				default:
				}
			}
		}()
	}
	for step := range 400 {
		w.step()
		if step%40 == 0 {
			// Only cycles that end after this point count, so every
			// reader runs between these steps and the next ones.
			for drained := false; !drained; {
				select {
				case <-cycles:
				default:
					drained = true
				}
			}
			for seen := map[int]bool{}; len(seen) < readers; {
				seen[<-cycles] = true
			}
		}
	}
	close(done)
	running.Wait()
	w.check(t, "after the concurrent run")
}
