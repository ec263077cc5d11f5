package placement

import (
	"context"
	"slices"
	"testing"
)

// bestNode scores every node that fits r and returns the best one's name
// and cards; ties are reported as "tie".
func bestNode(t *testing.T, p Policy, nodes []*Node, r Request) (string, []int) {
	t.Helper()
	bestName, bestScore := "", 0.0
	var bestCards []int
	for _, n := range nodes {
		cands, ok := n.Candidates(r, nil)
		if !ok {
			continue
		}
		c := p.Score(n, r, cands)
		switch {
		case bestName == "" || c.Score > bestScore:
			bestName, bestScore, bestCards = n.Name, c.Score, slices.Clone(c.Cards)
		case c.Score == bestScore:
			bestName = "tie"
		}
	}
	return bestName, bestCards
}

func TestPoliciesOnSmallClusters(t *testing.T) {
	// Workload: half 500-milli shares, half whole cards, 2 CPUs each.
	halfAndHalf := NewWorkload([]Request{share("s", 2000, 500), whole("w", 2000, 1)})

	// Scenario "half-used": node a has gpu-1 half used and more CPU in use;
	// node b is empty.
	halfUsed := func(t *testing.T) []*Node {
		nodes, v := testCluster(t,
			testNodeSpec{name: "a", cpuMilli: 32000, memMiB: 65536, model: "T4", cards: 2},
			testNodeSpec{name: "b", cpuMilli: 32000, memMiB: 65536, model: "T4", cards: 2})
		place(t, v, nodes[0], share("old", 16000, 500), 1)
		return nodes
	}
	// Scenario "levels": node a cards free 1000/700/300, node b free 1000/1000/400.
	levels := func(t *testing.T) []*Node {
		nodes, v := testCluster(t,
			testNodeSpec{name: "a", cpuMilli: 32000, memMiB: 65536, model: "T4", cards: 3},
			testNodeSpec{name: "b", cpuMilli: 32000, memMiB: 65536, model: "T4", cards: 3})
		place(t, v, nodes[0], share("a1", 1000, 300), 1)
		place(t, v, nodes[0], share("a2", 1000, 700), 2)
		place(t, v, nodes[1], share("b2", 1000, 600), 2)
		return nodes
	}
	// Scenario "cpu-poor": both nodes have two free cards; a has little CPU left.
	cpuPoor := func(t *testing.T) []*Node {
		nodes, _ := testCluster(t,
			testNodeSpec{name: "a", cpuMilli: 6000, memMiB: 65536, model: "T4", cards: 2},
			testNodeSpec{name: "b", cpuMilli: 100000, memMiB: 65536, model: "T4", cards: 2})
		return nodes
	}
	cpuWorkload := NewWorkload([]Request{whole("w", 2000, 1), {Name: "cpu", CPUMilli: 4000, MemoryMiB: 1024}})
	// Workload: three 100-milli shares for each 700 share.
	smallAndLarge := NewWorkload([]Request{share("s1", 1000, 100), share("s2", 1000, 100), share("s3", 1000, 100), share("l", 1000, 700)})
	// Scenario "nearly equal": node a has one fresh card, node b one card
	// with 650 free.
	nearlyEqual := func(t *testing.T) []*Node {
		nodes, v := testCluster(t,
			testNodeSpec{name: "a", cpuMilli: 32000, memMiB: 65536, model: "T4", cards: 1},
			testNodeSpec{name: "b", cpuMilli: 32000, memMiB: 65536, model: "T4", cards: 1})
		place(t, v, nodes[1], share("old", 1000, 350), 0)
		return nodes
	}
	// Scenario "two cards": one node, gpu-0 fresh, gpu-1 with 650 free.
	twoCards := func(t *testing.T) []*Node {
		nodes, v := testCluster(t, testNodeSpec{name: "a", cpuMilli: 32000, memMiB: 65536, model: "T4", cards: 2})
		place(t, v, nodes[0], share("old", 1000, 350), 1)
		return nodes
	}

	// Scenario "second share" (the e2e packing test and the demo): two
	// identical nodes with two 80Gi cards; a has one 20Gi share (250 milli)
	// on gpu-0, b is empty. The workload is what the scheduler plugin
	// samples: the allocated claim (no CPU or memory known) and the pod.
	secondShare := func(t *testing.T) []*Node {
		nodes, v := testCluster(t,
			testNodeSpec{name: "a", cpuMilli: 32000, memMiB: 131072, model: "A100", cards: 2, cardMemory: 80 << 30},
			testNodeSpec{name: "b", cpuMilli: 32000, memMiB: 131072, model: "A100", cards: 2, cardMemory: 80 << 30})
		place(t, v, nodes[0], share("running", 4000, 250), 0)
		return nodes
	}
	shares20Gi := NewWorkload([]Request{{Name: "running", ShareMilli: 250}, share("incoming", 4000, 250)})

	tests := []struct {
		name      string
		policy    Policy
		cluster   func(*testing.T) []*Node
		request   Request
		wantNode  string
		wantCards []int
	}{
		// Stock spreads by CPU: b is emptier; the allocator's first fit is gpu-0.
		{"stock spreads", Stock{}, halfUsed, share("new", 2000, 500), "b", []int{0}},
		// MostAllocated packs by CPU and devices in use: a; first fit gpu-0
		// is free, so stock DRA leaves gpu-1's half unused.
		{"most-allocated packs, first fit", MostAllocated{}, halfUsed, share("new", 2000, 500), "a", []int{0}},
		// Best-fit: a ends with 500 free, b with 1500; card gpu-1 (500 free).
		{"best-fit", BestFit{}, halfUsed, share("new", 2000, 500), "a", []int{1}},
		// FGD: a/gpu-1 completes a card (fragmentation 250 -> 0); anything
		// else breaks a whole card (+250).
		{"fgd completes the half card", &FGD{Workload: halfAndHalf}, halfUsed, share("new", 2000, 500), "a", []int{1}},
		{"tangram completes the half card", NewTangram(halfAndHalf), halfUsed, share("new", 2000, 500), "a", []int{1}},
		// A 300 share: best-fit takes the tightest card (a/gpu-2, 300 free).
		{"best-fit tightest card", BestFit{}, levels, share("new", 1000, 300), "a", []int{2}},
		// FGD: a/gpu-2 (300 -> 0) and b/gpu-2 (400 -> 100) both lower the
		// fragmentation by 300 (share type: the small card stops counting;
		// whole type: the partial free shrinks by 300): a tie. Tangram's
		// residue lookahead also sees -300 on both, and packing breaks the
		// tie towards a, which keeps less free GPU.
		{"fgd tie on tightest cards", &FGD{Workload: halfAndHalf}, levels, share("new", 1000, 300), "tie", nil},
		{"tangram packs the tie", NewTangram(halfAndHalf), levels, share("new", 1000, 300), "a", []int{2}},
		// Whole card: on a (one fully free card) the 700+300 partial free
		// becomes unusable for whole cards but was already counted; on b one
		// fully free card stays. Both leave FGD's fragmentation unchanged
		// (650 and 400): a tie, which tangram's packing breaks towards a.
		{"fgd whole card tie", &FGD{Workload: halfAndHalf}, levels, whole("new", 1000, 1), "tie", nil},
		{"tangram whole card", NewTangram(halfAndHalf), levels, whole("new", 1000, 1), "a", []int{0}},
		// A CPU-only task: FGD sees no change in fragmentation on either
		// node (a tie); tangram sees that on a the 2 free cards could no
		// longer be fed with CPU, and takes b.
		{"fgd blind to stranding", &FGD{Workload: cpuWorkload}, cpuPoor, Request{Name: "cpu", CPUMilli: 4000, MemoryMiB: 1024}, "tie", nil},
		{"tangram avoids stranding", NewTangram(cpuWorkload), cpuPoor, Request{Name: "cpu", CPUMilli: 4000, MemoryMiB: 1024}, "b", nil},
		// A 100 share: on a the fresh card keeps 900 free, which every type
		// fits (drop 0, score 50). On b, 650 -> 550 free shrinks what the
		// 700 type (weight 1/4) cannot use by 100: drop 25, sigmoid 0.506,
		// also 50. FGD's integer score ties them; tangram sees the drop.
		{"fgd integer score ties small drops", &FGD{Workload: smallAndLarge}, nearlyEqual, share("new", 1000, 100), "tie", nil},
		{"tangram separates small drops", NewTangram(smallAndLarge), nearlyEqual, share("new", 1000, 100), "b", []int{0}},
		// The same inside one node: both cards score 50, FGD keeps the
		// first card in device order.
		{"fgd first card among equal scores", &FGD{Workload: smallAndLarge}, twoCards, share("new", 1000, 100), "a", []int{0}},
		// A second 20Gi share: every card keeps a multiple of 250 free, which
		// the only share type fills exactly, so fragmentation, residue and
		// stranding (8 CPUs per 1000 milli; 24 or 28 CPUs stay) do not change
		// anywhere: the gradients are equal (0). FGD ties the nodes (score
		// 50); tangram's packing must prefer a (500 milli left against 750),
		// and inside a the card that already holds the share (750 -> 500)
		// over the fresh one.
		{"fgd ties the second 20Gi share", &FGD{Workload: shares20Gi}, secondShare, share("incoming", 4000, 250), "tie", nil},
		{"tangram packs the second 20Gi share", NewTangram(shares20Gi), secondShare, share("incoming", 4000, 250), "a", []int{0}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			gotNode, gotCards := bestNode(t, tc.policy, tc.cluster(t), tc.request)
			if gotNode != tc.wantNode {
				t.Errorf("node = %s, want %s", gotNode, tc.wantNode)
			}
			if tc.wantNode != "tie" && !slices.Equal(gotCards, tc.wantCards) {
				t.Errorf("cards = %v, want %v", gotCards, tc.wantCards)
			}
		})
	}
}

