//go:build cgo

package nvmlgpu

import (
	"strings"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// TestMemoryReserved: the card's memory comes from
// nvmlDeviceGetMemoryInfo_v2, which reports the memory the driver keeps
// (nvmlMemory_v2_t.reserved; NVIDIA-FACTS.md "Memory the driver keeps")
// apart from the total. A driver without the v2 call falls back to v1,
// whose total is the same but which has no reserved field: reserved is
// unknown (0), said once however many cards. A reserved amount not below
// the total is an odd value: left out, the total kept.
func TestMemoryReserved(t *testing.T) {
	const total = 81559 << 20
	tests := []struct {
		name         string
		reserved     uint64
		v2Ret        nvml.Return
		wantTotal    int64
		wantReserved int64
		// wantLogs must each appear; fallbackLogs is how many lines tell of
		// the v1 fallback (once per source, not per card).
		wantLogs     [][]string
		fallbackLogs int
	}{
		{name: "v2 reports reserved memory", reserved: 462 << 20, wantTotal: total, wantReserved: 462 << 20},
		{name: "v2 reports none reserved", wantTotal: total},
		{name: "driver without the v2 call: v1 total, reserved unknown", reserved: 462 << 20, v2Ret: nvml.ERROR_FUNCTION_NOT_FOUND,
			wantTotal: total, fallbackLogs: 1,
			wantLogs: [][]string{{`nvmlDeviceGetMemoryInfo_v2`, `"reason"="ERROR_FUNCTION_NOT_FOUND"`}}},
		{name: "v2 not supported: v1 total, reserved unknown", reserved: 462 << 20, v2Ret: nvml.ERROR_NOT_SUPPORTED,
			wantTotal: total, fallbackLogs: 1,
			wantLogs: [][]string{{`nvmlDeviceGetMemoryInfo_v2`, `"reason"="ERROR_NOT_SUPPORTED"`}}},
		{name: "reserved above the total is odd", reserved: total + 1, wantTotal: total,
			wantLogs: [][]string{{`"msg"="Leaving out a value the GPU reports oddly"`, `"field"="reservedMemory"`}}},
		{name: "reserved equal to the total is odd", reserved: total, wantTotal: total,
			wantLogs: [][]string{{`"field"="reservedMemory"`}}},
		{name: "v2 fails otherwise: memory left out, no fallback", v2Ret: nvml.ERROR_UNKNOWN,
			wantLogs: [][]string{{`"msg"="Leaving out a value the GPU cannot report"`, `"field"="memory"`, `"error"="ERROR_UNKNOWN"`}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newDGXH100()
			for _, c := range s.cards {
				c.reserved, c.memoryV2Ret = tt.reserved, tt.v2Ret
			}
			ctx, logs := logContext()
			got, err := New(s.server()).GPUs(ctx)
			if err != nil {
				t.Fatalf("GPUs: %v", err)
			}
			if len(got) != len(s.cards) {
				t.Fatalf("got %d cards, want %d", len(got), len(s.cards))
			}
			for _, g := range got {
				if g.MemoryBytes != tt.wantTotal || g.ReservedMemoryBytes != tt.wantReserved {
					t.Errorf("card %d: memory %d reserved %d, want %d reserved %d", g.Index, g.MemoryBytes, g.ReservedMemoryBytes, tt.wantTotal, tt.wantReserved)
				}
				if want := tt.wantTotal - tt.wantReserved; g.UnreservedMemoryBytes() != want {
					t.Errorf("card %d: unreserved memory %d, want %d", g.Index, g.UnreservedMemoryBytes(), want)
				}
			}
			if m := logs.missing(tt.wantLogs); len(m) > 0 {
				t.Errorf("log lines missing: %q\nlogged:\n%s", m, strings.Join(logs.lines, "\n"))
			}
			fallbacks := 0
			for _, line := range logs.lines {
				if strings.Contains(line, "NVML has no nvmlDeviceGetMemoryInfo_v2") {
					fallbacks++
				}
			}
			if fallbacks != tt.fallbackLogs {
				t.Errorf("%d log lines about the v1 fallback, want %d:\n%s", fallbacks, tt.fallbackLogs, strings.Join(logs.lines, "\n"))
			}
		})
	}
}
