package mpsv3

import (
	"strings"
	"testing"

	"github.com/tangram-gpu/tangram/pkg/plugin/mps/standin"
)

func TestNamespaceName(t *testing.T) {
	for _, tt := range []struct{ uid, want string }{
		{"0b7c3a8e-1f2d-4e5a-9b6c-7d8e9f0a1b2c", "tangram_0b7c3a8e_1f2d_4e5a_9b6c_7d8e9f0a1b2c"},
		{"c1", "tangram_c1"},
	} {
		got := NamespaceName(tt.uid)
		if got != tt.want {
			t.Errorf("NamespaceName(%q) = %q, want %q", tt.uid, got, tt.want)
		}
		if err := ValidNamespaceName(got); err != nil {
			t.Error(err)
		}
	}
	for _, bad := range []string{"tangram-c1", "", strings.Repeat("a", 65), "A"} {
		if ValidNamespaceName(bad) == nil {
			t.Errorf("ValidNamespaceName(%q) accepted it", bad)
		}
	}
	for name, ours := range map[string]bool{"tangram_c1": true, "tangram-c1": true, "admin_ns": false, "default": false} {
		if OwnNamespace(name) != ours {
			t.Errorf("OwnNamespace(%q) = %t", name, !ours)
		}
	}
}

func TestParseSize(t *testing.T) {
	for _, tt := range []struct {
		in      string
		want    int64
		wantErr bool
	}{
		{in: "20G", want: 20 << 30}, {in: "20480M", want: 20 << 30}, {in: "20GiB", want: 20 << 30}, {in: "20 GB", want: 20 << 30},
		{in: "1.5G", want: 3 << 29}, {in: "512k", want: 512 << 10}, {in: "1T", want: 1 << 40}, {in: "4096", want: 4096},
		{in: "", want: 0}, {in: "0", want: 0}, {in: "none", want: 0}, {in: "Unlimited", want: 0}, {in: "-", want: 0},
		{in: "lots", wantErr: true}, {in: "20X", wantErr: true}, {in: "G", wantErr: true},
	} {
		got, err := ParseSize(tt.in)
		if (err != nil) != tt.wantErr || got != tt.want {
			t.Errorf("ParseSize(%q) = %d, %v; want %d (error %t)", tt.in, got, err, tt.want, tt.wantErr)
		}
	}
	for _, b := range []int64{20 << 30, 1536 << 20, 3 << 29, 1 << 40, 4097} {
		if got, err := ParseSize(standin.FormatSize(b)); err != nil || got != b {
			t.Errorf("%d -> %q -> %d, %v", b, standin.FormatSize(b), got, err)
		}
	}
}

func TestSameLimits(t *testing.T) {
	want := NamespaceSpec{Name: "n", ActiveThreadPercentage: 30, PinnedMemoryLimit: "20480M"}
	for _, tt := range []struct {
		have NamespaceSpec
		same bool
	}{
		{NamespaceSpec{ActiveThreadPercentage: 30, PinnedMemoryLimit: "20G"}, true},
		{NamespaceSpec{ActiveThreadPercentage: 30, PinnedMemoryLimit: "20480M"}, true},
		{NamespaceSpec{ActiveThreadPercentage: 30, PinnedMemoryLimit: "21474836480"}, true},
		{NamespaceSpec{ActiveThreadPercentage: 40, PinnedMemoryLimit: "20G"}, false},
		{NamespaceSpec{ActiveThreadPercentage: 30, PinnedMemoryLimit: "10G"}, false},
		{NamespaceSpec{ActiveThreadPercentage: 30}, false},
	} {
		if got := sameLimits(want, tt.have); got != tt.same {
			t.Errorf("sameLimits(%+v, %+v) = %t", want, tt.have, got)
		}
	}
	// No cap asked: a namespace listed at 100% has none.
	if !sameLimits(NamespaceSpec{PinnedMemoryLimit: "1024M"}, NamespaceSpec{ActiveThreadPercentage: 100, PinnedMemoryLimit: "1G"}) {
		t.Error("no cap and 100% differ")
	}
	if !sameLimits(NamespaceSpec{}, NamespaceSpec{ActiveThreadPercentage: 100, PinnedMemoryLimit: "none"}) {
		t.Error("no limits and the listed defaults differ")
	}
}
