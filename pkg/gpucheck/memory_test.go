package gpucheck

import (
	"strings"
	"testing"
)

func TestMemoryOutcome(t *testing.T) {
	const mi = 1 << 20
	// An H200 as NVML reads it (143771 MiB), with a made-up reservation:
	// the figures of a real card are what the row is there to learn.
	h200 := func(published int64) CardMemory {
		return CardMemory{Index: 0, UUID: "GPU-a",
			V2Return: NVMLSuccess, Total: 143771 * mi, Reserved: 617 * mi, Free: 143154*mi - 4*mi, Used: 4 * mi,
			V1Return: NVMLSuccess, V1Total: 143771 * mi, V1Free: 143150 * mi, V1Used: 621 * mi,
			Published: published, PublishedMax: published - published%(256*mi)}
	}
	for _, tc := range []struct {
		name   string
		cards  []CardMemory
		result Result
		noted  bool
		says   []string
		absent []string
	}{
		{
			name: "published total − reserved rounded down to the step passes", cards: []CardMemory{h200(143104 * mi)},
			result: Passed, says: []string{"gpu 0: v2 total 143771 MiB, reserved 617 MiB, free 143150 MiB, used 4 MiB",
				"v1 total 143771 MiB, free 143150 MiB, used 621 MiB", "the plugin publishes 143104 MiB (one claim at most 143104 MiB)",
				"v1 used − v2 used = 617 MiB", "at most total − reserved 143154 MiB"},
		},
		{
			name: "published exactly total − reserved passes", cards: []CardMemory{h200(143154 * mi)},
			result: Passed, says: []string{"publishes 143154 MiB", "at most total − reserved 143154 MiB"},
		},
		{
			name: "published total (today's plugin) is noted with the figures, not failed", cards: []CardMemory{h200(143771 * mi)},
			result: Passed, noted: true,
			says: []string{"note: gpu 0: the plugin publishes more than a tenant can allocate: 143771 MiB published, total 143771 MiB − reserved 617 MiB = 143154 MiB allocatable, 617 MiB too much",
				"one claim at most 143616 MiB"},
			absent: []string{"at most total − reserved"},
		},
		{
			name: "figures off the MiB are given in bytes too", cards: []CardMemory{{Index: 1, V2Return: NVMLSuccess, Total: 1000*mi + 5, Reserved: 3, Published: 1000 * mi, PublishedMax: 1000 * mi, V1Return: NVMLSuccess, V1Total: 1000*mi + 5}},
			result: Passed, says: []string{"total 1000 MiB (1048576005 bytes)", "reserved 0 MiB (3 bytes)", "at most total − reserved 1000 MiB (1048576002 bytes)"},
		},
		{
			name: "a card in MIG mode publishes no card memory: noted", cards: []CardMemory{h200(0)},
			result: Passed, noted: true, says: []string{"publishes no memory capacity for the card", "nothing to compare with total − reserved 143154 MiB"},
		},
		{
			name: "v2 not supported: noted, v1 still shown", cards: []CardMemory{{Index: 0, V2Return: NVMLNotSupported, V1Return: NVMLSuccess, V1Total: 80 * 1024 * mi, Published: 80 * 1024 * mi, PublishedMax: 80 * 1024 * mi}},
			result: Passed, noted: true, says: []string{"no reserved figure (nvmlDeviceGetMemoryInfo_v2 ERROR_NOT_SUPPORTED): not compared", "v1 total 81920 MiB"},
		},
		{
			name: "v2 missing from the library: noted", cards: []CardMemory{{Index: 0, V2Return: "symbol missing", V1Return: NVMLSuccess, Published: mi, PublishedMax: mi}},
			result: Passed, noted: true, says: []string{"nvmlDeviceGetMemoryInfo_v2 symbol missing"},
		},
		{
			name: "a v2 error fails", cards: []CardMemory{h200(143104 * mi), {Index: 1, V2Return: "ERROR_GPU_IS_LOST", V1Return: NVMLSuccess}},
			result: Failed, says: []string{"gpu 1: nvmlDeviceGetMemoryInfo_v2: ERROR_GPU_IS_LOST", "gpu 0: v2 total 143771 MiB"},
		},
		{
			name: "a v1 error fails", cards: []CardMemory{func() CardMemory { c := h200(143104 * mi); c.V1Return = "ERROR_UNKNOWN"; return c }()},
			result: Failed, says: []string{"gpu 0: nvmlDeviceGetMemoryInfo: ERROR_UNKNOWN", "v1 ERROR_UNKNOWN"},
		},
		{
			name: "reserved above total is a wrong reading", cards: []CardMemory{{Index: 0, V2Return: NVMLSuccess, Total: mi, Reserved: 2 * mi, V1Return: NVMLSuccess, Published: mi}},
			result: Failed, says: []string{"reserved 2 MiB is more than the total 1 MiB"},
		},
		{name: "no card", result: Failed, says: []string{"no card"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := MemoryOutcome(tc.cards)
			if o.Result != tc.result || o.Noted != tc.noted {
				t.Errorf("%s (noted %v), want %s (noted %v): %s", o.Result, o.Noted, tc.result, tc.noted, o.Detail)
			}
			for _, w := range tc.says {
				if !strings.Contains(o.Detail, w) {
					t.Errorf("detail lacks %q:\n%s", w, o.Detail)
				}
			}
			for _, a := range tc.absent {
				if strings.Contains(o.Detail, a) {
					t.Errorf("detail says %q:\n%s", a, o.Detail)
				}
			}
		})
	}
}
