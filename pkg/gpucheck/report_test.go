package gpucheck

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"
)

func TestReport(t *testing.T) {
	started := time.Date(2026, 11, 27, 6, 30, 0, 0, time.UTC)
	m := Machine{Hostname: "gpu-1", GPUs: []string{"NVIDIA H200", "NVIDIA H200"}, DriverVersion: "580.159.03", CUDAVersion: "13.0", Kernel: "6.18.0-fc", DriverRoot: "/usr/local/nvidia"}
	for _, tc := range []struct {
		name     string
		machine  Machine
		records  []Record
		wantExit int
		wantStem string
		want     []string
	}{
		{
			name:    "failures make the exit non-zero and are marked",
			machine: m,
			records: []Record{
				{Name: "inventory", Outcome: Pass("2 cards"), Duration: 1200 * time.Millisecond},
				{Name: "MPS classic", Outcome: Fail("refused at 3 | 4 MiB\nsecond line")},
				{Name: "MPS v3", Outcome: Skip("driver 580.159.03 is older than 615")},
			},
			wantExit: 1,
			wantStem: "gpu-check-h200-driver-580.159.03-kernel-6.18.0-fc-20261127T063000Z",
			want: []string{
				"# Tangram GPU check: gpu-1", "| GPUs | 2 × NVIDIA H200 |", "| Driver | 580.159.03 (CUDA 13.0) |",
				"| Kernel | 6.18.0-fc |", "| Date | 2026-11-27T06:30:00Z |", "| Driver root | /usr/local/nvidia |",
				"| inventory | PASS | 1.2s | 2 cards |", `| MPS classic | **FAIL** | 0s | refused at 3 \| 4 MiB second line |`,
				"| MPS v3 | skip |", "\n1 passed, 1 failed, 1 skipped\n",
			},
		},
		{
			name:     "a noted pass is marked and counted as passed",
			machine:  m,
			records:  []Record{{Name: "reserved memory", Outcome: Note("note: gpu 0: the plugin publishes more")}},
			wantStem: "gpu-check-h200-driver-580.159.03-kernel-6.18.0-fc-20261127T063000Z",
			want:     []string{"| reserved memory | PASS, note | 0s | note: gpu 0: the plugin publishes more |", "1 passed, 0 failed, 0 skipped"},
		},
		{
			name:     "no GPU found",
			machine:  Machine{Kernel: "6.1"},
			records:  []Record{{Name: "driver", Outcome: Skip("x")}},
			wantStem: "gpu-check-no-gpu-driver-unknown-kernel-6.1-20261127T063000Z",
			want:     []string{"| GPUs | none found |", "| Driver | unknown |", "0 passed, 0 failed, 1 skipped"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := NewReport(tc.machine, started, tc.records)
			if r.ExitCode != tc.wantExit {
				t.Errorf("exit %d, want %d", r.ExitCode, tc.wantExit)
			}
			if got := r.FileStem(); got != tc.wantStem {
				t.Errorf("stem %q, want %q", got, tc.wantStem)
			}
			var md bytes.Buffer
			if err := WriteMarkdown(&md, r); err != nil {
				t.Fatal(err)
			}
			for _, w := range tc.want {
				if !strings.Contains(md.String(), w) {
					t.Errorf("Markdown lacks %q:\n%s", w, md.String())
				}
			}
			var js bytes.Buffer
			if err := WriteJSON(&js, r); err != nil {
				t.Fatal(err)
			}
			var back Report
			if err := json.Unmarshal(js.Bytes(), &back); err != nil || back.Summary != r.Summary || len(back.Records) != len(r.Records) {
				t.Errorf("JSON round trip: %v, %+v", err, back)
			}
		})
	}
}
