package fakegpu

import (
	"context"
	"fmt"
	"slices"
	"strconv"

	"github.com/google/uuid"

	"github.com/tangram-gpu/tangram/pkg/device"
	"github.com/tangram-gpu/tangram/pkg/gpu"
)

// fakeUUIDNamespace seeds the name-based UUIDs of fake cards. Changing it
// changes every fake UUID, so it is fixed.
var fakeUUIDNamespace = uuid.NewSHA1(uuid.NameSpaceDNS, []byte("fake."+device.DriverName))

// FakeGPUUUID returns the UUID of fake card index on node nodeName: stable
// across restarts (a SHA-1 name-based UUID of node and index) and different
// on every node, in NVML's "GPU-<uuid>" form.
func FakeGPUUUID(nodeName string, index int) string {
	return "GPU-" + uuid.NewSHA1(fakeUUIDNamespace, []byte(nodeName+"/"+strconv.Itoa(index))).String()
}

type fakeSource struct {
	gpus []gpu.GPU
	err  error
}

// NewFakeSource returns a Source that reports the cards of profile p as the
// cards of node nodeName. The profile is checked (and copied) here; if it is
// invalid, GPUs returns the error. A profile built in Go is used as written:
// the fake-driver defaults apply only to parsed files.
func NewFakeSource(nodeName string, p *Profile) gpu.Source {
	gpus, err := fakeGPUs(nodeName, p)
	return &fakeSource{gpus: gpus, err: err}
}

func (s *fakeSource) GPUs(ctx context.Context) ([]gpu.GPU, error) {
	if s.err != nil {
		return nil, s.err
	}
	return cloneGPUs(s.gpus), nil
}

func fakeGPUs(nodeName string, p *Profile) ([]gpu.GPU, error) {
	if nodeName == "" {
		return nil, fmt.Errorf("fake GPUs: the node name is empty; it is needed to derive the cards' UUIDs")
	}
	if err := p.Validate(); err != nil {
		return nil, fmt.Errorf("fake GPUs: %w", err)
	}
	// Work on a copy so that symmetrising links does not change the caller's
	// profile.
	cp := &Profile{Name: p.Name, GPUs: make([]ProfileGPU, len(p.GPUs))}
	copy(cp.GPUs, p.GPUs)
	for i := range cp.GPUs {
		cp.GPUs[i].NVLinks = slices.Clone(cp.GPUs[i].NVLinks)
	}
	symmetriseNVLinks(cp)

	gpus := make([]gpu.GPU, 0, len(cp.GPUs))
	for _, g := range cp.GPUs {
		minor := g.Index
		if g.Minor != nil {
			minor = *g.Minor
		}
		busID := ""
		if g.PCIBusID != "" {
			busID, _ = gpu.NormalizePCIBusID(g.PCIBusID) // validated above
		}
		var numa *int
		if g.NUMANode != nil {
			n := *g.NUMANode
			numa = &n
		}
		gpus = append(gpus, gpu.GPU{
			Index:                 g.Index,
			Minor:                 minor,
			UUID:                  FakeGPUUUID(nodeName, g.Index),
			ProductName:           g.ProductName,
			Brand:                 g.Brand,
			Architecture:          g.Architecture,
			CUDAComputeCapability: g.CUDAComputeCapability,
			DriverVersion:         g.DriverVersion,
			CUDADriverVersion:     g.CUDADriverVersion,
			MemoryBytes:           memoryBytes(g.Memory),
			PCIBusID:              busID,
			NUMANode:              numa,
			NVLinkPeers:           g.NVLinks,
			FabricCliqueID:        g.FabricCliqueID,
			MIG:                   migInfo(g),
		})
	}
	slices.SortFunc(gpus, func(a, b gpu.GPU) int { return a.Index - b.Index })
	return gpus, nil
}

// cloneGPUs deep-copies a card list so callers cannot change a source's
// state through the slices and pointers they get.
func cloneGPUs(in []gpu.GPU) []gpu.GPU {
	out := make([]gpu.GPU, len(in))
	for i, g := range in {
		out[i] = g
		out[i].NVLinkPeers = nil
		if len(g.NVLinkPeers) > 0 {
			out[i].NVLinkPeers = slices.Clone(g.NVLinkPeers)
		}
		if g.NUMANode != nil {
			n := *g.NUMANode
			out[i].NUMANode = &n
		}
		out[i].MIG = g.MIG.Clone()
	}
	return out
}
