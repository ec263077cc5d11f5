package preemption

import (
	"maps"
	"slices"
	"sync"

	"k8s.io/apimachinery/pkg/types"
)

// EvictedPods are the pods a preemptor evicted that the scheduler's
// snapshot may still show running: its informer lags the Eviction API, and
// until it catches up they count as terminating, so no other preemptor
// evicts or counts on them again. Safe for concurrent use (it lives here,
// not in the tangram-scheduler module, so make unit runs it under the race
// detector).
type EvictedPods struct {
	mu   sync.Mutex
	uids map[types.UID]bool
}

// Add records an evicted pod.
func (e *EvictedPods) Add(uid types.UID) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.uids == nil {
		e.uids = map[types.UID]bool{}
	}
	e.uids[uid] = true
}

// List returns the recorded pods, sorted.
func (e *EvictedPods) List() []types.UID {
	e.mu.Lock()
	defer e.mu.Unlock()
	return slices.Sorted(maps.Keys(e.uids))
}

// Forget drops pods the snapshot no longer shows running. A pod added
// again since the caller's List stays recorded only if it is not named.
func (e *EvictedPods) Forget(uids []types.UID) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, uid := range uids {
		delete(e.uids, uid)
	}
}
