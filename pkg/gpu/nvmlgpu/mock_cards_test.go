//go:build cgo

package nvmlgpu

import (
	"fmt"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
)

// go-nvml ships only a DGX A100 mock, and it implements neither the NVLink
// nor the NUMA nor the fabric calls. These helpers build mock servers from a
// plain description of each card, so every test states exactly what NVML
// reports and what Tangram must make of it.

// mockCard is what NVML reports for one card. Zero Return fields mean
// SUCCESS.
type mockCard struct {
	uuid    string
	uuidRet nvml.Return
	name    string
	brand   nvml.BrandType
	arch    nvml.DeviceArchitecture
	ccMajor int
	ccMinor int
	minor   int
	memory  uint64
	// reserved is nvmlMemory_v2_t.reserved: memory the driver keeps.
	reserved uint64
	// memoryV2Ret makes nvmlDeviceGetMemoryInfo_v2 fail this way (e.g.
	// FUNCTION_NOT_FOUND: a driver without it); zero: it answers like the
	// card's other calls.
	memoryV2Ret nvml.Return
	// busID is NVML's form, "00000000:1B:00.0".
	busID    string
	numa     int
	numaRet  nvml.Return
	links    []mockLink
	linksRet nvml.Return // returned for every link's state when set
	fabric   nvml.GpuFabricInfo
	// otherRet makes every optional call (not UUID, NVLink) fail this way.
	otherRet nvml.Return
	// mig is what NVML reports of MIG; nil: the card cannot do MIG
	// (NOT_SUPPORTED).
	mig *mockMIG
}

// mockMIG is a card's MIG mode and GPU instance profiles.
type mockMIG struct {
	modeRet          nvml.Return
	current, pending int
	// profiles by NVML profile value; a value not here is NOT_SUPPORTED
	// below nvml.GPU_INSTANCE_PROFILE_COUNT, INVALID_ARGUMENT from there.
	profiles   map[int]nvml.GpuInstanceProfileInfo
	profileRet map[int]nvml.Return
	// placements by profile ID; placementRet fails a profile ID's query.
	placements   map[uint32][]nvml.GpuInstancePlacement
	placementRet map[uint32]nvml.Return
}

func (m *mockMIG) mode() (int, int, nvml.Return) {
	if m == nil {
		return 0, 0, nvml.ERROR_NOT_SUPPORTED
	}
	return m.current, m.pending, m.modeRet
}

func (m *mockMIG) profileInfo(profile int) (nvml.GpuInstanceProfileInfo, nvml.Return) {
	if m == nil {
		return nvml.GpuInstanceProfileInfo{}, nvml.ERROR_NOT_SUPPORTED
	}
	if profile >= nvml.GPU_INSTANCE_PROFILE_COUNT {
		return nvml.GpuInstanceProfileInfo{}, nvml.ERROR_INVALID_ARGUMENT
	}
	if ret := m.profileRet[profile]; ret != nvml.SUCCESS {
		return nvml.GpuInstanceProfileInfo{}, ret
	}
	info, ok := m.profiles[profile]
	if !ok {
		return nvml.GpuInstanceProfileInfo{}, nvml.ERROR_NOT_SUPPORTED
	}
	return info, nvml.SUCCESS
}

func (m *mockMIG) possiblePlacements(info *nvml.GpuInstanceProfileInfo) ([]nvml.GpuInstancePlacement, nvml.Return) {
	if m == nil {
		return nil, nvml.ERROR_NOT_SUPPORTED
	}
	if ret := m.placementRet[info.Id]; ret != nvml.SUCCESS {
		return nil, ret
	}
	return m.placements[info.Id], nvml.SUCCESS
}

// mockLink is one NVLink; remote is the far end's bus ID in NVML's form.
type mockLink struct {
	active    bool
	remote    string
	stateRet  nvml.Return
	remoteRet nvml.Return
}

// mockSystem is what NVML reports for the node.
type mockSystem struct {
	driverVersion     string
	driverVersionRet  nvml.Return
	cudaVersion       int
	cudaVersionRet    nvml.Return
	countRet          nvml.Return
	handleRet         map[int]nvml.Return // per index
	initRet           nvml.Return
	shutdownCalls     *int
	cards             []*mockCard
	unsupportedFabric bool
}

