package clusterview_test

import (
	"context"
	"strings"
	"testing"

	"github.com/tangram-gpu/tangram/pkg/cluster/fixture"
	"github.com/tangram-gpu/tangram/pkg/clusterview"
)

// TestMIGCards: a card in MIG mode shows as one card whose allocations are
// the partitions claims hold (profile, placement, pods), its compute the
// share of compute slices they take; a card not in MIG mode is unchanged.
func TestMIGCards(t *testing.T) {
	ctx := context.Background()
	c := fixture.New()
	if err := c.AddNode("mig-a", "mig-h100", "", false); err != nil {
		t.Fatal(err)
	}
	for _, claim := range []struct{ name, profile string }{{"small", "1g.10gb"}, {"large", "3g.40gb"}} {
		if _, err := c.Allocate(ctx, fixture.MIG("serve", claim.name, claim.profile), "mig-a"); err != nil {
			t.Fatalf("allocating a %s: %v", claim.profile, err)
		}
	}
	v := clusterview.Build(&c.Snap, clusterview.Options{})
	if len(v.Nodes) != 1 || len(v.Nodes[0].Cards) != 4 {
		t.Fatalf("view %+v, want one node with its 4 cards (2 in MIG mode, each shown once)", v.Nodes)
	}
	card := findCard(t, v, "mig-a", "gpu-0")
	if card.MIG == nil || card.MIG.Offered != 25 || card.MIG.ComputeSlices != 7 || card.MIG.ComputeSlicesUsed != 4 {
		t.Errorf("gpu-0 MIG %+v, want 25 partitions offered, 4 of 7 compute slices used", card.MIG)
	}
	if card.State != clusterview.CardPartial || len(card.Allocations) != 2 || card.UUID == "" || card.ProductName == "" {
		t.Errorf("gpu-0 = %+v, want partial with the two partitions, the card's UUID and product", card)
	}
	var got []string
	for _, a := range card.Allocations {
		if a.MIG == nil || len(a.Pods) != 1 {
			t.Fatalf("allocation %+v lacks its partition or pod", a)
		}
		got = append(got, a.Claim.String()+" "+a.MIG.Profile)
	}
	if strings.Join(got, ",") != "serve/large 3g.40gb,serve/small 1g.10gb" && strings.Join(got, ",") != "serve/small 1g.10gb,serve/large 3g.40gb" {
		t.Errorf("gpu-0 partitions %v, want the 1g.10gb and the 3g.40gb", got)
	}
	if other := findCard(t, v, "mig-a", "gpu-1"); other.MIG == nil || other.State != clusterview.CardFree {
		t.Errorf("gpu-1 = %+v, want a free card in MIG mode", other)
	}
	if whole := findCard(t, v, "mig-a", "gpu-2"); whole.MIG != nil {
		t.Errorf("gpu-2 (not in MIG mode) shown as MIG: %+v", whole.MIG)
	}
	var b strings.Builder
	if err := clusterview.WriteStatus(&b, v, clusterview.Style{}); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"mig 2/25", "serve/small (1g.10gb @", "serve/large (3g.40gb @"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("status text lacks %q:\n%s", want, b.String())
		}
	}
}
