package resourceslices

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/klog/v2/ktesting"

	"github.com/tangram-gpu/tangram/pkg/gpu"
)

func TestNVLinkDomains(t *testing.T) {
	const clique = "6f1a2c3e-0000-4000-8000-000000000001/7"
	tests := []struct {
		name string
		node string
		gpus []gpu.GPU
		want map[int]string
	}{
		{
			name: "no NVLink: every card its own domain",
			node: "n1",
			gpus: []gpu.GPU{{Index: 0}, {Index: 1}},
			want: map[int]string{0: "n1-nvl0", 1: "n1-nvl1"},
		},
		{
			name: "links reported on one side only still join the cards",
			node: "n1",
			gpus: []gpu.GPU{{Index: 0, NVLinkPeers: []int{1}}, {Index: 1}, {Index: 2}},
			want: map[int]string{0: "n1-nvl0", 1: "n1-nvl0", 2: "n1-nvl2"},
		},
		{
			name: "a chain is one domain named after its smallest index",
			node: "n1",
			gpus: []gpu.GPU{{Index: 1}, {Index: 2, NVLinkPeers: []int{3}}, {Index: 3, NVLinkPeers: []int{4}}, {Index: 4}},
			want: map[int]string{1: "n1-nvl1", 2: "n1-nvl2", 3: "n1-nvl2", 4: "n1-nvl2"},
		},
		{
			name: "a peer that is not listed connects nothing",
			node: "n1",
			gpus: []gpu.GPU{{Index: 0, NVLinkPeers: []int{5}}, {Index: 1, NVLinkPeers: []int{5}}},
			want: map[int]string{0: "n1-nvl0", 1: "n1-nvl1"},
		},
		{
			name: "fabric clique ID names the domain and joins cards without local links",
			node: "n1",
			gpus: []gpu.GPU{
				{Index: 0, FabricCliqueID: clique, NVLinkPeers: []int{1}},
				{Index: 1, NVLinkPeers: []int{0}},
				{Index: 2, FabricCliqueID: clique},
				{Index: 3},
			},
			want: map[int]string{0: clique, 1: clique, 2: clique, 3: "n1-nvl3"},
		},
		{
			name: "linked cards in different cliques share the smallest clique ID",
			node: "n1",
			gpus: []gpu.GPU{{Index: 0, FabricCliqueID: "b/1", NVLinkPeers: []int{1}}, {Index: 1, FabricCliqueID: "a/1"}},
			want: map[int]string{0: "a/1", 1: "a/1"},
		},
		{
			name: "long node names are shortened with a hash, staying distinct",
			node: strings.Repeat("n", 100),
			gpus: []gpu.GPU{{Index: 0}, {Index: 1}},
			want: map[int]string{
				0: boundedValue(strings.Repeat("n", 100) + "-nvl0"),
				1: boundedValue(strings.Repeat("n", 100) + "-nvl1"),
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			logger, _ := ktesting.NewTestContext(t)
			got := nvlinkDomains(logger, tc.node, tc.gpus)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("domains differ (-want +got):\n%s", diff)
			}
			for _, d := range got {
				if len(d) > 64 {
					t.Errorf("domain %q longer than 64 characters", d)
				}
			}
		})
	}
}

func TestBoundedValue(t *testing.T) {
	short := "abc"
	if got := boundedValue(short); got != short {
		t.Errorf("short value changed: %q", got)
	}
	a, b := boundedValue(strings.Repeat("x", 80)+"a"), boundedValue(strings.Repeat("x", 80)+"b")
	if len(a) != 64 || len(b) != 64 || a == b {
		t.Errorf("want two distinct 64-character values, got %q and %q", a, b)
	}
}
