// Package plugintest is the node plane's test inventory, shared by the
// tests of pkg/plugin and the packages around it (the process, the taint
// publisher): four 80 GiB cards on one node, the last in MIG mode, and an
// XID taint monitor over them.
package plugintest

import (
	"fmt"
	"testing"
	"time"

	"github.com/tangram-gpu/tangram/pkg/gpu"
	"github.com/tangram-gpu/tangram/pkg/plugin/xidtaint"
)

const (
	// Node is the test node, and its ResourceSlice pool.
	Node = "node-a"
	// CardMemory is each card's memory.
	CardMemory = 80 << 30
	// MIGCard is the index of the card in MIG mode.
	MIGCard = 3
)

// GPUs are four 80 GiB cards; MIGCard is in MIG mode with MIG's profiles.
func GPUs() []gpu.GPU {
	var out []gpu.GPU
	for i := range 4 {
		out = append(out, gpu.GPU{Index: i, Minor: i, UUID: fmt.Sprintf("GPU-%d", i), MemoryBytes: CardMemory})
	}
	out[MIGCard].MIG = MIG()
	return out
}

// MIG is three of an H100 80GB's profiles, as the MIG user guide lists
// them.
func MIG() *gpu.MIG {
	return &gpu.MIG{Enabled: true, PendingEnabled: true, Profiles: []gpu.MIGProfile{
		{ID: 19, Name: "1g.10gb", ComputeSlices: 1, Instances: 7, MemoryBytes: 9856 << 20,
			Placements: []gpu.MIGPlacement{{Start: 0, Size: 1}, {Start: 1, Size: 1}, {Start: 2, Size: 1}, {Start: 3, Size: 1}, {Start: 4, Size: 1}, {Start: 5, Size: 1}, {Start: 6, Size: 1}}},
		{ID: 9, Name: "3g.40gb", ComputeSlices: 3, Instances: 2, MemoryBytes: 40192 << 20,
			Placements: []gpu.MIGPlacement{{Start: 0, Size: 4}, {Start: 4, Size: 4}}},
		{ID: 0, Name: "7g.80gb", ComputeSlices: 7, Instances: 1, MemoryBytes: 80 << 30,
			Placements: []gpu.MIGPlacement{{Start: 0, Size: 8}}},
	}}
}

// Monitor is an XID taint monitor over GPUs with the default policy; a
// taint stays an hour unless the card recovers.
func Monitor(t testing.TB) *xidtaint.Monitor {
	t.Helper()
	m, err := xidtaint.NewMonitor(xidtaint.Config{Cards: GPUs(), Policy: xidtaint.DefaultPolicy(), RecoverAfter: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	return m
}
