//go:build cgo

package nvmlgpu

import (
	"context"
	"errors"
	"fmt"
	"math"
	"regexp"
	"sort"
	"sync"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/google/uuid"
	"k8s.io/klog/v2"

	"github.com/tangram-gpu/tangram/pkg/gpu"
)

// maxNUMANode bounds plausible NUMA node IDs: Linux supports at most 1024
// nodes. NVML hands back an unsigned value, so "none" can arrive as 2^32-1.
const maxNUMANode = 1 << 10

var driverVersionForm = regexp.MustCompile(`^[0-9]+(\.[0-9]+){1,3}$`)

type source struct {
	lib nvml.Interface
	// noMemoryV2 logs, once per source, that the driver lacks
	// nvmlDeviceGetMemoryInfo_v2 and reserved memory is unknown.
	noMemoryV2 sync.Once

	// smSeen is, per card UUID, the newest SM utilisation sample read
	// (GPUProcesses): the next read asks for the samples after it.
	smMu   sync.Mutex
	smSeen map[string]uint64
}

// New returns a Source reading the cards from lib, which must already be
// initialised (Open does that for the real library; tests pass a go-nvml
// mock). Only cgo builds have New.
func New(lib nvml.Interface) gpu.Source {
	return &source{lib: lib}
}

// GPUs lists the cards. Only a failure to count the cards is an error; any
// other odd value is logged and left out of the card reporting it.
func (s *source) GPUs(ctx context.Context) ([]gpu.GPU, error) {
	logger := klog.FromContext(ctx)
	count, ret := s.lib.DeviceGetCount()
	if ret != nvml.SUCCESS {
		return nil, fmt.Errorf("listing GPUs: nvmlDeviceGetCount: %w", ret)
	}
	driverVersion := s.driverVersion(logger)
	cudaDriverVersion := s.cudaDriverVersion(logger)

	var gpus []gpu.GPU
	var links []cardLinks
	for i := 0; i < count; i++ {
		logger := klog.LoggerWithValues(logger, "index", i)
		dev, ret := s.lib.DeviceGetHandleByIndex(i)
		if ret != nvml.SUCCESS || dev == nil {
			err := error(ret)
			if ret == nvml.SUCCESS {
				err = errors.New("NVML returned no device")
			}
			logger.Error(err, "Skipping GPU: cannot get its NVML handle")
			continue
		}
		r := cardReader{dev: dev, logger: logger, noMemoryV2: &s.noMemoryV2}
		busID := r.pciBusID()
		id, ret := dev.GetUUID()
		if ret != nvml.SUCCESS || id == "" {
			err := error(ret)
			if ret == nvml.SUCCESS {
				err = errors.New("empty UUID")
			}
			logger.Error(err, "Skipping GPU: cannot read its UUID", "pciBusID", busID)
			// Still known as a GPU, so a link to it is not taken for an NVSwitch.
			links = append(links, cardLinks{index: -1, busID: busID})
			continue
		}
		r.logger = klog.LoggerWithValues(logger, "uuid", id)
		memory, reserved := r.memoryBytes()
		g := gpu.GPU{
			Index:                 i,
			Minor:                 r.minor(),
			UUID:                  id,
			ProductName:           r.productName(),
			Brand:                 r.brand(),
			Architecture:          r.architecture(),
			CUDAComputeCapability: r.computeCapability(),
			DriverVersion:         driverVersion,
			CUDADriverVersion:     cudaDriverVersion,
			MemoryBytes:           memory,
			ReservedMemoryBytes:   reserved,
			PCIBusID:              busID,
			NUMANode:              r.numaNode(),
			FabricCliqueID:        r.fabricCliqueID(),
			MIG:                   r.mig(memory),
		}
		gpus = append(gpus, g)
		links = append(links, cardLinks{index: i, busID: busID, remotes: r.nvlinkRemotes()})
	}
	peers := nvlinkPeers(links)
	for i := range gpus {
		gpus[i].NVLinkPeers = peers[gpus[i].Index]
	}
	sort.Slice(gpus, func(a, b int) bool { return gpus[a].Index < gpus[b].Index })
	return gpus, nil
}

func (s *source) driverVersion(logger klog.Logger) string {
	v, ret := s.lib.SystemGetDriverVersion()
	if ret != nvml.SUCCESS {
		logger.Error(ret, "Leaving out the driver version: NVML cannot report it")
		return ""
	}
	if !driverVersionForm.MatchString(v) {
		logger.Info("Leaving out the driver version: NVML reports an unparsable one", "driverVersion", v)
		return ""
	}
	return v
}

