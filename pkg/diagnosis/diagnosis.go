// Package diagnosis explains, in plain words, why a ResourceClaim (or a gang
// of pods each with one) cannot be allocated. Whether something fits is
// decided by the kube-scheduler's own DRA allocator
// (k8s.io/dynamic-resource-allocation/structured) over the current
// ResourceSlices and allocated claims; the explanation comes from looking
// at each request's matching devices and their free capacity. The kubectl
// plugin and the controller (GpuGang status) share this code.
package diagnosis

import (
	"context"
	"errors"
	"fmt"
	"strings"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/dynamic-resource-allocation/structured"
	"k8s.io/klog/v2"

	"github.com/tangram-gpu/tangram/pkg/cluster"
	"github.com/tangram-gpu/tangram/pkg/dra"
)

// ClaimDiagnosis says whether a claim can be allocated now and, if not, why.
type ClaimDiagnosis struct {
	Claim cluster.ClaimRef `json:"claim"`
	// Allocated is true when the claim already has an allocation; nothing
	// else is filled in then.
	Allocated bool `json:"allocated"`
	// FitsOn lists the nodes where the allocator could allocate the claim
	// right now.
	FitsOn []string `json:"fitsOn"`
	// Reasons explain why it fits nowhere, one sentence per problem, each
	// prefixed with the request it concerns.
	Reasons []string `json:"reasons"`
}

// Summary is one paragraph for people.
func (d *ClaimDiagnosis) Summary() string {
	switch {
	case d.Allocated:
		return "allocated"
	case len(d.FitsOn) > 0:
		return "the claim fits now on " + listFew(d.FitsOn) +
			"; if its pod is still pending, something else rules those nodes out (node selector, taints, CPU/memory) or the scheduler has not retried yet"
	case len(d.Reasons) == 0:
		return "the claim fits on no node"
	}
	return strings.Join(d.Reasons, "; ")
}

// Claim diagnoses one claim against the snapshot. The claim itself is
// ignored among the snapshot's allocated claims. An error means the
// allocator could not run at all (the snapshot is unusable), never that the
// claim does not fit.
func Claim(ctx context.Context, snap *cluster.Snapshot, claim *resourceapi.ResourceClaim) (*ClaimDiagnosis, error) {
	d := &ClaimDiagnosis{
		Claim:   cluster.ClaimRef{Namespace: claim.Namespace, Name: claim.Name, UID: string(claim.UID)},
		FitsOn:  []string{},
		Reasons: []string{},
	}
	if claim.Status.Allocation != nil {
		d.Allocated = true
		return d, nil
	}
	others := withoutClaim(snap, claim)
	inv := cluster.NewInventory(others)
	classes := dra.ClassLister(snap.Classes)

	// Requests that cannot be met even alone make the allocator pointless
	// (and a missing class or bad selector makes it fail outright).
	analyses := make([][]requestAnalysis, 0, len(claim.Spec.Devices.Requests))
	blocked := false
	for _, alts := range flatten(claim) {
		var as []requestAnalysis
		met := false
		for _, r := range alts {
			a := analyse(ctx, inv, classes, claim, r)
			as = append(as, a)
			met = met || a.problem == ""
		}
		analyses = append(analyses, as)
		if !met {
			blocked = true
			d.Reasons = append(d.Reasons, requestProblem(as))
		}
	}
	if len(claim.Spec.Devices.Requests) == 0 {
		d.Reasons = append(d.Reasons, "the claim has no device requests")
		return d, nil
	}
	if blocked {
		return d, nil
	}

	fits, err := fitsOn(ctx, others, claim)
	if err != nil {
		var bad *allocatorError
		if errors.As(err, &bad) {
			d.Reasons = append(d.Reasons, "the allocator rejects the claim: "+bad.Error())
			return d, nil
		}
		return nil, err
	}
	d.FitsOn = fits
	if len(fits) == 0 {
		d.Reasons = append(d.Reasons, togetherProblem(analyses))
	}
	return d, nil
}

