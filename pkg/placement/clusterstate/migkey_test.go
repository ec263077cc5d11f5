package clusterstate

import (
	"testing"

	"github.com/tangram-gpu/tangram/pkg/placement"
)

// TestMIGProfileInPolicyAndMemoKeys: two pods that differ only in the MIG
// profile they ask for get policies of their own (the workload includes
// the pod itself), and a node's score memo of one is no answer for the
// other: on a card holding a 4g.40gb a 1g.10gb packs beside it while a
// 4g.40gb must break another card, so the two score differently.
func TestMIGProfileInPolicyAndMemoKeys(t *testing.T) {
	policies := NewPolicyCache("tangram")
	shapes := map[Shape]int{{Whole: 1}: 2}
	small := placement.Request{Name: "p", CPUMilli: 1000, MemoryMiB: 1024, MIGProfile: "1g.10gb"}
	big := small
	big.MIGProfile = "4g.40gb"
	a, err := policies.For(shapes, &small)
	if err != nil {
		t.Fatal(err)
	}
	b, err := policies.For(shapes, &big)
	if err != nil {
		t.Fatal(err)
	}
	if a == b {
		t.Error("a 4g.40gb pod reused the policy built for a 1g.10gb pod")
	}
	memo := scoreMemo{cpu: 1000, memMiB: 1024, mig: small.MIGProfile, score: 42}
	other := memo
	other.mig, other.score = big.MIGProfile, 0
	if memo.sameInputs(other) {
		t.Error("the memo of a 1g.10gb request answers a 4g.40gb one")
	}
}
