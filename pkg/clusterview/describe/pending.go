package describe

import (
	"context"
	"fmt"

	"github.com/tangram-gpu/tangram/pkg/cluster"
	"github.com/tangram-gpu/tangram/pkg/clusterview"
	"github.com/tangram-gpu/tangram/pkg/diagnosis"
)

// ExplainPending fills in why each of the view's first limit pending claims
// waits, with the same diagnosis as `describe claim`. The rest are left for
// describe: each diagnosis runs the allocator over the cluster.
func ExplainPending(ctx context.Context, snap *cluster.Snapshot, v *clusterview.View, limit int) error {
	for i := range v.Pending {
		if i >= limit {
			return nil
		}
		p := &v.Pending[i]
		claim := findClaim(snap, p.Namespace, p.Name)
		if claim == nil {
			continue
		}
		d, err := diagnosis.Claim(ctx, snap, claim)
		if err != nil {
			return fmt.Errorf("diagnosing pending claim %s: %w", p.String(), err)
		}
		p.Why = d.Summary()
	}
	return nil
}
