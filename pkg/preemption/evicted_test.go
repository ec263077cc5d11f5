package preemption

import (
	"fmt"
	"slices"
	"sync"
	"testing"

	"k8s.io/apimachinery/pkg/types"
)

func TestEvictedPods(t *testing.T) {
	var e EvictedPods
	if got := e.List(); len(got) != 0 {
		t.Fatalf("a new set lists %v", got)
	}
	e.Add("b")
	e.Add("a")
	e.Add("b")
	if got, want := e.List(), []types.UID{"a", "b"}; !slices.Equal(got, want) {
		t.Fatalf("List() = %v, want %v", got, want)
	}
	e.Forget([]types.UID{"b", "never-added"})
	if got, want := e.List(), []types.UID{"a"}; !slices.Equal(got, want) {
		t.Fatalf("after Forget(b): List() = %v, want %v", got, want)
	}
}

// TestEvictedPodsConcurrent is for the race detector: evictions recorded
// while scheduling cycles list and forget, as the preemption plugin does.
func TestEvictedPodsConcurrent(t *testing.T) {
	var e EvictedPods
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 200 {
				uid := types.UID(fmt.Sprintf("pod-%d-%d", w, i))
				e.Add(uid)
				if i%3 == 0 {
					e.Forget([]types.UID{uid})
				}
				_ = e.List()
			}
		}()
	}
	wg.Wait()
	// 200 added per writer, every third (i = 0, 3, …, 198: 67) forgotten.
	if got, want := len(e.List()), 4*(200-67); got != want {
		t.Fatalf("%d pods recorded, want %d", got, want)
	}
}
