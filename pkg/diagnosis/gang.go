package diagnosis

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/dynamic-resource-allocation/structured"

	"github.com/tangram-gpu/tangram/pkg/cluster"
	"github.com/tangram-gpu/tangram/pkg/device"
	"github.com/tangram-gpu/tangram/pkg/dra"
)

// Gang is an all-or-nothing group of pods, each with its own claim of the
// same shape (a GpuGang's members).
type Gang struct {
	// Members is how many pods must be placed together.
	Members int
	// Claim is one member's claim; its spec is what every member asks for.
	Claim *resourceapi.ResourceClaim
	// TopologyKey, when set, is a node label all members must share (for
	// example an InfiniBand zone); nodes without the label cannot be used.
	TopologyKey string
}

// GangDiagnosis says whether the gang can be placed now and how much room
// each topology domain has.
type GangDiagnosis struct {
	Fits bool `json:"fits"`
	// Domains are the values of the topology label (one domain "" for the
	// whole cluster without a key), most room first.
	Domains []DomainRoom `json:"domains"`
	// Message is the plain-words summary, e.g. "needs 4 members, each 8
	// whole cards in one NVLink domain, all in one zone: zone-a has room for
	// 3 members (3 nodes), zone-b for 1 (1 node)".
	Message string `json:"message"`
	// MemberProblem, when no node can take even one member, explains why
	// with the single-claim diagnosis.
	MemberProblem []string `json:"memberProblem,omitempty"`
}

// DomainRoom is the room one topology domain has for members.
type DomainRoom struct {
	Value string `json:"value"`
	// Members is how many members fit in the domain at once.
	Members int `json:"members"`
	// Nodes counts the nodes that can take at least one member.
	Nodes int `json:"nodes"`
	// PerNode is members per node, for nodes with room.
	PerNode map[string]int `json:"perNode"`
}

// GangFeasibility works out how many members each node can take at once
// (by allocating 1, 2, ... copies of the member claim with the real
// allocator) and sums that per topology domain. Members on one node are
// allowed; a member's claim never spans nodes.
func GangFeasibility(ctx context.Context, snap *cluster.Snapshot, g Gang) (*GangDiagnosis, error) {
	if g.Members <= 0 || g.Claim == nil {
		return nil, fmt.Errorf("diagnosing a gang: it needs at least one member and a member claim (got %d members)", g.Members)
	}
	alloc, err := snap.NewAllocator(ctx, dra.AllocatedState(snap.Claims))
	if err != nil {
		return nil, err
	}
	byDomain := map[string]*DomainRoom{}
	for _, node := range snap.NodeObjects() {
		value := ""
		if g.TopologyKey != "" {
			v, ok := node.Labels[g.TopologyKey]
			if !ok {
				continue
			}
			value = v
		}
		n, err := membersOnNode(ctx, alloc, node, g)
		if err != nil {
			return nil, err
		}
		dr := byDomain[value]
		if dr == nil {
			dr = &DomainRoom{Value: value, PerNode: map[string]int{}}
			byDomain[value] = dr
		}
		if n > 0 {
			dr.Members += n
			dr.Nodes++
			dr.PerNode[node.Name] = n
		}
	}
	d := &GangDiagnosis{Domains: []DomainRoom{}}
	for _, dr := range byDomain {
		d.Domains = append(d.Domains, *dr)
		d.Fits = d.Fits || dr.Members >= g.Members
	}
	sort.Slice(d.Domains, func(i, j int) bool {
		a, b := d.Domains[i], d.Domains[j]
		if a.Members != b.Members {
			return a.Members > b.Members
		}
		return cluster.NaturalLess(a.Value, b.Value)
	})
	d.Message = gangMessage(g, d)
	if !d.Fits && totalMembers(d) == 0 {
		cd, err := Claim(ctx, snap, g.Claim)
		if err != nil {
			return nil, err
		}
		d.MemberProblem = cd.Reasons
		if len(cd.Reasons) > 0 {
			d.Message += " (" + strings.Join(cd.Reasons, "; ") + ")"
		}
	}
	return d, nil
}