// cudaDriverVersion turns NVML's 1000*major + 10*minor (12040) into "12.4".
func (s *source) cudaDriverVersion(logger klog.Logger) string {
	v, ret := s.lib.SystemGetCudaDriverVersion_v2()
	if ret != nvml.SUCCESS {
		logger.Error(ret, "Leaving out the CUDA driver version: NVML cannot report it")
		return ""
	}
	if v < 1000 || v%10 != 0 {
		logger.Info("Leaving out the CUDA driver version: NVML reports an unparsable one", "cudaDriverVersion", v)
		return ""
	}
	return fmt.Sprintf("%d.%d", v/1000, (v%1000)/10)
}

// cardReader reads one card's optional values, logging and leaving out what
// the card cannot report.
type cardReader struct {
	dev    nvml.Device
	logger klog.Logger
	// noMemoryV2 is the source's: the fallback to the v1 memory call is
	// logged once, not once per card.
	noMemoryV2 *sync.Once
}

// leaveOut logs a value the card did not report. An unsupported call is
// normal for many cards (no NUMA on a workstation, no NVLink on PCIe), so it
// is logged only at higher verbosity.
func (r cardReader) leaveOut(field string, ret nvml.Return) {
	if errors.Is(ret, nvml.ERROR_NOT_SUPPORTED) {
		r.logger.V(2).Info("Leaving out a value the GPU does not support", "field", field)
		return
	}
	r.logger.Error(ret, "Leaving out a value the GPU cannot report", "field", field)
}

func (r cardReader) oddValue(field string, value any) {
	r.logger.Info("Leaving out a value the GPU reports oddly", "field", field, "value", value)
}

func (r cardReader) minor() int {
	m, ret := r.dev.GetMinorNumber()
	if ret != nvml.SUCCESS {
		r.leaveOut("minor", ret)
		return 0
	}
	if m < 0 {
		r.oddValue("minor", m)
		return 0
	}
	return m
}

func (r cardReader) productName() string {
	name, ret := r.dev.GetName()
	if ret != nvml.SUCCESS {
		r.leaveOut("productName", ret)
		return ""
	}
	return name
}

func (r cardReader) brand() string {
	b, ret := r.dev.GetBrand()
	if ret != nvml.SUCCESS {
		r.leaveOut("brand", ret)
		return ""
	}
	name, ok := brandNames[b]
	if !ok {
		r.oddValue("brand", int(b))
	}
	return name
}

func (r cardReader) architecture() string {
	a, ret := r.dev.GetArchitecture()
	if ret != nvml.SUCCESS {
		r.leaveOut("architecture", ret)
		return ""
	}
	name, ok := architectureNames[a]
	if !ok {
		r.oddValue("architecture", uint32(a))
	}
	return name
}

func (r cardReader) computeCapability() string {
	major, minor, ret := r.dev.GetCudaComputeCapability()
	if ret != nvml.SUCCESS {
		r.leaveOut("cudaComputeCapability", ret)
		return ""
	}
	if major <= 0 || minor < 0 {
		r.oddValue("cudaComputeCapability", fmt.Sprintf("%d.%d", major, minor))
		return ""
	}
	return fmt.Sprintf("%d.%d", major, minor)
}

// memoryBytes returns the card's total memory and the part of it the driver
// keeps (reserved: no process can allocate it), from
// nvmlDeviceGetMemoryInfo_v2 (nvmlMemory_v2_t: total, reserved, free, used;
// NVIDIA-FACTS.md, "Memory the driver keeps"). A driver without the v2 call
// (FUNCTION_NOT_FOUND, NOT_SUPPORTED) is asked the v1 call, which has no
// reserved field (it counts that memory as used), so reserved is 0: unknown.
// A reserved amount not below the total is odd and left out (0).
func (r cardReader) memoryBytes() (total, reserved int64) {
	m, ret := r.dev.GetMemoryInfo_v2()
	if errors.Is(ret, nvml.ERROR_FUNCTION_NOT_FOUND) || errors.Is(ret, nvml.ERROR_NOT_SUPPORTED) {
		r.noMemoryV2.Do(func() {
			r.logger.Info("NVML has no nvmlDeviceGetMemoryInfo_v2; reading total memory with the v1 call, the memory the driver reserves is unknown and counted as none",
				"reason", ret.Error())
		})
		v1, ret := r.dev.GetMemoryInfo()
		if ret != nvml.SUCCESS {
			r.leaveOut("memory", ret)
			return 0, 0
		}
		m = nvml.Memory_v2{Total: v1.Total}
	} else if ret != nvml.SUCCESS {
		r.leaveOut("memory", ret)
		return 0, 0
	}
	if m.Total == 0 || m.Total > math.MaxInt64 {
		r.oddValue("memory", m.Total)
		return 0, 0
	}
	if m.Reserved >= m.Total {
		r.oddValue("reservedMemory", m.Reserved)
		return int64(m.Total), 0
	}
	return int64(m.Total), int64(m.Reserved)
}

