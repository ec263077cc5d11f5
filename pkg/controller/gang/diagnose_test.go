package gang

import (
	"context"
	"testing"

	"github.com/tangram-gpu/tangram/pkg/cluster/fixture"
)

// The example: 3 members × 2 NVLink-connected GPUs, in one zone.
func TestDiagnose(t *testing.T) {
	gang := newGang("train", 3, 2, true, zone)
	addNodes := func(t *testing.T, nodes ...[3]string) *fixture.Cluster {
		t.Helper()
		c := fixture.New()
		for _, n := range nodes {
			if err := c.AddNode(n[0], n[1], n[2], false); err != nil {
				t.Fatal(err)
			}
		}
		return c
	}
	tests := []struct {
		name    string
		cluster func(t *testing.T) *fixture.Cluster
		want    string
	}{
		{
			name: "no room: L4 cards have no NVLink",
			cluster: func(t *testing.T) *fixture.Cluster {
				return addNodes(t, [3]string{"l4-1", "pcie-l4", "zone-a"}, [3]string{"l4-2", "pcie-l4", "zone-b"})
			},
			want: "needs 3 members, each 2 whole cards in one NVLink domain, all with the same topology.kubernetes.io/zone: no node has room for even one member " +
				`(request "gpus": count 2 with matchAttribute nvlinkDomain: the largest free NVLink domain has 1 card (l4-1, l4-2)); ` +
				"only 0 of the 3 member pods the gang needs exist (" + podsHint(gang) + ")",
		},
		{
			name: "room split across zones",
			cluster: func(t *testing.T) *fixture.Cluster {
				c := addNodes(t, [3]string{"a-1", "pcie-a100-pairs", "zone-a"}, [3]string{"b-1", "pcie-a100-pairs", "zone-b"})
				// Leave one free NVLink pair on a-1 and two on b-1.
				for i, node := range []string{"a-1", "a-1", "a-1", "b-1", "b-1"} {
					if _, err := c.Allocate(context.Background(), fixture.Whole("other", "busy-"+string(rune('a'+i)), 2, true), node); err != nil {
						t.Fatal(err)
					}
				}
				return c
			},
			want: "needs 3 members, each 2 whole cards in one NVLink domain, all with the same topology.kubernetes.io/zone: " +
				"zone-b has room for 2 members (1 node), zone-a for 1 (1 node); " +
				"only 0 of the 3 member pods the gang needs exist (" + podsHint(gang) + ")",
		},
		{
			name: "room in one zone",
			cluster: func(t *testing.T) *fixture.Cluster {
				return addNodes(t, [3]string{"a-1", "pcie-a100-pairs", "zone-a"}, [3]string{"b-1", "pcie-l4", "zone-b"})
			},
			want: "needs 3 members, each 2 whole cards in one NVLink domain, all with the same topology.kubernetes.io/zone: " +
				"zone-a has room for 3 members (1 node); " +
				"only 0 of the 3 member pods the gang needs exist (" + podsHint(gang) + ")",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := tc.cluster(t)
			got, err := Diagnose(context.Background(), &c.Snap, gang, Members{})
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Errorf("diagnosis\n got: %s\nwant: %s", got, tc.want)
			}
		})
	}
}
