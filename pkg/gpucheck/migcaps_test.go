package gpucheck

import (
	"fmt"
	"io/fs"
	"strings"
	"testing"

	"github.com/tangram-gpu/tangram/pkg/gpu/nvcaps"
)

// h200Reading is what docs/gpu-reports/h200-580.159.04-mig-caps.txt shows
// (driver 580.159.04, MIG mode off): the real mig-minors (its sha256 is
// nvcaps.GenerateMIGMinors's, held by pkg/gpu/nvcaps), the nvidia lines of
// /proc/devices, mig/config and mig/monitor, and /dev/nvidia-caps with
// nvidia-cap1 and nvidia-cap2 only; card 0 has minor 0.
func h200Reading() MIGCapsReading {
	zero := 0
	return MIGCapsReading{
		MIGMinors: nvcaps.GenerateMIGMinors(),
		Devices:   []byte("Character devices:\n  1 mem\n195 nvidia\n195 nvidiactl\n238 nvidia-uvm\n239 nvidia-nvswitch\n240 nvidia-nvlink\n241 nvidia-caps\n242 nvidia-caps-imex-channels\n\nBlock devices:\n  7 loop\n"),
		CapFiles: map[nvcaps.Cap][]byte{
			nvcaps.ConfigCap:  []byte("DeviceFileMinor: 1\nDeviceFileMode: 256\nDeviceFileModify: 1\n"),
			nvcaps.MonitorCap: []byte("DeviceFileMinor: 2\nDeviceFileMode: 292\nDeviceFileModify: 1\n"),
		},
		Nodes: map[string]CapNode{
			"/dev/nvidia-caps/nvidia-cap1": {Char: true, Major: 241, Minor: 1},
			"/dev/nvidia-caps/nvidia-cap2": {Char: true, Major: 241, Minor: 2},
		},
		Card0Minor: &zero,
	}
}

func TestMIGCapsOutcome(t *testing.T) {
	with := func(f func(*MIGCapsReading)) MIGCapsReading { r := h200Reading(); f(&r); return r }
	cases := []struct {
		name   string
		in     MIGCapsReading
		result Result
		says   []string
	}{
		{"the H200's reading", h200Reading(), Passed, []string{"mig-minors lists 4322 capabilities; nvidia-caps major 241",
			"config: minor 1, /dev/nvidia-caps/nvidia-cap1 is 241:1", "monitor: minor 2, /dev/nvidia-caps/nvidia-cap2 is 241:2",
			"gpu0/gi0/access: minor 3 as the mock's layout gives", "byte for byte"}},
		{"nodes not created", with(func(r *MIGCapsReading) { r.Nodes = nil }), Passed, []string{"config: minor 1, no /dev/nvidia-caps/nvidia-cap1 on this node"}},
		{"card of minor 2", with(func(r *MIGCapsReading) { two := 2; r.Card0Minor = &two }), Passed, []string{"gpu2/gi0/access: minor 273"}},
		{"no card", with(func(r *MIGCapsReading) { r.Card0Minor = nil }), Passed, []string{"no card: GPU instance minors not checked"}},
		{"another driver's longer file", with(func(r *MIGCapsReading) { r.MIGMinors = append(r.MIGMinors, "gpu32/gi0/access 4323\n"...) }), Passed,
			[]string{"differs from the mock driver root's"}},
		{"no mig-minors", with(func(r *MIGCapsReading) { r.MIGMinors, r.MIGMinorsErr = nil, fmt.Errorf("open: %w", fs.ErrNotExist) }), Skipped,
			[]string{"no /proc/driver/nvidia-caps/mig-minors"}},
		{"mig-minors unreadable", with(func(r *MIGCapsReading) { r.MIGMinorsErr = fs.ErrPermission }), Failed, []string{"reading mig-minors"}},
		{"bad mig-minors line", with(func(r *MIGCapsReading) { r.MIGMinors = []byte("config 1\nmonitor\n") }), Failed, []string{`line 2 "monitor"`}},
		{"no nvidia-caps major", with(func(r *MIGCapsReading) { r.Devices = []byte("Character devices:\n195 nvidia\n") }), Failed,
			[]string{`no character device "nvidia-caps"`}},
		{"node of another major", with(func(r *MIGCapsReading) {
			r.Nodes["/dev/nvidia-caps/nvidia-cap1"] = CapNode{Char: true, Major: 240, Minor: 1}
		}), Failed, []string{"config: /dev/nvidia-caps/nvidia-cap1 is 240:1, want 241:1"}},
		{"node not a device", with(func(r *MIGCapsReading) { r.Nodes["/dev/nvidia-caps/nvidia-cap2"] = CapNode{} }), Failed,
			[]string{"monitor: /dev/nvidia-caps/nvidia-cap2 is not a character device"}},
		{"capability file disagrees", with(func(r *MIGCapsReading) {
			r.CapFiles[nvcaps.MonitorCap] = []byte("DeviceFileMinor: 5\nDeviceFileMode: 292\n")
		}), Failed, []string{"monitor: mig-minors says minor 2, capabilities/mig/monitor DeviceFileMinor 5"}},
		{"capability file unreadable", with(func(r *MIGCapsReading) {
			r.CapFileErrs = map[nvcaps.Cap]error{nvcaps.ConfigCap: fs.ErrNotExist}
		}), Failed, []string{"capability file mig/config"}},
		{"GPU instance elsewhere than the layout", with(func(r *MIGCapsReading) {
			r.MIGMinors = []byte(strings.Replace(string(r.MIGMinors), "gpu0/gi0/access 3\n", "gpu0/gi0/access 7\n", 1))
		}), Passed, []string{"gpu0/gi0/access is minor 7 where the mock's layout gives 3: the mock driver root differs from this driver"}},
		{"card 0's GPU instance not listed", with(func(r *MIGCapsReading) {
			r.MIGMinors = []byte(strings.Replace(string(r.MIGMinors), "gpu0/gi0/access 3\n", "", 1))
		}), Failed, []string{"gpu0/gi0/access"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			out := MIGCapsOutcome(tc.in)
			if out.Result != tc.result {
				t.Errorf("result %s, want %s: %s", out.Result, tc.result, out.Detail)
			}
			for _, s := range tc.says {
				if !strings.Contains(out.Detail, s) {
					t.Errorf("detail %q lacks %q", out.Detail, s)
				}
			}
		})
	}
}
