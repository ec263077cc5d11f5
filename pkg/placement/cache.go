package placement

import (
	"encoding/binary"
	"sync"
)

// scoreCache remembers fragmentation-aware scores by (request shape, node
// state): in a large cluster many nodes are in the same state (all empty
// nodes of a kind, for one), and scoring is a pure function of that state,
// so each distinct state is scored once.
type scoreCache struct {
	mu sync.Mutex
	m  map[string]cachedChoice
}

type cachedChoice struct {
	score float64
	// For a share: the free level and model of the chosen card; the first
	// candidate card matching both is equivalent.
	level int64
	model string
}

// maxCacheEntries bounds memory; the cache is simply dropped when full.
const maxCacheEntries = 200_000

// cacheKey encodes everything Score depends on: the request (MIG profile
// included) and each card's state (a MIG card's layout and taken
// partitions included).
func cacheKey(n *Node, r Request, buf []byte) []byte {
	buf = binary.AppendVarint(buf, r.CPUMilli)
	buf = binary.AppendVarint(buf, r.MemoryMiB)
	buf = binary.AppendVarint(buf, int64(r.WholeCards))
	buf = binary.AppendVarint(buf, r.ShareMilli)
	for _, m := range r.Models {
		buf = append(buf, m...)
		buf = append(buf, 0)
	}
	buf = append(buf, 1)
	buf = append(buf, r.MIGProfile...)
	buf = append(buf, 0)
	buf = binary.AppendVarint(buf, n.FreeCPUMilli())
	buf = binary.AppendVarint(buf, n.FreeMemoryMiB())
	for i := range n.Cards {
		c := &n.Cards[i]
		buf = append(buf, c.Model...)
		buf = append(buf, 0)
		flags := byte(0)
		if c.whole {
			flags |= 1
		}
		if c.Shareable {
			flags |= 2
		}
		if c.mig != nil {
			flags |= 4
		}
		buf = append(buf, flags)
		buf = binary.AppendVarint(buf, c.Memory.Value)
		buf = binary.AppendVarint(buf, c.usedMemory)
		buf = binary.AppendVarint(buf, c.usedCompute)
		if c.mig != nil {
			// A card in MIG mode: its layout and the partitions it has
			// handed out (the counters they use follow from the two). A
			// split card and an untouched one differ only here.
			buf = binary.AppendVarint(buf, c.mig.ID())
			buf = binary.AppendUvarint(buf, c.migUsed.Taken())
		}
	}
	return buf
}

// scoreCached returns score(n, r, cands) through the cache.
func (sc *scoreCache) scoreCached(n *Node, r Request, cands []int, score func() Choice) Choice {
	// Big enough for a node of 8 cards with long model names, so the key
	// stays on the stack.
	var kb [1024]byte
	key := cacheKey(n, r, kb[:0])
	sc.mu.Lock()
	hit, ok := sc.m[string(key)]
	sc.mu.Unlock()
	if ok {
		return Choice{Score: hit.score, Cards: hit.cards(n, r, cands)}
	}
	c := score()
	entry := cachedChoice{score: c.Score}
	if r.ShareMilli > 0 && len(c.Cards) == 1 {
		entry.level = n.Cards[c.Cards[0]].FreeMilli()
		entry.model = n.Cards[c.Cards[0]].Model
	}
	sc.mu.Lock()
	if sc.m == nil || len(sc.m) >= maxCacheEntries {
		sc.m = make(map[string]cachedChoice)
	}
	sc.m[string(key)] = entry
	sc.mu.Unlock()
	return c
}

func (e cachedChoice) cards(n *Node, r Request, cands []int) []int {
	if r.MIGProfile != "" {
		// What the policies pick for a partition, from the card states
		// the key holds.
		return migBestFit(n, cands)
	}
	if r.ShareMilli == 0 {
		return firstFit(r, cands)
	}
	for _, i := range cands {
		if n.Cards[i].FreeMilli() == e.level && n.Cards[i].Model == e.model {
			return []int{i}
		}
	}
	// Unreachable for equal states; fall back to the allocator's order.
	return firstFit(r, cands)
}
