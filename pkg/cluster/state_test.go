package cluster_test

import (
	"context"
	"testing"

	"github.com/tangram-gpu/tangram/pkg/cluster"
	"github.com/tangram-gpu/tangram/pkg/cluster/fixture"
)

// TestDeviceUse: the typed use of each card after allocations of every
// kind, and the pending claims.
func TestDeviceUse(t *testing.T) {
	ctx := context.Background()
	c := fixture.New()
	if err := c.AddNode("shared", "pcie-l4", "", true); err != nil {
		t.Fatal(err)
	}
	if err := c.AddNode("whole", "pcie-l4", "", false); err != nil {
		t.Fatal(err)
	}
	allocate := func(node string, claims ...any) {
		t.Helper()
		for _, claim := range claims {
			var err error
			switch cl := claim.(type) {
			case string:
				_, err = c.Allocate(ctx, fixture.Share("ns", cl, "8Gi", 0), node)
			default:
				_, err = c.Allocate(ctx, fixture.Whole("ns", "w-"+node, 1, false), node)
			}
			if err != nil {
				t.Fatal(err)
			}
		}
	}
	// shared: gpu-0 whole (a claim naming no memory); the allocator packs
	// three 8Gi shares onto gpu-1 (all of a 24Gi L4) and the fourth onto
	// gpu-2; gpu-3 stays free.
	allocate("shared", 0, "s1", "s2", "s3", "s4")
	// whole: gpu-0 taken on a node that does not share.
	allocate("whole", 0)
	c.Pending(fixture.Share("ns", "waiting", "4Gi", 0))

	want := map[string]cluster.Use{
		"shared/gpu-0": cluster.Full, "shared/gpu-1": cluster.Full, "shared/gpu-2": cluster.Partial, "shared/gpu-3": cluster.Free,
		"whole/gpu-0": cluster.Full, "whole/gpu-1": cluster.Free,
	}
	inv := cluster.NewInventory(&c.Snap)
	for _, ds := range inv.Devices {
		key := ds.Node + "/" + ds.Device.Name
		w, ok := want[key]
		if !ok {
			continue
		}
		if got := ds.Use(); got != w {
			t.Errorf("%s: Use() = %s, want %s (allocations %d)", key, got, w, len(ds.Allocations))
		}
	}
	pending := cluster.PendingClaims(&c.Snap)
	if len(pending) != 1 || pending[0].Name != "waiting" {
		t.Errorf("PendingClaims = %v, want only ns/waiting", pending)
	}
}
