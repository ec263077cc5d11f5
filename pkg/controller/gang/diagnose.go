package gang

import (
	"context"
	"fmt"
	"strings"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	tangramv1 "github.com/tangram-gpu/tangram/api/tangram/v1alpha1"
	"github.com/tangram-gpu/tangram/pkg/cluster"
	"github.com/tangram-gpu/tangram/pkg/diagnosis"
)

// MemberClaim is a stand-in for one member's claim, for the allocator: it
// has the template's spec and a UID no real claim has.
func MemberClaim(g *tangramv1.GpuGang) *resourceapi.ResourceClaim {
	return &resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: g.Namespace,
			Name:      g.Name + "-member",
			UID:       types.UID("gpugang-member-" + string(g.UID)),
		},
		Spec: MemberClaimSpec(g),
	}
}

// Diagnose explains a pending gang in plain words: whether the cluster has
// room for the members still to be placed (with the scheduler's own DRA
// allocator, via pkg/diagnosis) and what else holds them back.
func Diagnose(ctx context.Context, snap *cluster.Snapshot, g *tangramv1.GpuGang, m Members) (string, error) {
	toPlace := int(g.Spec.MinMembers() - m.Placed)
	if toPlace < 1 {
		toPlace = 1
	}
	d, err := diagnosis.GangFeasibility(ctx, snap, diagnosis.Gang{
		Members:     toPlace,
		Claim:       MemberClaim(g),
		TopologyKey: g.Spec.TopologyKey,
	})
	if err != nil {
		return "", fmt.Errorf("diagnosing GpuGang %s/%s: %w", g.Namespace, g.Name, err)
	}
	var parts []string
	if m.Placed > 0 {
		parts = append(parts, fmt.Sprintf("%d of %d members placed", m.Placed, g.Spec.MinMembers()))
	}
	// The message already explains, when nothing fits, why one member
	// alone does not.
	parts = append(parts, d.Message)
	problem := memberCountProblem(g, m)
	switch {
	case problem != "":
		parts = append(parts, problem)
	case d.Fits:
		parts = append(parts, "there is room now, so the scheduler has not retried yet or something besides GPUs (CPU, memory, taints, node selectors) rules nodes out")
	}
	return strings.Join(parts, "; "), nil
}
