// Package gpu describes the GPUs of one node: what each card is, how much
// memory it has and how the cards are connected (NVLink, PCIe, NUMA).
//
// A Source lists the cards. Two implementations exist: NVML on a real node
// (gpu/nvmlgpu) and a fake one built from a profile for machines without GPUs
// (gpu/fakegpu, which also holds the profile format and its decoding). Everything above
// this package (ResourceSlices, prepare, the simulator) sees only []GPU.
package gpu

import "context"

// GPU is one physical card as the rest of Tangram sees it. Fields a device
// could not report are left at their zero value (or nil for NUMANode); they
// are never guessed.
type GPU struct {
	// Index is NVML's device index on this node; the ResourceSlice device is
	// named gpu-<Index>.
	Index int
	// Minor is the minor number of /dev/nvidia<Minor>.
	Minor int
	// UUID is the card's stable identity, "GPU-xxxxxxxx-...".
	UUID        string
	ProductName string
	Brand       string
	// Architecture is a lower-case name such as "hopper" or "ampere".
	Architecture string
	// CUDAComputeCapability is "<major>.<minor>", e.g. "9.0".
	CUDAComputeCapability string
	// DriverVersion is the kernel driver version, e.g. "550.54.15".
	DriverVersion string
	// CUDADriverVersion is the CUDA version the driver supports, e.g. "12.4".
	CUDADriverVersion string
	// MemoryBytes is the total framebuffer memory.
	MemoryBytes int64
	// ReservedMemoryBytes is the part of MemoryBytes the driver keeps for
	// itself, which no process can allocate (nvmlDeviceGetMemoryInfo_v2's
	// reserved); 0 when unknown (a driver without the v2 call) or none.
	// Always below MemoryBytes.
	ReservedMemoryBytes int64
	// PCIBusID is the canonical domain:bus:device.function, e.g. "0000:18:00.0".
	PCIBusID string
	// NUMANode is the NUMA node the card is attached to, nil when unknown.
	NUMANode *int
	// NVLinkPeers lists the indexes of the cards this one reaches directly
	// over an active NVLink (or through an NVSwitch), sorted, without itself.
	NVLinkPeers []int
	// FabricCliqueID identifies the NVLink fabric clique ("<clusterUUID>/<cliqueID>")
	// where NVML reports one (multi-node NVLink systems); empty otherwise.
	FabricCliqueID string
	// MIG is the card's Multi-Instance GPU mode and profiles; nil when the
	// card cannot do MIG.
	MIG *MIG
}

// UnreservedMemoryBytes is the memory processes on the card can allocate:
// MemoryBytes less ReservedMemoryBytes. Shares are sized from it
// (pkg/resourceslices); 0 when the card reports no memory.
func (g GPU) UnreservedMemoryBytes() int64 {
	if g.MemoryBytes <= 0 {
		return 0
	}
	if g.ReservedMemoryBytes <= 0 || g.ReservedMemoryBytes >= g.MemoryBytes {
		return g.MemoryBytes
	}
	return g.MemoryBytes - g.ReservedMemoryBytes
}

// Source lists the GPUs of this node.
type Source interface {
	// GPUs returns every usable card, sorted by Index. A card whose optional
	// properties cannot be read is still returned with those fields empty;
	// an error means the node's cards could not be listed at all.
	GPUs(ctx context.Context) ([]GPU, error)
}