func pciInfo(busID string) nvml.PciInfo {
	var info nvml.PciInfo
	for i := 0; i < len(busID) && i < len(info.BusId)-1; i++ {
		info.BusId[i] = int8(busID[i])
	}
	return info
}

func (c *mockCard) device(unsupportedFabric bool) *mock.Device {
	fail := c.otherRet
	return &mock.Device{
		GetUUIDFunc: func() (string, nvml.Return) {
			if c.uuidRet != nvml.SUCCESS {
				return "", c.uuidRet
			}
			return c.uuid, nvml.SUCCESS
		},
		GetNameFunc:         func() (string, nvml.Return) { return c.name, fail },
		GetBrandFunc:        func() (nvml.BrandType, nvml.Return) { return c.brand, fail },
		GetArchitectureFunc: func() (nvml.DeviceArchitecture, nvml.Return) { return c.arch, fail },
		GetCudaComputeCapabilityFunc: func() (int, int, nvml.Return) {
			return c.ccMajor, c.ccMinor, fail
		},
		GetMinorNumberFunc: func() (int, nvml.Return) { return c.minor, fail },
		// As NVML documents them: v1 counts the reserved memory as used,
		// v2 reports it apart.
		GetMemoryInfoFunc: func() (nvml.Memory, nvml.Return) {
			return nvml.Memory{Total: c.memory, Free: c.memory - min(c.reserved, c.memory), Used: min(c.reserved, c.memory)}, fail
		},
		GetMemoryInfo_v2Func: func() (nvml.Memory_v2, nvml.Return) {
			if c.memoryV2Ret != nvml.SUCCESS {
				return nvml.Memory_v2{}, c.memoryV2Ret
			}
			free := c.memory - min(c.reserved, c.memory)
			return nvml.Memory_v2{Total: c.memory, Reserved: c.reserved, Free: free}, fail
		},
		GetPciInfoFunc: func() (nvml.PciInfo, nvml.Return) { return pciInfo(c.busID), fail },
		GetNumaNodeIdFunc: func() (int, nvml.Return) {
			if c.numaRet != nvml.SUCCESS {
				return 0, c.numaRet
			}
			return c.numa, fail
		},
		GetNvLinkStateFunc: func(link int) (nvml.EnableState, nvml.Return) {
			if c.linksRet != nvml.SUCCESS {
				return nvml.FEATURE_DISABLED, c.linksRet
			}
			if link < 0 || link >= len(c.links) {
				return nvml.FEATURE_DISABLED, nvml.ERROR_INVALID_ARGUMENT
			}
			l := c.links[link]
			if l.stateRet != nvml.SUCCESS {
				return nvml.FEATURE_DISABLED, l.stateRet
			}
			if l.active {
				return nvml.FEATURE_ENABLED, nvml.SUCCESS
			}
			return nvml.FEATURE_DISABLED, nvml.SUCCESS
		},
		GetNvLinkRemotePciInfoFunc: func(link int) (nvml.PciInfo, nvml.Return) {
			if link < 0 || link >= len(c.links) {
				return nvml.PciInfo{}, nvml.ERROR_INVALID_ARGUMENT
			}
			l := c.links[link]
			if l.remoteRet != nvml.SUCCESS {
				return nvml.PciInfo{}, l.remoteRet
			}
			return pciInfo(l.remote), nvml.SUCCESS
		},
		GetMigModeFunc:                       c.mig.mode,
		GetGpuInstanceProfileInfoFunc:        c.mig.profileInfo,
		GetGpuInstancePossiblePlacementsFunc: c.mig.possiblePlacements,
		GetGpuFabricInfoFunc: func() (nvml.GpuFabricInfo, nvml.Return) {
			if unsupportedFabric {
				return nvml.GpuFabricInfo{}, nvml.ERROR_NOT_SUPPORTED
			}
			return c.fabric, fail
		},
	}
}