func TestFGDScore(t *testing.T) {
	// floor(100 * sigmoid(drop/1000)): 50 for drops in [0, 40), 49 just
	// below 0; sigmoid(0.25) = 0.562, sigmoid(-0.25) = 0.438, sigmoid(1) =
	// 0.731, sigmoid(-6) = 0.0025.
	for _, tc := range []struct {
		drop float64
		want float64
	}{{0, 50}, {25, 50}, {39, 50}, {41, 51}, {-1, 49}, {250, 56}, {-250, 43}, {1000, 73}, {-6000, 0}} {
		if got := fgdScore(tc.drop); got != tc.want {
			t.Errorf("fgdScore(%v) = %v, want %v", tc.drop, got, tc.want)
		}
	}
}

func TestTypicalPods(t *testing.T) {
	withMem := func(r Request, mem int64) Request { r.MemoryMiB = mem; return r }
	var sample []Request
	for range 6 {
		sample = append(sample, share("s", 2000, 500))
	}
	// Same CPU and GPU, other memory: the same type.
	sample = append(sample, withMem(share("s", 2000, 500), 4096), withMem(share("s", 2000, 500), 8192))
	sample = append(sample, whole("w", 2000, 1), Request{Name: "cpu", CPUMilli: 4000, MemoryMiB: 1024})
	w := NewWorkload(sample)
	type typ struct {
		cpu    int64
		gpu    bool
		weight float64
	}
	for _, tc := range []struct {
		coverage float64
		want     []typ
	}{
		// Everything: 8, 1 and 1 of 10.
		{1, []typ{{2000, true, 0.8}, {4000, false, 0.1}, {2000, true, 0.1}}},
		// The share type alone covers 80%.
		{0.8, []typ{{2000, true, 1}}},
		// 85% needs a second type; of the two singletons the one with more
		// CPU comes first. Weights renormalised over the 9 tasks kept.
		{0.85, []typ{{2000, true, 8.0 / 9}, {4000, false, 1.0 / 9}}},
	} {
		// NewWorkload numbers shapes as they first appear: 0 the share, 1
		// the whole card.
		got := typicalPods(sample, once, tc.coverage, func(r Request) int {
			switch {
			case r.ShareMilli > 0:
				return 0
			case r.WholeCards > 0:
				return 1
			}
			return -1
		}, w.shapes)
		var gotT []typ
		for _, p := range got {
			gotT = append(gotT, typ{p.cpu, p.shape >= 0, p.weight})
		}
		if !slices.EqualFunc(gotT, tc.want, func(a, b typ) bool {
			return a.cpu == b.cpu && a.gpu == b.gpu && abs(a.weight-b.weight) < 1e-9
		}) {
			t.Errorf("coverage %v: types %+v, want %+v", tc.coverage, gotT, tc.want)
		}
	}
}

