package diagnosis

import (
	"context"
	"reflect"
	"strings"
	"testing"

	resourceapi "k8s.io/api/resource/v1"

	"github.com/tangram-gpu/tangram/pkg/cluster/fixture"
)

func TestGangFeasibility(t *testing.T) {
	// Each member wants 2 whole cards in one NVLink domain.
	member := fixture.Whole("default", "member", 2, true)
	tests := []struct {
		name    string
		cluster *testCluster
		gang    Gang
		fits    bool
		domains []DomainRoom
		message string
		// memberProblem is a prefix of the single-member explanation.
		memberProblem string
	}{
		{
			name: "no room anywhere",
			cluster: newTestCluster().node("a1", "zone-a", false, "x", "x").whole("busy", "a1", "gpu-0").
				node("b1", "zone-b", false, "x", "y"),
			gang: Gang{Members: 2, Claim: member, TopologyKey: zoneKey},
			domains: []DomainRoom{
				{Value: "zone-a", PerNode: map[string]int{}},
				{Value: "zone-b", PerNode: map[string]int{}},
			},
			message: "needs 2 members, each 2 whole cards in one NVLink domain, all with the same example.com/ib-zone: no node has room for even one member" +
				` (request "gpu": count 2 with matchAttribute nvlinkDomain: the largest free NVLink domain has 1 card (a1, b1))`,
			memberProblem: `request "gpu": count 2 with matchAttribute nvlinkDomain: the largest free NVLink domain has 1 card (a1, b1)`,
		},
		{
			name: "room split across zones",
			cluster: newTestCluster().
				node("a1", "zone-a", false, "x", "x").node("a2", "zone-a", false, "x", "x").
				node("b1", "zone-b", false, "x", "x", "y", "y").
				node("c1", "zone-c", false, "x", "x").whole("busy", "c1", "gpu-1"),
			gang: Gang{Members: 3, Claim: member, TopologyKey: zoneKey},
			domains: []DomainRoom{
				{Value: "zone-a", Members: 2, Nodes: 2, PerNode: map[string]int{"a1": 1, "a2": 1}},
				{Value: "zone-b", Members: 2, Nodes: 1, PerNode: map[string]int{"b1": 2}},
				{Value: "zone-c", PerNode: map[string]int{}},
			},
			message: "needs 3 members, each 2 whole cards in one NVLink domain, all with the same example.com/ib-zone: zone-a has room for 2 members (2 nodes), zone-b for 2 (1 node)",
		},
		{
			name: "room in one zone",
			cluster: newTestCluster().
				node("a1", "zone-a", false, "x", "x").node("a2", "zone-a", false, "x", "x", "y", "y").
				node("b1", "zone-b", false, "x", "x").
				node("unlabelled", "", false, "x", "x", "y", "y"),
			gang: Gang{Members: 3, Claim: member, TopologyKey: zoneKey},
			fits: true,
			domains: []DomainRoom{
				{Value: "zone-a", Members: 3, Nodes: 2, PerNode: map[string]int{"a1": 1, "a2": 2}},
				{Value: "zone-b", Members: 1, Nodes: 1, PerNode: map[string]int{"b1": 1}},
			},
			message: "needs 3 members, each 2 whole cards in one NVLink domain, all with the same example.com/ib-zone: zone-a has room for 3 members (2 nodes), zone-b for 1 (1 node)",
		},
		{
			name: "no topology key counts the whole cluster, capped at the gang size",
			cluster: newTestCluster().
				node("a1", "zone-a", false, "x", "x", "x", "x", "x", "x").node("b1", "", false, "x", "x"),
			gang:    Gang{Members: 2, Claim: member},
			fits:    true,
			domains: []DomainRoom{{Value: "", Members: 3, Nodes: 2, PerNode: map[string]int{"a1": 2, "b1": 1}}},
			message: "needs 2 members, each 2 whole cards in one NVLink domain: the cluster has room for 3 members (2 nodes)",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			before := len(tc.cluster.snap.Claims)
			d, err := GangFeasibility(context.Background(), &tc.cluster.snap, tc.gang)
			if err != nil {
				t.Fatal(err)
			}
			if len(tc.cluster.snap.Claims) != before {
				t.Errorf("gang diagnosis changed the snapshot's claims")
			}
			if d.Fits != tc.fits {
				t.Errorf("fits = %v, want %v", d.Fits, tc.fits)
			}
			if !reflect.DeepEqual(d.Domains, tc.domains) {
				t.Errorf("domains\n got: %+v\nwant: %+v", d.Domains, tc.domains)
			}
			if d.Message != tc.message {
				t.Errorf("message\n got: %s\nwant: %s", d.Message, tc.message)
			}
			if tc.memberProblem == "" && len(d.MemberProblem) > 0 {
				t.Errorf("unexpected member problem %q", d.MemberProblem)
			}
			if tc.memberProblem != "" && (len(d.MemberProblem) != 1 || !strings.HasPrefix(d.MemberProblem[0], tc.memberProblem)) {
				t.Errorf("member problem\n got: %q\nwant prefix: %s", d.MemberProblem, tc.memberProblem)
			}
		})
	}
}

func TestGangRejectsEmpty(t *testing.T) {
	c := newTestCluster().node("a1", "", false, "x")
	if _, err := GangFeasibility(context.Background(), &c.snap, Gang{Members: 0, Claim: fixture.Whole("d", "m", 1, false)}); err == nil {
		t.Error("a gang with no members was accepted")
	}
}

func TestDescribeClaimSpec(t *testing.T) {
	tests := []struct {
		claim *resourceapi.ResourceClaim
		want  string
	}{
		{fixture.Whole("d", "c", 1, false), "1 whole card"},
		{fixture.Whole("d", "c", 8, true), "8 whole cards in one NVLink domain"},
		{fixture.Share("d", "c", "20Gi", 40), "a 20 GiB, 40% compute share of a card"},
		{fixture.Share("d", "c", "7680Mi", 0), "a 7.5 GiB share of a card"},
		{fixture.Share("d", "c", "7474Mi", 30), "a 7474 MiB, 30% compute share of a card"},
		{fixture.Share("d", "c", "512Mi", 0), "a 512 MiB share of a card"},
	}
	for _, tc := range tests {
		got := DescribeClaimSpec(tc.claim)
		if got != tc.want {
			t.Errorf("got %q, want %q", got, tc.want)
		}
	}
}
