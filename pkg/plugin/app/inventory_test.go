package app

import (
	"fmt"

	"github.com/tangram-gpu/tangram/pkg/gpu"
)

// The test inventory, as pkg/plugin's tests have it: four 80 GiB cards,
// the last in MIG mode with three of an H100 80GB's profiles as the MIG
// user guide lists them.
const (
	testNode = "node-a"
	migCard  = 3
)

func testGPUs() []gpu.GPU {
	var out []gpu.GPU
	for i := range 4 {
		out = append(out, gpu.GPU{Index: i, Minor: i, UUID: fmt.Sprintf("GPU-%d", i), MemoryBytes: 80 << 30})
	}
	out[migCard].MIG = &gpu.MIG{Enabled: true, PendingEnabled: true, Profiles: []gpu.MIGProfile{
		{ID: 19, Name: "1g.10gb", ComputeSlices: 1, Instances: 7, MemoryBytes: 9856 << 20,
			Placements: []gpu.MIGPlacement{{Start: 0, Size: 1}, {Start: 1, Size: 1}, {Start: 2, Size: 1}, {Start: 3, Size: 1}, {Start: 4, Size: 1}, {Start: 5, Size: 1}, {Start: 6, Size: 1}}},
		{ID: 9, Name: "3g.40gb", ComputeSlices: 3, Instances: 2, MemoryBytes: 40192 << 20,
			Placements: []gpu.MIGPlacement{{Start: 0, Size: 4}, {Start: 4, Size: 4}}},
		{ID: 0, Name: "7g.80gb", ComputeSlices: 7, Instances: 1, MemoryBytes: 80 << 30,
			Placements: []gpu.MIGPlacement{{Start: 0, Size: 8}}},
	}}
	return out
}