func TestNewPolicy(t *testing.T) {
	w := NewWorkload([]Request{share("s", 1, 100)})
	for _, name := range PolicyNames {
		p, err := New(name, w)
		if err != nil {
			t.Fatalf("New(%s): %v", name, err)
		}
		if p.Name() != name {
			t.Errorf("New(%s).Name() = %s", name, p.Name())
		}
	}
	if _, err := New("random", w); err == nil {
		t.Error("unknown policy: want an error")
	}
	if _, err := New("fgd", nil); err == nil {
		t.Error("fgd without workload: want an error")
	}
}

func TestSchedulerUsesAllocatorFirstFitWhenNotPinned(t *testing.T) {
	nodes, v := testCluster(t, testNodeSpec{name: "a", cpuMilli: 32000, memMiB: 65536, model: "T4", cards: 3})
	place(t, v, nodes[0], whole("w", 1000, 1), 0)
	s := NewScheduler(nodes, Stock{}, v, 1)
	// gpu-0 is taken whole: the allocator's first fit for a share is gpu-1,
	// then the next share still fits gpu-1.
	for i, want := range []int{1, 1, 2} {
		p, ok, err := s.Place(context.Background(), share("s", 1000, 400))
		if err != nil || !ok {
			t.Fatalf("share %d: ok=%v err=%v", i, ok, err)
		}
		if !slices.Equal(p.Cards, []int{want}) {
			t.Errorf("share %d went to %v, want [%d]", i, p.Cards, want)
		}
	}
	if s.Stats.Refused != 0 || s.Stats.Disagreed != 0 {
		t.Errorf("model and allocator differ: %+v", s.Stats)
	}
}
