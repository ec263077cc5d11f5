package resourceslices

import (
	"testing"

	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/tangram-gpu/tangram/pkg/device"
	"github.com/tangram-gpu/tangram/pkg/gpu"
)

// TestMemoryLessReserved holds the rule of docs/resourceslices.md
// ("Memory"): a card's memory capacity is its total less what the driver
// reserves (nvmlDeviceGetMemoryInfo_v2's reserved, which no process can
// allocate; NVIDIA-FACTS.md "Memory the driver keeps"), and a shareable
// card's default and maximum request are that rounded down to the step.
// A claim naming no memory gets the default and still holds the whole card
// (device.HoldsWholeCard over device.AllocatableMemory). The reserved
// sizes here are made up: real ones stay unverified until a GPU run
// records them.
func TestMemoryLessReserved(t *testing.T) {
	const mi = 1 << 20
	tests := []struct {
		name             string
		gpu              gpu.GPU
		sharing          bool
		wantCapacity     int64 // bytes; 0: no memory capacity
		wantPolicy       int64 // default and max; 0: whole-card only
		wantShareable    bool
		wantAllocatable  int64
		wantNoClaimWhole bool
	}{
		{name: "nothing reserved: the total, as before", gpu: gpu.GPU{MemoryBytes: 80 << 30}, sharing: true,
			wantCapacity: 80 << 30, wantPolicy: 80 << 30, wantShareable: true, wantAllocatable: 80 << 30},
		{name: "H100 with reserved memory: total less reserved, policy rounded down to 256Mi",
			gpu: gpu.GPU{MemoryBytes: 81559 * mi, ReservedMemoryBytes: 462 * mi}, sharing: true,
			wantCapacity: 81097 * mi, wantPolicy: 80896 * mi, wantShareable: true, wantAllocatable: 80896 * mi},
		{name: "reserved memory on a card published whole-card only",
			gpu:          gpu.GPU{MemoryBytes: 81559 * mi, ReservedMemoryBytes: 462 * mi},
			wantCapacity: 81097 * mi, wantAllocatable: 81097 * mi},
		{name: "reserved leaving less than two steps: whole-card only",
			gpu: gpu.GPU{MemoryBytes: 768 * mi, ReservedMemoryBytes: 300 * mi}, sharing: true,
			wantCapacity: 468 * mi, wantAllocatable: 468 * mi},
		// The NVML reader never hands these on; the rule still holds
		// without a panic or a negative capacity.
		{name: "reserved not below the total is ignored", gpu: gpu.GPU{MemoryBytes: 16 << 30, ReservedMemoryBytes: 16 << 30}, sharing: true,
			wantCapacity: 16 << 30, wantPolicy: 16 << 30, wantShareable: true, wantAllocatable: 16 << 30},
		{name: "negative reserved is ignored", gpu: gpu.GPU{MemoryBytes: 16 << 30, ReservedMemoryBytes: -1}, sharing: true,
			wantCapacity: 16 << 30, wantPolicy: 16 << 30, wantShareable: true, wantAllocatable: 16 << 30},
		{name: "no memory: no capacity, whatever is reserved", gpu: gpu.GPU{ReservedMemoryBytes: 1 << 30}, sharing: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			devs, err := Devices([]gpu.GPU{tt.gpu}, Options{NodeName: "n", Sharing: tt.sharing})
			if err != nil {
				t.Fatal(err)
			}
			d := devs[0]
			m, ok := d.Capacity[device.CapacityMemory]
			switch {
			case tt.wantCapacity == 0 && ok:
				t.Fatalf("memory capacity %s, want none", &m.Value)
			case tt.wantCapacity == 0:
				return
			case !ok || m.Value.Value() != tt.wantCapacity:
				t.Fatalf("memory capacity %s (present %v), want %d bytes", &m.Value, ok, tt.wantCapacity)
			}
			shareable := d.AllowMultipleAllocations != nil && *d.AllowMultipleAllocations
			if shareable != tt.wantShareable {
				t.Errorf("shareable %v, want %v", shareable, tt.wantShareable)
			}
			if tt.wantPolicy == 0 {
				if m.RequestPolicy != nil {
					t.Errorf("request policy %+v, want none", m.RequestPolicy)
				}
			} else if p := m.RequestPolicy; p == nil || p.Default.Value() != tt.wantPolicy || p.ValidRange.Max.Value() != tt.wantPolicy {
				t.Errorf("request policy %+v, want default and max %d bytes", p, tt.wantPolicy)
			}
			allocatable := device.AllocatableMemory(&d)
			if allocatable != tt.wantAllocatable {
				t.Errorf("allocatable memory %d, want %d", allocatable, tt.wantAllocatable)
			}
			// A claim that names no memory: the default on a shareable
			// card (recorded as consumed, with a share ID), the card
			// exclusively otherwise. Either way the whole card.
			shareID, consumed := false, device.NoMemoryConsumed
			if shareable {
				shareID, consumed = true, m.RequestPolicy.Default.Value()
			}
			if !device.HoldsWholeCard(shareID, consumed, allocatable) {
				t.Errorf("a claim naming no memory (consumed %d of allocatable %d) is a share, want the whole card", consumed, allocatable)
			}
			if total := tt.gpu.MemoryBytes - max(tt.gpu.ReservedMemoryBytes, 0); tt.gpu.ReservedMemoryBytes < tt.gpu.MemoryBytes && m.Value.Value() > total {
				t.Errorf("memory capacity %s promises more than the %d bytes processes can allocate", &m.Value, total)
			}
		})
	}
}

