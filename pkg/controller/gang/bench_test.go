package gang

import (
	"context"
	"strings"
	"testing"

	"github.com/tangram-gpu/tangram/pkg/cluster/fixture"
)

// BenchmarkDiagnose100Nodes is the work a pending gang costs every
// --pending-resync: 100 DGX nodes in 4 zones (each with a 4-card claim and
// ten shares, so 2 free cards: room for one member), a gang of 8 members
// × 2 NVLink cards in one zone.
func BenchmarkDiagnose100Nodes(b *testing.B) {
	c, err := fixture.Large(context.Background(), 100)
	if err != nil {
		b.Fatal(err)
	}
	g := newGang("train", 8, 2, true, fixture.ZoneLabel)
	b.ResetTimer()
	for b.Loop() {
		d, err := Diagnose(context.Background(), &c.Snap, g, Members{})
		if err != nil || !strings.Contains(d, "zone-0 has room for 25 members (25 nodes)") {
			b.Fatalf("%v %s", err, d)
		}
	}
}
