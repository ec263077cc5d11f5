//go:build cgo

package probe

import (
	"encoding/json"
	"os"
	"testing"

	"github.com/tangram-gpu/tangram/pkg/gpu"
	"github.com/tangram-gpu/tangram/pkg/gpucheck"
)

// TestMockMIGTableMatchesTheH200Report: what NVML answered on a real H200
// (driver 580.159.04, MIG mode off, docs/gpu-reports/) passes the
// gpu-check's MIG check against the mock's h200-141gb table: every
// profile's ID, slices, instances, SMs, engines, memory in MiB, name and
// placements.
func TestMockMIGTableMatchesTheH200Report(t *testing.T) {
	raw, err := os.ReadFile("../../../docs/gpu-reports/h200-580.159.04-nvml-mig.json")
	if err != nil {
		t.Fatal(err)
	}
	var cards []gpu.MIGQuery
	if err := json.Unmarshal(raw, &cards); err != nil {
		t.Fatal(err)
	}
	if out := gpucheck.MIGOutcome(cards, mockMIGTable); out.Result != gpucheck.Passed {
		t.Errorf("MIG check on the H200 report: %s: %s", out.Result, out.Detail)
	}
}
