package nvmlgpu

import "sort"

// cardLinks is what one card reported about its active NVLinks.
type cardLinks struct {
	// index is the published card index, or -1 for a card NVML lists but we
	// do not publish (e.g. its UUID was unreadable): links to it are then not
	// mistaken for links to an NVSwitch.
	index int
	// busID is the card's canonical PCI bus ID; empty when unknown.
	busID string
	// remotes are the canonical PCI bus IDs at the far end of each active
	// link, one entry per link (so repeated for bonded links).
	remotes []string
}

// nvlinkPeers turns per-link reports into each published card's NVLink
// peers, sorted. A remote bus ID that is one of the node's cards is a direct
// link (NVLink bridge); any other remote is an NVSwitch, and all cards with a
// link to an NVSwitch reach each other. Links are undirected: a link seen
// from one side only (the other card's NVLink calls failed) counts for both.
func nvlinkPeers(cards []cardLinks) map[int][]int {
	byBus := map[string]int{}
	for i, c := range cards {
		if c.busID != "" {
			byBus[c.busID] = i
		}
	}
	peers := map[int]map[int]bool{}
	link := func(a, b int) {
		if a == b {
			return
		}
		if peers[a] == nil {
			peers[a] = map[int]bool{}
		}
		if peers[b] == nil {
			peers[b] = map[int]bool{}
		}
		peers[a][b] = true
		peers[b][a] = true
	}
	var switched []int
	for _, c := range cards {
		if c.index < 0 {
			continue
		}
		onSwitch := false
		for _, remote := range c.remotes {
			if remote == "" || remote == c.busID {
				continue
			}
			if pos, ok := byBus[remote]; ok {
				if other := cards[pos]; other.index >= 0 {
					link(c.index, other.index)
				}
				continue
			}
			onSwitch = true
		}
		if onSwitch {
			switched = append(switched, c.index)
		}
	}
	for i, a := range switched {
		for _, b := range switched[i+1:] {
			link(a, b)
		}
	}
	out := make(map[int][]int, len(peers))
	for idx, set := range peers {
		list := make([]int, 0, len(set))
		for p := range set {
			list = append(list, p)
		}
		sort.Ints(list)
		out[idx] = list
	}
	return out
}