func (r cardReader) pciBusID() string {
	info, ret := r.dev.GetPciInfo()
	if ret != nvml.SUCCESS {
		r.leaveOut("pciBusID", ret)
		return ""
	}
	raw := busIDString(info)
	id, err := gpu.NormalizePCIBusID(raw)
	if err != nil {
		r.oddValue("pciBusID", raw)
		return ""
	}
	return id
}

func (r cardReader) numaNode() *int {
	n, ret := r.dev.GetNumaNodeId()
	if ret != nvml.SUCCESS {
		r.leaveOut("numaNode", ret)
		return nil
	}
	if n < 0 || n >= maxNUMANode {
		r.oddValue("numaNode", n)
		return nil
	}
	return &n
}

// nvlinkRemotes returns the canonical remote PCI bus ID of every active
// link. Links past the card's last one answer INVALID_ARGUMENT; a card
// without NVLink answers NOT_SUPPORTED for all.
func (r cardReader) nvlinkRemotes() []string {
	var remotes []string
	for link := 0; link < nvml.NVLINK_MAX_LINKS; link++ {
		state, ret := r.dev.GetNvLinkState(link)
		switch {
		case errors.Is(ret, nvml.ERROR_NOT_SUPPORTED):
			if link == 0 {
				r.logger.V(2).Info("GPU has no NVLink")
			}
			return remotes
		case errors.Is(ret, nvml.ERROR_INVALID_ARGUMENT):
			return remotes // past the last link
		case ret != nvml.SUCCESS:
			r.logger.Error(ret, "Ignoring an NVLink whose state cannot be read", "link", link)
			continue
		}
		if state != nvml.FEATURE_ENABLED {
			continue
		}
		info, ret := r.dev.GetNvLinkRemotePciInfo(link)
		if ret != nvml.SUCCESS {
			r.logger.Error(ret, "Ignoring an active NVLink whose far end cannot be read", "link", link)
			continue
		}
		raw := busIDString(info)
		remote, err := gpu.NormalizePCIBusID(raw)
		if err != nil {
			r.logger.Info("Ignoring an active NVLink with an unparsable far end", "link", link, "remotePCIBusID", raw)
			continue
		}
		remotes = append(remotes, remote)
	}
	return remotes
}

// fabricCliqueID returns "<clusterUUID>/<cliqueID>" for a card that has
// joined an NVLink fabric (multi-node NVLink); empty otherwise.
func (r cardReader) fabricCliqueID() string {
	info, ret := r.dev.GetGpuFabricInfo()
	if ret != nvml.SUCCESS {
		r.leaveOut("fabricCliqueID", ret)
		return ""
	}
	if info.State == nvml.GPU_FABRIC_STATE_NOT_SUPPORTED {
		return ""
	}
	if info.State != nvml.GPU_FABRIC_STATE_COMPLETED {
		r.logger.Info("Leaving out the fabric clique: the card has not finished joining the NVLink fabric", "fabricState", info.State)
		return ""
	}
	if status := nvml.Return(info.Status); status != nvml.SUCCESS {
		r.logger.Error(status, "Leaving out the fabric clique: joining the NVLink fabric failed")
		return ""
	}
	cluster := uuid.UUID(info.ClusterUuid)
	if cluster == uuid.Nil {
		return "" // a fabric without a cluster: nothing to match across nodes
	}
	return fmt.Sprintf("%s/%d", cluster, info.CliqueId)
}

// busIDString reads NVML's NUL-terminated bus ID, preferring the long form.
func busIDString(info nvml.PciInfo) string {
	if s := cString(info.BusId[:]); s != "" {
		return s
	}
	return cString(info.BusIdLegacy[:])
}

func cString(b []int8) string {
	out := make([]byte, 0, len(b))
	for _, c := range b {
		if c == 0 {
			break
		}
		out = append(out, byte(c))
	}
	return string(out)
}
