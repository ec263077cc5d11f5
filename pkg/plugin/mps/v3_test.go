package mps

import (
	"strings"
	"testing"

	"github.com/tangram-gpu/tangram/pkg/plugin/mps/mpsv3"
)

func TestResolveMode(t *testing.T) {
	tests := []struct {
		flag   string
		v3     bool
		want   Mode
		badArg bool
	}{
		{flag: "auto", v3: true, want: ModeV3},
		{flag: "auto", v3: false, want: ModeClassic},
		{flag: "", want: ModeClassic},
		{flag: "v3", v3: false, want: ModeV3},
		{flag: "classic", v3: true, want: ModeClassic},
		{flag: "v4", badArg: true},
	}
	for _, tt := range tests {
		m, err := ParseMode(tt.flag)
		if tt.badArg {
			if err == nil || !strings.Contains(err.Error(), "want auto, v3 or classic") {
				t.Errorf("ParseMode(%q) = %v, want an error naming the values", tt.flag, err)
			}
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		if got := ResolveMode(m, tt.v3); got != tt.want {
			t.Errorf("ResolveMode(%q, %t) = %q, want %q", tt.flag, tt.v3, got, tt.want)
		}
	}
}

func TestNamespaceFor(t *testing.T) {
	const gib = 1 << 30
	tests := []struct {
		name   string
		shares []Share
		want   mpsv3.NamespaceSpec
	}{
		{name: "one share", shares: []Share{{Card: "GPU-a", MemoryBytes: 20 * gib, ThreadPercent: 30}},
			want: mpsv3.NamespaceSpec{Name: "tangram_c", ActiveThreadPercentage: 30, PinnedMemoryLimit: "20480M"}},
		{name: "no compute asked: no cap", shares: []Share{{Card: "GPU-a", MemoryBytes: 20 * gib}},
			want: mpsv3.NamespaceSpec{Name: "tangram_c", PinnedMemoryLimit: "20480M"}},
		{name: "two cards: smallest cap, largest memory", shares: []Share{
			{Card: "GPU-a", MemoryBytes: 10 * gib, ThreadPercent: 50},
			{Card: "GPU-b", MemoryBytes: 20 * gib, ThreadPercent: 25},
			{Card: "GPU-c", MemoryBytes: gib}},
			want: mpsv3.NamespaceSpec{Name: "tangram_c", ActiveThreadPercentage: 25, PinnedMemoryLimit: "20480M"}},
		{name: "memory rounds up to MiB", shares: []Share{{Card: "GPU-a", MemoryBytes: mib + 1}},
			want: mpsv3.NamespaceSpec{Name: "tangram_c", PinnedMemoryLimit: "2M"}},
		{name: "cap above 100 is the whole card", shares: []Share{{Card: "GPU-a", ThreadPercent: 150}},
			want: mpsv3.NamespaceSpec{Name: "tangram_c", ActiveThreadPercentage: 100}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := namespaceFor("c", tt.shares); got != tt.want {
				t.Errorf("namespaceFor = %+v, want %+v", got, tt.want)
			}
		})
	}
}