// membersOnNode finds how many copies of the member claim the node can
// take at once, up to the gang size. Allocating k copies together is
// all-or-nothing, so the first k that fails ends the search.
func membersOnNode(ctx context.Context, alloc structured.Allocator, node *corev1.Node, g Gang) (int, error) {
	fitted := 0
	for k := 1; k <= g.Members; k++ {
		claims := make([]*resourceapi.ResourceClaim, k)
		for i := range claims {
			c := g.Claim.DeepCopy()
			c.Status = resourceapi.ResourceClaimStatus{}
			c.Name = fmt.Sprintf("%s-member-%d", g.Claim.Name, i)
			c.UID = types.UID(fmt.Sprintf("%s-member-%d", g.Claim.UID, i))
			claims[i] = c
		}
		results, err := alloc.Allocate(ctx, node, claims)
		if err != nil {
			if errors.Is(err, structured.ErrFailedAllocationOnNode) {
				break
			}
			return 0, fmt.Errorf("allocating %d gang members on node %s: %w", k, node.Name, err)
		}
		if len(results) != k {
			break
		}
		fitted = k
	}
	return fitted, nil
}

func totalMembers(d *GangDiagnosis) int {
	n := 0
	for _, dr := range d.Domains {
		n += dr.Members
	}
	return n
}

func gangMessage(g Gang, d *GangDiagnosis) string {
	var b strings.Builder
	fmt.Fprintf(&b, "needs %d %s, each %s", g.Members, plural(g.Members, "member"), DescribeClaimSpec(g.Claim))
	if g.TopologyKey != "" {
		fmt.Fprintf(&b, ", all with the same %s", g.TopologyKey)
	}
	var parts []string
	for i, dr := range d.Domains {
		if dr.Members == 0 {
			continue
		}
		label := dr.Value
		if g.TopologyKey == "" {
			label = "the cluster"
		}
		if i == 0 {
			parts = append(parts, fmt.Sprintf("%s has room for %d %s (%d %s)", label, dr.Members, plural(dr.Members, "member"), dr.Nodes, plural(dr.Nodes, "node")))
		} else {
			parts = append(parts, fmt.Sprintf("%s for %d (%d %s)", label, dr.Members, dr.Nodes, plural(dr.Nodes, "node")))
		}
	}
	switch {
	case len(parts) == 0:
		b.WriteString(": no node has room for even one member")
	default:
		b.WriteString(": " + strings.Join(parts, ", "))
	}
	return b.String()
}

// DescribeClaimSpec says in a few words what a claim asks for: "1 whole
// card", "4 whole cards in one NVLink domain", "a 20 GiB, 40% compute share
// of a card".
func DescribeClaimSpec(claim *resourceapi.ResourceClaim) string {
	var parts []string
	for _, alts := range flatten(claim) {
		r := alts[0]
		parts = append(parts, describeRequest(claim, r))
	}
	return strings.Join(parts, " and ")
}

func describeRequest(claim *resourceapi.ResourceClaim, r exactRequest) string {
	n := r.count()
	var reqs []string
	if r.spec.Capacity != nil {
		for _, name := range []resourceapi.QualifiedName{device.CapacityMemory, device.CapacityCompute} {
			if q, ok := r.spec.Capacity.Requests[name]; ok {
				reqs = append(reqs, quantityText(name, q))
			}
		}
	}
	var s string
	switch {
	case n == 0:
		s = "all matching " + cardWord(r, 2) + " of a node"
	case len(reqs) > 0 && n == 1:
		s = "a " + strings.Join(reqs, ", ") + " share of a " + cardWord(r, 1)
	case len(reqs) > 0:
		s = fmt.Sprintf("%d shares of %s on different %s", n, strings.Join(reqs, ", "), cardWord(r, n))
	default:
		s = fmt.Sprintf("%d whole %s", n, cardWord(r, n))
	}
	if attr := matchAttributeFor(claim, r); attr != "" && n != 1 {
		if short(attr) == device.AttrNVLinkDomain {
			s += " in one NVLink domain"
		} else {
			s += " with the same " + short(attr)
		}
	}
	if len(r.spec.Selectors) > 0 {
		s += " matching the request's selectors"
	}
	return s
}

func plural(n int, word string) string {
	if n == 1 {
		return word
	}
	return word + "s"
}
