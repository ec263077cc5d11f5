package placement

import (
	resourceapi "k8s.io/api/resource/v1"

	"github.com/tangram-gpu/tangram/pkg/device"
	"github.com/tangram-gpu/tangram/pkg/placement/mig"
)

// A card in MIG mode is published as its MIG partitions, which consume the
// card's counter set; the model holds it as one Card with the partitions'
// mig.Layout and the mig.State of what it has handed out (package
// placement/mig).

// IsMIG reports whether the card is in MIG mode (published as partitions).
func (c *Card) IsMIG() bool { return c.mig != nil }

// MIGPartitions are the card's partitions in the allocator's order.
func (c *Card) MIGPartitions() []mig.Partition {
	if c.mig == nil {
		return nil
	}
	return c.mig.Partitions()
}

// migCards are the node's cards in MIG mode, gathered from its MIG
// partition devices (mig.Cards).
func migCards(name string, devices []resourceapi.Device, sets []resourceapi.CounterSet) ([]Card, error) {
	migs, err := mig.Cards(name, devices, sets)
	if err != nil {
		return nil, err
	}
	cards := make([]Card, len(migs))
	for i, m := range migs {
		cards[i] = Card{Device: m.Layout.CounterSet(), UUID: m.UUID, Model: m.Model, mig: m.Layout}
	}
	return cards, nil
}

// migCardIndex is the card of n holding the MIG partition named name, and
// the partition's index; ok false when n has no such partition.
func (n *Node) migCardIndex(name string) (card, partition int, ok bool) {
	ref, err := device.ParseDeviceName(name)
	if err != nil || ref.MIG == nil {
		return 0, 0, false
	}
	set := device.MIGCounterSetName(ref.Index)
	for i := range n.Cards {
		c := &n.Cards[i]
		if c.mig == nil || c.mig.CounterSet() != set {
			continue
		}
		for j, p := range c.mig.Partitions() {
			if p.Device == name {
				return i, j, true
			}
		}
	}
	return 0, 0, false
}

// migBestFit is the card a MIG request packs onto: of the cards it fits,
// the one with the least free compute, so partitions go to cards already
// split before an untouched card is broken (device order on ties).
func migBestFit(n *Node, cands []int) []int {
	best := cands[0]
	for _, i := range cands[1:] {
		if n.Cards[i].FreeMilli() < n.Cards[best].FreeMilli() {
			best = i
		}
	}
	return []int{best}
}

// migPackingScore rates a node for a MIG request: the card migBestFit
// picks, and first the nodes where that card is already split (breaking
// an untouched card costs more than any other term), then, as
// kube-scheduler's stock scoring does, the node with the most CPU and
// memory left, so that GPU is not stranded behind exhausted CPUs.
func migPackingScore(n *Node, r Request, cands []int) Choice {
	cards := migBestFit(n, cands)
	score := Stock{}.Score(n, r, cands).Score
	if n.Cards[cards[0]].Unused() {
		score -= 1000
	}
	return Choice{Score: score, Cards: cards}
}
