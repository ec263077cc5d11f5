package placement

import (
	"math"
	"reflect"
	"strings"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
)

func TestShareOn(t *testing.T) {
	nodes, _ := testCluster(t, testNodeSpec{name: "a", cpuMilli: 1000, memMiB: 1024, model: "T4", cards: 1})
	c := &nodes[0].Cards[0]
	tests := []struct {
		milli       int64
		wantCompute int64
		wantMemMiB  int64
	}{
		// 16Gi * 0.46 = 7536.64Mi, rounded down to the 256Mi step.
		{460, 46, 7424},
		{500, 50, 8192},
		// 0.01 of 16Gi is below the 256Mi minimum.
		{10, 1, 256},
		{125, 13, 2048},
	}
	for _, tc := range tests {
		s := ShareOn(c, tc.milli)
		if s.Compute != tc.wantCompute || s.Memory != tc.wantMemMiB<<20 {
			t.Errorf("ShareOn(%d) = %d%%, %dMi; want %d%%, %dMi", tc.milli, s.Compute, s.Memory>>20, tc.wantCompute, tc.wantMemMiB)
		}
	}
}

func TestModelTracksShares(t *testing.T) {
	nodes, v := testCluster(t, testNodeSpec{name: "a", cpuMilli: 8000, memMiB: 8192, model: "T4", cards: 2})
	n := nodes[0]
	place(t, v, n, share("s1", 1000, 460), 0)
	place(t, v, n, share("s2", 1000, 470), 0)
	place(t, v, n, whole("w", 1000, 1), 1)
	if got := n.Cards[0].FreeMilli(); got != 70 {
		t.Errorf("card 0 free = %d milli, want 70", got)
	}
	if got := n.Cards[1].FreeMilli(); got != 0 {
		t.Errorf("card 1 free = %d milli, want 0 (taken whole)", got)
	}
	if got := n.AllocatedMilli(); got != 1930 {
		t.Errorf("allocated = %d milli, want 1930", got)
	}
	if got := n.FreeCPUMilli(); got != 5000 {
		t.Errorf("free cpu = %d, want 5000", got)
	}
	// 80 milli fits no card (70 left on gpu-0); 60 does.
	if _, ok := n.Candidates(share("s3", 1000, 80), nil); ok {
		t.Error("an 80-milli share fits, want not")
	}
	if cands, ok := n.Candidates(share("s3", 1000, 60), nil); !ok || len(cands) != 1 || cands[0] != 0 {
		t.Errorf("a 60-milli share fits %v (ok=%v), want [0]", cands, ok)
	}
	// The allocator agrees that 80 does not fit even when pinned to gpu-0.
	consumed, err := v.Allocate(t.Context(), n, share("s3", 1000, 80), []int{0}, true)
	if err != nil || consumed != nil {
		t.Errorf("allocator placed an 80-milli share on a card with 70 free: %v, %v", consumed, err)
	}
	// CPU is a node resource: 6 CPUs do not fit the 5 left.
	if _, ok := n.Candidates(Request{Name: "big", CPUMilli: 6000}, nil); ok {
		t.Error("6 CPUs fit 5 free")
	}
}

func TestModelsRestrictCards(t *testing.T) {
	nodes, v := testCluster(t,
		testNodeSpec{name: "t4", cpuMilli: 8000, memMiB: 8192, model: "T4", cards: 1},
		testNodeSpec{name: "v100", cpuMilli: 8000, memMiB: 8192, model: "V100M16", cards: 1})
	r := Request{Name: "spec", CPUMilli: 1000, WholeCards: 1, Models: []string{"V100M16", "V100M32"}}
	if _, ok := nodes[0].Candidates(r, nil); ok {
		t.Error("a V100-only request fits a T4 node")
	}
	if _, ok := nodes[1].Candidates(r, nil); !ok {
		t.Fatal("a V100-only request does not fit a V100M16 node")
	}
	// The allocator, given the productName selector, refuses the T4.
	if consumed, err := v.Allocate(t.Context(), nodes[0], r, []int{0}, false); err != nil || consumed != nil {
		t.Errorf("allocator placed a V100-only claim on a T4: %v, %v", consumed, err)
	}
	place(t, v, nodes[1], r, 0)
}

