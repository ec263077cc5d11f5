package diagnosis

import (
	"context"
	"testing"

	"github.com/tangram-gpu/tangram/pkg/cluster/fixture"
)

// The cluster: 100 DGX nodes, each with a 4-GPU NVLink claim and ten 7Gi
// shares, which the allocator spreads over two cards: 2 cards per node
// stay entirely free.

// BenchmarkClaimPending diagnoses a claim for 8 NVLink-connected cards,
// which fits nowhere.
func BenchmarkClaimPending(b *testing.B) {
	c, err := fixture.Large(context.Background(), 100)
	if err != nil {
		b.Fatal(err)
	}
	claim := fixture.Whole("ml", "wide", 8, true)
	b.ResetTimer()
	for b.Loop() {
		d, err := Claim(context.Background(), &c.Snap, claim)
		if err != nil || len(d.Reasons) != 1 {
			b.Fatalf("%v %+v", err, d)
		}
	}
}

// BenchmarkClaimFits diagnoses a claim that fits: the allocator runs on
// every node.
func BenchmarkClaimFits(b *testing.B) {
	c, err := fixture.Large(context.Background(), 100)
	if err != nil {
		b.Fatal(err)
	}
	claim := fixture.Whole("ml", "two", 2, true)
	b.ResetTimer()
	for b.Loop() {
		d, err := Claim(context.Background(), &c.Snap, claim)
		if err != nil || len(d.FitsOn) != 100 {
			b.Fatalf("%v %+v", err, d)
		}
	}
}

// BenchmarkGang8x2 works out room for 8 members of 2 NVLink cards in one
// zone (each node takes 1).
func BenchmarkGang8x2(b *testing.B) {
	c, err := fixture.Large(context.Background(), 100)
	if err != nil {
		b.Fatal(err)
	}
	g := Gang{Members: 8, Claim: fixture.Whole("ml", "member", 2, true), TopologyKey: fixture.ZoneLabel}
	b.ResetTimer()
	for b.Loop() {
		d, err := GangFeasibility(context.Background(), &c.Snap, g)
		if err != nil || !d.Fits {
			b.Fatalf("%v %+v", err, d)
		}
	}
}
