package placement

import (
	"context"
	"fmt"
	"testing"

	resourceapi "k8s.io/api/resource/v1"

	"github.com/tangram-gpu/tangram/pkg/gpu"
	"github.com/tangram-gpu/tangram/pkg/gpu/fakegpu"
	"github.com/tangram-gpu/tangram/pkg/resourceslices"
)

// migTestCluster is nodes of one H100 80GB each in MIG mode (the guide's
// profiles, pkg/gpu/fakegpu), modelled from the slices the plugin
// publishes, with a validator running the real allocator.
func migTestCluster(t *testing.T, names ...string) ([]*Node, *DRAValidator) {
	t.Helper()
	return migTestClusterOf(t, 1, names...)
}

// migTestClusterOf is migTestCluster with cards H100s in MIG mode per node.
func migTestClusterOf(t *testing.T, cards int, names ...string) ([]*Node, *DRAValidator) {
	t.Helper()
	var profiles []gpu.MIGProfile
	for _, p := range fakegpu.MIGTable("h100-80gb") {
		q := gpu.MIGProfile{ID: p.ID, Name: p.Name, ComputeSlices: p.ComputeSlices, Instances: p.Instances, MemoryBytes: p.MemoryMiB << 20}
		for _, s := range p.Starts {
			q.Placements = append(q.Placements, gpu.MIGPlacement{Start: s, Size: p.MemorySlices})
		}
		profiles = append(profiles, q)
	}
	var nodes []*Node
	bySlice := map[string][]*resourceapi.ResourceSlice{}
	for _, name := range names {
		var gpus []gpu.GPU
		for i := range cards {
			gpus = append(gpus, gpu.GPU{Index: i, UUID: fmt.Sprintf("GPU-%s-%d", name, i), ProductName: "NVIDIA H100 80GB HBM3", MemoryBytes: 80 << 30,
				MIG: &gpu.MIG{Enabled: true, PendingEnabled: true, Profiles: profiles}})
		}
		res, err := resourceslices.DriverResources(gpus, resourceslices.Options{NodeName: name, Sharing: true})
		if err != nil {
			t.Fatal(err)
		}
		slices := resourceslices.ResourceSlices(name, res)
		cards, err := CardsFromSlices(name, slices)
		if err != nil {
			t.Fatal(err)
		}
		n, err := cards.Node(32000, 131072, 0, 0, nil)
		if err != nil {
			t.Fatal(err)
		}
		nodes = append(nodes, n)
		bySlice[name] = slices
	}
	v, err := NewDRAValidator(context.Background(), bySlice)
	if err != nil {
		t.Fatal(err)
	}
	return nodes, v
}

// TestMIGPartitionsPackOntoSplitCards: two nodes of one H100 in MIG mode;
// a 1g, a second 1g, then a 7g. kube-scheduler's stock scoring spreads the
// two 1g over both nodes (least allocated), breaking both cards, and the
// 7g finds no room; best-fit and tangram put the second 1g beside the
// first, on the card already split, and the 7g gets the untouched card.
// The real allocator validates every placement.
func TestMIGPartitionsPackOntoSplitCards(t *testing.T) {
	w := NewWorkload([]Request{{Name: "w", CPUMilli: 1000, MemoryMiB: 1024, MIGProfile: "1g.10gb"}, {Name: "x", CPUMilli: 1000, MemoryMiB: 1024, ShareMilli: 500}})
	for _, tc := range []struct {
		policy string
		want7g bool
	}{{"stock", false}, {"best-fit", true}, {"tangram", true}} {
		t.Run(tc.policy, func(t *testing.T) {
			nodes, v := migTestCluster(t, "a", "b")
			p, err := New(tc.policy, w)
			if err != nil {
				t.Fatal(err)
			}
			s := NewScheduler(nodes, p, v, 1)
			var got []string
			for i, profile := range []string{"1g.10gb", "1g.10gb", "7g.80gb"} {
				r := Request{Name: fmt.Sprintf("r%d", i), CPUMilli: 1000, MemoryMiB: 1024, MIGProfile: profile}
				pl, ok, err := s.Place(context.Background(), r)
				if err != nil {
					t.Fatal(err)
				}
				if ok {
					got = append(got, profile+"@"+pl.Node.Name)
				} else {
					got = append(got, profile+" failed")
				}
			}
			if s.Stats.Refused != 0 || s.Stats.Disagreed != 0 {
				t.Errorf("model and allocator differ: %+v", s.Stats)
			}
			placed7g := got[2] != "7g.80gb failed"
			if placed7g != tc.want7g {
				t.Errorf("placements %v: 7g placed %v, want %v", got, placed7g, tc.want7g)
			}
		})
	}
}

// splitMIG takes a partition of profile on card i of n, as the allocator's
// first fit would, with no CPU or memory: only the card's MIG state tells
// the node from an untouched one.
func splitMIG(t *testing.T, n *Node, i int, profile string) {
	t.Helper()
	r := Request{Name: "split", MIGProfile: profile}
	if !n.cardFits(i, r) {
		t.Fatalf("node %s card %d: no room for %s", n.Name, i, profile)
	}
	n.Commit(r, n.Expect(r, []int{i}))
}