func TestClaim(t *testing.T) {
	nodes, _ := testCluster(t, testNodeSpec{name: "a", cpuMilli: 8000, memMiB: 8192, model: "T4", cards: 4})
	n := nodes[0]
	tests := []struct {
		name      string
		r         Request
		cards     []int
		pin       bool
		wantClass string
		wantCount int64
		wantCEL   []string
		wantErr   string
	}{
		{name: "pinned share", r: share("s", 1, 500), cards: []int{2}, pin: true, wantClass: "shared-gpu.tangram.dev", wantCount: 1,
			wantCEL: []string{`device.attributes["gpu.tangram.dev"].index in [2]`}},
		{name: "whole cards, unpinned, with models", r: Request{Name: "w", WholeCards: 2, Models: []string{"T4"}}, cards: []int{0, 1},
			wantClass: "gpu.tangram.dev", wantCount: 2, wantCEL: []string{`device.attributes["gpu.tangram.dev"].productName in ["T4"]`}},
		{name: "no GPU", r: Request{Name: "cpu"}, wantErr: "asks for no GPU"},
		{name: "wrong card count", r: whole("w", 1, 2), cards: []int{0}, wantErr: "1 cards chosen for 2 wanted"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			claim, err := Claim(n, tc.r, tc.cards, tc.pin)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			req := claim.Spec.Devices.Requests[0].Exactly
			if req.DeviceClassName != tc.wantClass || req.Count != tc.wantCount || req.AllocationMode != resourceapi.DeviceAllocationModeExactCount {
				t.Errorf("request = %s count %d mode %s", req.DeviceClassName, req.Count, req.AllocationMode)
			}
			var cel []string
			for _, s := range req.Selectors {
				cel = append(cel, s.CEL.Expression)
			}
			if strings.Join(cel, ";") != strings.Join(tc.wantCEL, ";") {
				t.Errorf("selectors = %q, want %q", cel, tc.wantCEL)
			}
			if tc.r.ShareMilli > 0 {
				mem := req.Capacity.Requests["memory"]
				compute := req.Capacity.Requests["compute"]
				if mem.Value() != 8<<30 || compute.Value() != 50 {
					t.Errorf("capacity requests = %s memory, %s compute; want 8Gi, 50", mem.String(), compute.String())
				}
			}
		})
	}
}

func TestResidueTable(t *testing.T) {
	// Only 500-milli shares: every offer fits if 500 is free. A card with
	// 1000 or 500 free fills exactly; 300 free stays unused; 800 free takes
	// one share and keeps 300.
	v := residueTable([]Request{share("s", 1, 500)}, once)
	for free, want := range map[int]float64{100: 0, 50: 0, 30: 300, 80: 300, 0: 0} {
		if v[free] != want {
			t.Errorf("only 500s: residue at %d milli free = %v, want %v", free*10, v[free], want)
		}
	}
	// One 200 share among four GPU tasks (the others ask two whole cards,
	// which never fit one card): a card with 200 free is filled only if one
	// of its residueHorizon offers is the 200, so 200*0.75^horizon stays
	// unused on average; 100 free never fills. An unbounded lookahead would
	// call the 200 level filled.
	rare := []Request{share("s", 1, 200), whole("w1", 1, 2), whole("w2", 1, 2), whole("w3", 1, 2)}
	v = residueTable(rare, once)
	want := 200 * math.Pow(0.75, residueHorizon)
	if math.Abs(v[20]-want) > 1e-9 {
		t.Errorf("rare 200s: residue at 200 free = %v, want %v", v[20], want)
	}
	if v[10] != 100 {
		t.Errorf("rare 200s: residue at 100 free = %v, want 100", v[10])
	}
	// The same level is as good as filled when its task is common: with 200
	// and 800 shares equally likely, half the offers fit 200 free.
	common := residueTable([]Request{share("a", 1, 200), share("b", 1, 800)}, once)
	if want := 200 * math.Pow(0.5, residueHorizon); math.Abs(common[20]-want) > 1e-12 {
		t.Errorf("common 200s: residue at 200 free = %v, want %v", common[20], want)
	}
}

// TestWeightedWorkloadEqualsExpanded: a histogram of the sample gives the
// same Workload as the sample itself (the scheduler plugin relies on it to
// build the workload without expanding its histogram).
func TestWeightedWorkloadEqualsExpanded(t *testing.T) {
	for _, tc := range []struct {
		name   string
		sample []Request
		counts []int
	}{
		{"shares and whole cards", []Request{share("a", 0, 250), whole("b", 0, 1), share("c", 4000, 500), whole("d", 0, 8)}, []int{7, 3, 1, 2}},
		{"CPU-only next to GPU", []Request{{Name: "cpu", CPUMilli: 2000, MemoryMiB: 512}, share("s", 1000, 100)}, []int{4, 9}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var expanded []Request
			for i, r := range tc.sample {
				for range tc.counts[i] {
					expanded = append(expanded, r)
				}
			}
			got, want := NewWeightedWorkload(tc.sample, tc.counts), NewWorkload(expanded)
			if !reflect.DeepEqual(got, want) {
				t.Errorf("weighted workload differs from the expanded one:\n got %+v\nwant %+v", got, want)
			}
			if reflect.DeepEqual(got, NewWorkload(tc.sample)) {
				t.Error("the counts made no difference; the case does not test them")
			}
		})
	}
}