func (s *mockSystem) server() *mock.Interface {
	devices := make([]*mock.Device, len(s.cards))
	for i, c := range s.cards {
		devices[i] = c.device(s.unsupportedFabric)
	}
	return &mock.Interface{
		InitFunc: func() nvml.Return { return s.initRet },
		ShutdownFunc: func() nvml.Return {
			if s.shutdownCalls != nil {
				*s.shutdownCalls++
			}
			return nvml.SUCCESS
		},
		SystemGetDriverVersionFunc: func() (string, nvml.Return) {
			return s.driverVersion, s.driverVersionRet
		},
		SystemGetCudaDriverVersion_v2Func: func() (int, nvml.Return) {
			return s.cudaVersion, s.cudaVersionRet
		},
		DeviceGetCountFunc: func() (int, nvml.Return) {
			if s.countRet != nvml.SUCCESS {
				return 0, s.countRet
			}
			return len(devices), nvml.SUCCESS
		},
		DeviceGetHandleByIndexFunc: func(i int) (nvml.Device, nvml.Return) {
			if ret := s.handleRet[i]; ret != nvml.SUCCESS {
				return nil, ret
			}
			if i < 0 || i >= len(devices) {
				return nil, nvml.ERROR_INVALID_ARGUMENT
			}
			return devices[i], nvml.SUCCESS
		},
	}
}

// H100 SXM5 80GB as NVML reports it: 81559 MiB total, 18 NVLink4 links.
const h100Memory = 81559 << 20

// dgxH100BusIDs are a DGX H100's GPU bus IDs in NVML's form.
var dgxH100BusIDs = []string{
	"00000000:1B:00.0", "00000000:43:00.0", "00000000:52:00.0", "00000000:61:00.0",
	"00000000:9D:00.0", "00000000:C3:00.0", "00000000:D1:00.0", "00000000:DF:00.0",
}

// dgxH100NVSwitches are the four NVSwitches every card's links end on.
var dgxH100NVSwitches = []string{"00000000:05:00.0", "00000000:06:00.0", "00000000:07:00.0", "00000000:08:00.0"}

func mockUUID(kind string, i int) string {
	return fmt.Sprintf("GPU-%s0000-0000-4000-8000-%012d", kind, i)
}

// newDGXH100 models a DGX H100: eight H100s, each with 18 active links
// spread 5/4/4/5 over four NVSwitches, four cards per NUMA node, and a
// fabric that reports "not supported" (single-node NVSwitch systems have no
// multi-node clique).
func newDGXH100() *mockSystem {
	s := &mockSystem{driverVersion: "580.95.05", cudaVersion: 13000}
	switchOfLink := []int{0, 0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3, 3}
	for i, busID := range dgxH100BusIDs {
		c := &mockCard{
			uuid:    mockUUID("h100", i),
			name:    "NVIDIA H100 80GB HBM3",
			brand:   nvml.BRAND_NVIDIA,
			arch:    nvml.DEVICE_ARCH_HOPPER,
			ccMajor: 9, ccMinor: 0,
			minor:  i,
			memory: h100Memory,
			busID:  busID,
			numa:   i / 4,
			fabric: nvml.GpuFabricInfo{State: nvml.GPU_FABRIC_STATE_NOT_SUPPORTED},
		}
		for _, sw := range switchOfLink {
			c.links = append(c.links, mockLink{active: true, remote: dgxH100NVSwitches[sw]})
		}
		s.cards = append(s.cards, c)
	}
	return s
}

// A100 PCIe 40GB as NVML reports it: 40960 MiB, 12 NVLink3 links, all on the
// bridge to its partner.
const a100PCIeMemory = 40960 << 20

var pcieA100BusIDs = []string{
	"00000000:17:00.0", "00000000:31:00.0", "00000000:4B:00.0", "00000000:65:00.0",
	"00000000:98:00.0", "00000000:B1:00.0", "00000000:CA:00.0", "00000000:E3:00.0",
}

// newPCIeA100Pairs models eight A100 PCIe cards joined in pairs 0-1, 2-3,
// 4-5, 6-7 by NVLink bridges: each link's far end is the partner card.
func newPCIeA100Pairs() *mockSystem {
	s := &mockSystem{driverVersion: "550.54.15", cudaVersion: 12040}
	for i, busID := range pcieA100BusIDs {
		c := &mockCard{
			uuid:    mockUUID("a100", i),
			name:    "NVIDIA A100-PCIE-40GB",
			brand:   nvml.BRAND_NVIDIA,
			arch:    nvml.DEVICE_ARCH_AMPERE,
			ccMajor: 8, ccMinor: 0,
			minor:  i,
			memory: a100PCIeMemory,
			busID:  busID,
			numa:   i / 4,
		}
		partner := pcieA100BusIDs[i^1]
		for link := 0; link < 12; link++ {
			c.links = append(c.links, mockLink{active: true, remote: partner})
		}
		s.cards = append(s.cards, c)
	}
	return s
}