// TestScoreCacheKeepsMIGState: the policies' score cache keys a node's
// state; a split MIG card and an untouched one of the same model, on nodes
// otherwise alike, are different states. Scoring the untouched node first
// used to cache its score under a key the split node shared, and the split
// node then got it too: the preference for packing partitions onto split
// cards was lost after the first score. Both orders, every caching policy.
func TestScoreCacheKeepsMIGState(t *testing.T) {
	w := NewWorkload([]Request{{Name: "w", CPUMilli: 1000, MemoryMiB: 1024, MIGProfile: "1g.10gb"}, {Name: "x", CPUMilli: 1000, MemoryMiB: 1024, ShareMilli: 500}})
	r := Request{Name: "r", CPUMilli: 1000, MemoryMiB: 1024, MIGProfile: "1g.10gb"}
	for _, policy := range []string{"tangram", "fgd", "best-fit"} {
		for _, untouchedFirst := range []bool{true, false} {
			t.Run(fmt.Sprintf("%s/untouched first %v", policy, untouchedFirst), func(t *testing.T) {
				nodes, _ := migTestCluster(t, "split", "untouched")
				splitMIG(t, nodes[0], 0, "1g.10gb")
				p, err := New(policy, w)
				if err != nil {
					t.Fatal(err)
				}
				score := func(n *Node) Choice {
					cands, ok := n.Candidates(r, nil)
					if !ok {
						t.Fatalf("node %s: %s does not fit", n.Name, r.MIGProfile)
					}
					return p.Score(n, r, cands)
				}
				var split, untouched Choice
				if untouchedFirst {
					untouched, split = score(nodes[1]), score(nodes[0])
				} else {
					split, untouched = score(nodes[0]), score(nodes[1])
				}
				if split.Score <= untouched.Score {
					t.Errorf("split node scores %v, untouched %v: want the split card preferred", split.Score, untouched.Score)
				}
			})
		}
	}
	// Two nodes of two cards in the same state (card 1 split): the second
	// is a cache hit, and its card must still be the split one, not the
	// first that fits.
	t.Run("card of a cache hit", func(t *testing.T) {
		nodes, _ := migTestClusterOf(t, 2, "a", "b")
		p, err := New("tangram", w)
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range nodes {
			splitMIG(t, n, 1, "1g.10gb")
			cands, _ := n.Candidates(r, nil)
			if c := p.Score(n, r, cands); len(c.Cards) != 1 || c.Cards[0] != 1 {
				t.Errorf("node %s: cards %v, want [1] (the split card)", n.Name, c.Cards)
			}
		}
	})
	// Two requests differing only in profile are different keys: on a node
	// whose card 0 holds a 4g.40gb, a 1g.10gb packs beside it while a
	// 4g.40gb fits only on the untouched card 1 and must score lower.
	t.Run("profile in the key", func(t *testing.T) {
		nodes, _ := migTestClusterOf(t, 2, "a")
		n := nodes[0]
		splitMIG(t, n, 0, "4g.40gb")
		p, err := New("tangram", w)
		if err != nil {
			t.Fatal(err)
		}
		small, big := r, r
		big.MIGProfile = "4g.40gb"
		cands, _ := n.Candidates(small, nil)
		smallChoice := p.Score(n, small, cands)
		cands, _ = n.Candidates(big, nil)
		bigChoice := p.Score(n, big, cands)
		if len(smallChoice.Cards) != 1 || smallChoice.Cards[0] != 0 || len(bigChoice.Cards) != 1 || bigChoice.Cards[0] != 1 {
			t.Errorf("cards %v (1g.10gb) and %v (4g.40gb), want [0] and [1]", smallChoice.Cards, bigChoice.Cards)
		}
		if bigChoice.Score >= smallChoice.Score {
			t.Errorf("4g.40gb on the untouched card scores %v, 1g.10gb beside the split one %v: want it lower", bigChoice.Score, smallChoice.Score)
		}
	})
}

// TestMIGLayoutIDShared: equal MIG cards of different nodes have one
// layout id, so the score cache serves all of them with one entry per
// state (their counters are numbered in name order, not map order).
func TestMIGLayoutIDShared(t *testing.T) {
	nodes, _ := migTestClusterOf(t, 2, "a", "b", "c", "d")
	want := nodes[0].Cards[0].mig.ID()
	for _, n := range nodes {
		for i := range n.Cards {
			if got := n.Cards[i].mig.ID(); got != want {
				t.Errorf("node %s card %d: layout id %d, want %d", n.Name, i, got, want)
			}
		}
	}
}

// TestRequestFromMIGClaims: a pod's claim of class mig.tangram.dev naming a
// profile (as dra.MIGPartition and the docs write it) is a MIG request of
// that profile, worth its sevenths of a card.
func TestRequestFromMIGClaims(t *testing.T) {
	claim := &resourceapi.ResourceClaim{Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{{
		Name: "mig", Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: "mig.tangram.dev", Count: 1,
			Selectors: []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{Expression: `device.attributes["gpu.tangram.dev"].profile == "3g.40gb"`}}}},
	}}}}}
	r, ok := RequestFromClaims("p", 1000, 1024, []*resourceapi.ResourceClaim{claim}, 80<<30)
	if !ok || r.MIGProfile != "3g.40gb" || r.GPUMilli() != 428 {
		t.Errorf("request %+v (found %v), want a 3g.40gb partition of 428 milli-GPU", r, ok)
	}
}