// requestProblem joins the problems of a request's alternatives.
func requestProblem(as []requestAnalysis) string {
	if len(as) == 1 {
		return fmt.Sprintf("request %q: %s", as[0].req.name, as[0].problem)
	}
	parts := make([]string, len(as))
	for i, a := range as {
		parts[i] = fmt.Sprintf("%q: %s", a.req.name, a.problem)
	}
	base, _, _ := strings.Cut(as[0].req.name, "/")
	return fmt.Sprintf("request %q: none of its alternatives can be met (%s)", base, strings.Join(parts, "; "))
}

// togetherProblem explains a claim whose requests can each be met alone
// by free capacity, but for which the allocator finds no node.
func togetherProblem(analyses [][]requestAnalysis) string {
	var parts []string
	for _, as := range analyses {
		for _, a := range as {
			if a.problem == "" {
				parts = append(parts, fmt.Sprintf("%q alone fits on %s", a.req.name, listFew(a.fitsOn)))
				break
			}
		}
	}
	if len(analyses) == 1 {
		return "there are enough free devices (" + parts[0] + "), but no set of them satisfies all of the claim's constraints"
	}
	return "each request can be met on its own, but no node can meet all of them together (" + strings.Join(parts, "; ") + ")"
}

// ClaimsTogether lists the nodes where the allocator can allocate all of
// the given (unallocated) claims at once, as the scheduler must for a pod
// that uses several. The claims are ignored among the snapshot's claims.
func ClaimsTogether(ctx context.Context, snap *cluster.Snapshot, claims []*resourceapi.ResourceClaim) ([]string, error) {
	others := snap
	for _, c := range claims {
		others = withoutClaim(others, c)
	}
	alloc, err := others.NewAllocator(ctx, dra.AllocatedState(others.Claims))
	if err != nil {
		return nil, err
	}
	nodes := []string{}
	for _, node := range others.NodeObjects() {
		results, err := alloc.Allocate(ctx, node, claims)
		if err != nil {
			if errors.Is(err, structured.ErrFailedAllocationOnNode) {
				continue
			}
			return nil, fmt.Errorf("allocating %d claims together on node %s: %w", len(claims), node.Name, err)
		}
		if len(results) == len(claims) {
			nodes = append(nodes, node.Name)
		}
	}
	return nodes, nil
}

// allocatorError is a claim the allocator refuses outright (bad input).
type allocatorError struct{ err error }

func (e *allocatorError) Error() string { return e.err.Error() }

// fitsOn runs the allocator for the claim on every node.
func fitsOn(ctx context.Context, snap *cluster.Snapshot, claim *resourceapi.ResourceClaim) ([]string, error) {
	logger := klog.FromContext(ctx)
	alloc, err := snap.NewAllocator(ctx, dra.AllocatedState(snap.Claims))
	if err != nil {
		return nil, err
	}
	nodes := []string{}
	for _, node := range snap.NodeObjects() {
		results, err := alloc.Allocate(klog.NewContext(ctx, klog.LoggerWithValues(logger, "node", node.Name)), node, []*resourceapi.ResourceClaim{claim})
		if err != nil {
			if ctx.Err() != nil {
				return nil, fmt.Errorf("allocating claim %s/%s on node %s: %w", claim.Namespace, claim.Name, node.Name, err)
			}
			if errors.Is(err, structured.ErrFailedAllocationOnNode) {
				continue
			}
			return nil, &allocatorError{err: err}
		}
		if len(results) > 0 {
			nodes = append(nodes, node.Name)
		}
	}
	return nodes, nil
}

// withoutClaim is the snapshot minus the claim being diagnosed (matched by
// UID, else by name), so that a claim never competes with itself.
func withoutClaim(snap *cluster.Snapshot, claim *resourceapi.ResourceClaim) *cluster.Snapshot {
	out := *snap
	out.Claims = nil
	for _, c := range snap.Claims {
		same := c.UID != "" && c.UID == claim.UID
		same = same || (c.UID == "" || claim.UID == "") && c.Namespace == claim.Namespace && c.Name == claim.Name
		if !same {
			out.Claims = append(out.Claims, c)
		}
	}
	return &out
}