// TestSharesOnAFullCardFitUnreservedMemory fills a published card with
// equal shares as the allocator does (each request rounded up to the step,
// their sum at most the capacity) and wants them to fit in what processes
// can allocate, total less reserved: with the total as the capacity the
// last share would run out of memory below its request.
func TestSharesOnAFullCardFitUnreservedMemory(t *testing.T) {
	const gi = 1 << 30
	tests := []struct {
		name       string
		total      int64
		reserved   int64
		share      string
		wantShares int64
	}{
		// 80Gi less 1Gi: nine 8Gi shares, not ten.
		{"8Gi shares on an 80Gi card with 1Gi reserved", 80 * gi, 1 * gi, "8Gi", 9},
		{"8Gi shares on an 80Gi card with none reserved", 80 * gi, 0, "8Gi", 10},
		// 81559Mi less 462Mi = 81097Mi: 316 shares of 256Mi (80896Mi),
		// not 318 (81408Mi, 311Mi more than processes can have).
		{"256Mi shares on an H100 with 462Mi reserved", 81559 << 20, 462 << 20, "256Mi", 316},
		{"20Gi shares on an H100 with 462Mi reserved", 81559 << 20, 462 << 20, "20Gi", 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			devs, err := Devices([]gpu.GPU{{MemoryBytes: tt.total, ReservedMemoryBytes: tt.reserved}}, Options{NodeName: "n", Sharing: true})
			if err != nil {
				t.Fatal(err)
			}
			m := devs[0].Capacity[device.CapacityMemory]
			step := m.RequestPolicy.ValidRange.Step.Value()
			q := resource.MustParse(tt.share)
			share := (q.Value() + step - 1) / step * step
			if share > device.AllocatableMemory(&devs[0]) {
				t.Fatalf("a %s share exceeds the policy's maximum", tt.share)
			}
			n := m.Value.Value() / share
			if n != tt.wantShares {
				t.Errorf("%d shares of %s fit the published capacity %s, want %d", n, tt.share, &m.Value, tt.wantShares)
			}
			if n*share > tt.total-tt.reserved {
				t.Errorf("%d shares of %s take %d bytes, more than the %d processes can allocate", n, tt.share, n*share, tt.total-tt.reserved)
			}
		})
	}
}
