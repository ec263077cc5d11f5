package gpucheck

import (
	"strings"
	"testing"

	"github.com/tangram-gpu/tangram/pkg/gpu"
)

func TestMIGOutcome(t *testing.T) {
	table := MIGExpectation{Name: "h200-141gb", Profiles: []gpu.MIGProfile{
		{ID: 19, Name: "1g.18gb", ComputeSlices: 1, Instances: 7, Multiprocessors: 16, CopyEngines: 1, Decoders: 1, JPEGs: 1,
			MemoryBytes: 16384 << 20, Placements: []gpu.MIGPlacement{{Start: 0, Size: 1}, {Start: 1, Size: 1}}},
	}}
	expect := func(product string, _ int64) (MIGExpectation, bool) { return table, strings.Contains(product, "H200") }
	good := gpu.MIGProfileQuery{Profile: 0, Return: "SUCCESS", ID: 19, NVMLName: "MIG 1g.18gb", TangramName: "1g.18gb",
		ComputeSlices: 1, Instances: 7, Multiprocessors: 16, CopyEngines: 1, Decoders: 1, JPEGs: 1, MemoryMiB: 16384,
		PlacementsReturn: "SUCCESS", Placements: []gpu.MIGPlacement{{Start: 0, Size: 1}, {Start: 1, Size: 1}}}
	end := gpu.MIGProfileQuery{Profile: 1, Return: "ERROR_INVALID_ARGUMENT"}
	card := func(enabled bool, profiles ...gpu.MIGProfileQuery) gpu.MIGQuery {
		return gpu.MIGQuery{Product: "NVIDIA H200", MemoryMiB: 143771, ModeReturn: "SUCCESS", Enabled: enabled, Pending: enabled, Profiles: profiles}
	}
	with := func(f func(*gpu.MIGProfileQuery)) gpu.MIGProfileQuery { p := good; f(&p); return p }
	cases := []struct {
		name   string
		cards  []gpu.MIGQuery
		result Result
		says   []string
	}{
		{"matches the table", []gpu.MIGQuery{card(true, good, end)}, Passed, []string{"MIG mode on; NVML answers 1 profile(s)"}},
		{"mode off, no answers", []gpu.MIGQuery{card(false, gpu.MIGProfileQuery{Return: "ERROR_NOT_SUPPORTED"}, end)}, Passed,
			[]string{"MIG mode off; NVML answers no profile (profile 0: ERROR_NOT_SUPPORTED)"}},
		{"not MIG-capable", []gpu.MIGQuery{{Product: "NVIDIA L4", ModeReturn: "ERROR_NOT_SUPPORTED"}}, Skipped, []string{"MIG mode ERROR_NOT_SUPPORTED"}},
		{"plugin names it otherwise", []gpu.MIGQuery{card(true, with(func(p *gpu.MIGProfileQuery) { p.TangramName = "1g.17gb" }), end)}, Failed,
			[]string{`NVML names it "1g.18gb", the plugin "1g.17gb"`, "name: driver 1g.17gb, mock 1g.18gb"}},
		{"mock's SM count wrong", []gpu.MIGQuery{card(true, with(func(p *gpu.MIGProfileQuery) { p.Multiprocessors = 18 }), end)}, Failed,
			[]string{"multiprocessors: driver 18, mock 16"}},
		{"mock's memory wrong", []gpu.MIGQuery{card(true, with(func(p *gpu.MIGProfileQuery) { p.MemoryMiB = 17971 }), end)}, Failed,
			[]string{"memory (MiB): driver 17971, mock 16384"}},
		{"mock's placements wrong", []gpu.MIGQuery{card(true, with(func(p *gpu.MIGProfileQuery) { p.Placements = p.Placements[:1] }), end)}, Failed,
			[]string{"placements: driver 0:1, mock 0:1 1:1"}},
		{"profile missing from the driver", []gpu.MIGQuery{card(true, with(func(p *gpu.MIGProfileQuery) { p.ID = 20; p.NVMLName = "MIG 1g.18gb+me"; p.TangramName = "1g.18gb+me" }), end)}, Failed,
			[]string{"profile ID 19 (1g.18gb) not reported", "profiles the mock's h200-141gb lacks: ID 20 1g.18gb+me"}},
		{"plugin cannot name it", []gpu.MIGQuery{card(true, with(func(p *gpu.MIGProfileQuery) { p.TangramName = ""; p.NameError = "not one Tangram can name" }), end)}, Failed,
			[]string{"the plugin cannot name it"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			out := MIGOutcome(c.cards, expect)
			if out.Result != c.result {
				t.Errorf("result %s, want %s: %s", out.Result, c.result, out.Detail)
			}
			for _, s := range c.says {
				if !strings.Contains(out.Detail, s) {
					t.Errorf("detail %q lacks %q", out.Detail, s)
				}
			}
		})
	}
}
