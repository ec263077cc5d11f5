package nvmlgpu

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestNVLinkPeers(t *testing.T) {
	const sw0, sw1 = "0000:05:00.0", "0000:06:00.0"
	tests := []struct {
		name  string
		cards []cardLinks
		want  map[int][]int
	}{
		{
			name:  "no links",
			cards: []cardLinks{{index: 0, busID: "0000:01:00.0"}, {index: 1, busID: "0000:02:00.0"}},
			want:  map[int][]int{},
		},
		{
			name: "bridged pairs, bonded links reported once per link",
			cards: []cardLinks{
				{index: 0, busID: "0000:01:00.0", remotes: []string{"0000:02:00.0", "0000:02:00.0"}},
				{index: 1, busID: "0000:02:00.0", remotes: []string{"0000:01:00.0", "0000:01:00.0"}},
				{index: 2, busID: "0000:03:00.0", remotes: []string{"0000:04:00.0"}},
				{index: 3, busID: "0000:04:00.0", remotes: []string{"0000:03:00.0"}},
			},
			want: map[int][]int{0: {1}, 1: {0}, 2: {3}, 3: {2}},
		},
		{
			name: "one-sided link counts for both cards",
			cards: []cardLinks{
				{index: 0, busID: "0000:01:00.0", remotes: []string{"0000:02:00.0"}},
				{index: 1, busID: "0000:02:00.0"},
			},
			want: map[int][]int{0: {1}, 1: {0}},
		},
		{
			name: "NVSwitch: every switched card reaches every other, unswitched card alone",
			cards: []cardLinks{
				{index: 0, busID: "0000:1b:00.0", remotes: []string{sw0, sw1}},
				{index: 1, busID: "0000:43:00.0", remotes: []string{sw1}},
				{index: 2, busID: "0000:52:00.0", remotes: []string{sw0}},
				{index: 3, busID: "0000:61:00.0"},
			},
			want: map[int][]int{0: {1, 2}, 1: {0, 2}, 2: {0, 1}},
		},
		{
			name: "link to an unpublished card is neither a peer nor a switch",
			cards: []cardLinks{
				{index: 0, busID: "0000:01:00.0", remotes: []string{"0000:02:00.0"}},
				{index: -1, busID: "0000:02:00.0", remotes: []string{"0000:01:00.0"}},
				{index: 2, busID: "0000:03:00.0", remotes: []string{sw0}},
			},
			want: map[int][]int{},
		},
		{
			name: "self links and empty remotes are ignored",
			cards: []cardLinks{
				{index: 0, busID: "0000:01:00.0", remotes: []string{"0000:01:00.0", ""}},
			},
			want: map[int][]int{},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if diff := cmp.Diff(tt.want, nvlinkPeers(tt.cards)); diff != "" {
				t.Errorf("nvlinkPeers (-want +got):\n%s", diff)
			}
		})
	}
}
