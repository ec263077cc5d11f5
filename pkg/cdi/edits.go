package cdi

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	cdiparser "tags.cncf.io/container-device-interface/pkg/parser"
	cdispec "tags.cncf.io/container-device-interface/specs-go"

	"github.com/tangram-gpu/tangram/api/gpu/v1alpha1"
	"github.com/tangram-gpu/tangram/pkg/device"
	"github.com/tangram-gpu/tangram/pkg/gpu"
)

// Environment variables set in containers. The CUDA_MPS_* and
// NVIDIA_VISIBLE_DEVICES names are defined by NVIDIA; TANGRAM_* are ours.
const (
	EnvVisibleDevices     = "NVIDIA_VISIBLE_DEVICES"
	EnvMPSPipeDirectory   = "CUDA_MPS_PIPE_DIRECTORY"
	EnvMPSPinnedMemLimit  = "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"
	EnvMPSActiveThreadPct = "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"
	EnvClaim              = "TANGRAM_CLAIM"
	EnvClaimUID           = "TANGRAM_CLAIM_UID"
	EnvGPUDevices         = "TANGRAM_GPU_DEVICES"
	EnvGPUUUIDs           = "TANGRAM_GPU_UUIDS"
	EnvGPUMemoryLimitMiB  = "TANGRAM_GPU_MEMORY_LIMIT_MIB"
	EnvGPUComputePercent  = "TANGRAM_GPU_COMPUTE_PERCENT"
	EnvGPUSharingBackend  = "TANGRAM_SHARING_BACKEND"
	// EnvGPUPrefix starts the per-card variables TANGRAM_GPU_<index>_UUID,
	// _MEMORY_LIMIT_MIB, _COMPUTE_PERCENT and _SHARING_BACKEND.
	EnvGPUPrefix           = "TANGRAM_GPU_"
	sharingModeExclusive   = "exclusive"
	mib                    = 1 << 20
	fullComputePercent     = 100
	cdiDeviceNameSeparator = "-"
)

// Claim identifies the claim a spec is written for.
type Claim struct {
	UID       string
	Namespace string
	Name      string
}

// Result is one device result of our driver in the claim's allocation.
type Result struct {
	// Request is the result's request name ("req" or "req/sub").
	Request string
	// Device is the ResourceSlice device name, "gpu-<index>".
	Device string
	// GPU is the card behind Device; its UUID must be set.
	GPU gpu.GPU
	// ShareID is the allocation's share ID; empty for a device that does not
	// allow multiple allocations.
	ShareID string
	// ConsumedCapacity is the allocation's consumed capacity: "memory" in
	// bytes and "compute" in percent.
	ConsumedCapacity map[resourceapi.QualifiedName]resource.Quantity
	// AllocatableMemoryBytes is the most memory one allocation may consume
	// on the card: the maximum of the memory request policy published for
	// it, i.e. the card's memory rounded down to the share step. 0 means the
	// card's memory.
	AllocatableMemoryBytes int64
	// AdminAccess marks a result that monitors the card without owning any
	// of it: it is never a share and gets no limits.
	AdminAccess bool
	// Config is the resolved config of Request; nil means the default.
	Config *v1alpha1.GpuConfig
	// MPSPipeDir is the pipe directory of the MPS daemon serving this card
	// for this claim; required for shares whose backend is mps. All mps
	// shares of one claim must use the same directory, because a container
	// can reach only one MPS control daemon.
	MPSPipeDir string
	// MemoryLimitHook, when set, gives a share's device a createRuntime
	// hook that holds the container to the claim's memory on the card
	// (nodes with hard enforcement only). Whole cards get none.
	MemoryLimitHook *MemoryLimitHook
}

// DeviceEdits is one CDI device of the claim's spec, in Result order.
type DeviceEdits struct {
	// Name is the CDI device name, "<claimUID>-<device>[-<shareID>]".
	Name string
	// ID is the fully qualified CDI device ID returned to the kubelet.
	ID string
	// Edits holds the environment and mounts of the device.
	Edits cdispec.ContainerEdits
	// MPS reports whether the device's card is an MPS share, so the
	// device carries the MPS client settings.
	MPS bool
}

// ClaimEdits is everything ComputeClaimEdits derives for one claim.
type ClaimEdits struct {
	Claim   Claim
	Devices []DeviceEdits
	// ClaimWide, set when the claim's results come from several requests,
	// is the device that gives a container naming the whole claim the
	// claim's lists; see ComputeClaimEdits.
	ClaimWide *DeviceEdits
	// MPS reports whether the claim's containers connect to an MPS daemon.
	MPS bool
}

// IsShare reports whether a result is a share that needs isolation: it does
// not hold the whole card (device.HoldsWholeCard). A whole card gets no MPS,
// so whole-card work is never slowed by a daemon. The bound is the card's
// allocatable memory, not its memory: a card whose memory is not a whole
// number of share steps publishes less as the default and maximum. Admin
// access (monitoring) is never a share: it consumes nothing and must see the
// card as it is, not through an MPS client limit.
func IsShare(r Result) bool {
	if r.AdminAccess {
		return false
	}
	allocatable := r.GPU.MemoryBytes
	if r.AllocatableMemoryBytes > 0 && r.AllocatableMemoryBytes < allocatable {
		allocatable = r.AllocatableMemoryBytes
	}
	return !device.HoldsWholeCard(r.ShareID != "", device.ConsumedMemory(r.ConsumedCapacity), allocatable)
}

// DeviceName is the CDI device name of a result, reduced to the characters
// CDI allows (letters, digits, '_', '-', '.', ':'); others become '_'.
func DeviceName(claimUID, device, shareID string) string {
	name := claimUID + cdiDeviceNameSeparator + device
	if shareID != "" {
		name += cdiDeviceNameSeparator + shareID
	}
	return strings.Map(func(r rune) rune {
		if cdiparser.IsAlphaNumeric(r) || r == '_' || r == '-' || r == '.' || r == ':' {
			return r
		}
		return '_'
	}, name)
}

// DeviceID is the fully qualified CDI ID of a device name.
func DeviceID(name string) string {
	return cdiparser.QualifiedName(device.CDIVendor, device.CDIClass, name)
}

// card aggregates the results of one physical card within a claim.
type card struct {
	index    int
	device   string
	uuid     string
	memory   int64 // the card's memory
	whole    bool
	backend  v1alpha1.SharingBackend
	memBytes int64 // sum over shares; the card's memory when whole
	compute  int64 // sum of requested compute over shares
	// defaultCap is the config's defaultActiveThreadPercentage, 0 if unset.
	defaultCap int32
	// percent is the compute share shown to the workload (100 = no limit);
	// threadCap is the MPS active-thread cap, 0 for none. Set by finish.
	percent   int32
	threadCap int32
}

// finish derives percent and threadCap: requested compute wins, then the
// config's default cap (MPS only), else the whole card.
func (c *card) finish() {
	c.percent, c.threadCap = fullComputePercent, 0
	switch {
	case c.whole:
	case c.compute > 0:
		c.percent = int32(min(c.compute, fullComputePercent))
		if c.backend == v1alpha1.BackendMPS {
			c.threadCap = c.percent
		}
	case c.backend == v1alpha1.BackendMPS && c.defaultCap > 0:
		c.percent, c.threadCap = c.defaultCap, c.defaultCap
	}
}

// ClaimWideRequest is the request name the plugin gives the kubelet for a
// claim's claim-wide CDI device (see ComputeClaimEdits). It contains a dot,
// so it is never the name of a request (a DNS label): the kubelet injects
// the device only into containers that name the claim without a request.
const ClaimWideRequest = "tangram.whole-claim"

// ClaimWideDeviceName is the CDI device name of a claim's claim-wide device.
func ClaimWideDeviceName(claimUID string) string {
	return DeviceName(claimUID, "claim", "")
}

// NeedsClaimWideDevice reports whether results of these requests need a
// claim-wide device: only when they come from more than one request, since
// with one request the request's view is the claim's.
func NeedsClaimWideDevice(requests []string) bool {
	for _, r := range requests {
		if BaseRequest(r) != BaseRequest(requests[0]) {
			return true
		}
	}
	return false
}

// BaseRequest is the request a result belongs to for the kubelet: a
// subrequest "req/sub" counts as "req".
func BaseRequest(request string) string {
	base, _, _ := strings.Cut(request, "/")
	return base
}

// ComputeClaimEdits derives the CDI devices and container edits of a claim.
// It is pure: same input, same output, no I/O.
//
// The kubelet injects into a container the CDI devices of the requests it
// names, and the runtime merges their environment key by key, the last
// device injected winning. The environment is therefore built so that any
// set of injected devices composes to the right view:
//   - per-card variables (TANGRAM_GPU_<index>_*) have keys of their own, so
//     a container gets exactly those of the cards it was given;
//   - list variables (NVIDIA_VISIBLE_DEVICES, TANGRAM_GPU_UUIDS, ...) carry,
//     on every device of a request, that request's cards; a container that
//     names the claim without a request additionally gets the claim-wide
//     device (ClaimEdits.ClaimWide), returned to the kubelet last, whose
//     lists cover the whole claim;
//   - MPS variables and mounts are carried only by devices of MPS-shared
//     cards; their values are claim-wide (a limit for a card the container
//     cannot see is moot, and the thread cap is the smallest of the claim),
//     so whichever such device comes last, the result is the same.
func ComputeClaimEdits(claim Claim, results []Result) (*ClaimEdits, error) {
	if claim.UID == "" {
		return nil, fmt.Errorf("computing CDI edits: claim %s/%s has no UID", claim.Namespace, claim.Name)
	}
	if len(results) == 0 {
		return nil, fmt.Errorf("computing CDI edits for claim %s/%s: no device results", claim.Namespace, claim.Name)
	}
	cards, pipeDir, err := aggregate(results)
	if err != nil {
		return nil, fmt.Errorf("computing CDI edits for claim %s/%s: %w", claim.Namespace, claim.Name, err)
	}
	byUUID := map[string]*card{}
	for _, c := range cards {
		byUUID[c.uuid] = c
	}
	requestCards := map[string][]*card{}
	var requests []string
	for _, r := range results {
		base := BaseRequest(r.Request)
		requests = append(requests, r.Request)
		c := byUUID[r.GPU.UUID]
		if !slices.Contains(requestCards[base], c) {
			requestCards[base] = append(requestCards[base], c)
		}
	}
	mps := mpsEdits(cards, pipeDir)

	out := &ClaimEdits{Claim: claim, MPS: pipeDir != ""}
	seen := map[string]bool{}
	for _, r := range results {
		name := DeviceName(claim.UID, r.Device, r.ShareID)
		if err := cdiparser.ValidateDeviceName(name); err != nil {
			return nil, fmt.Errorf("computing CDI edits for claim %s/%s: device %s: %w", claim.Namespace, claim.Name, r.Device, err)
		}
		if seen[name] {
			return nil, fmt.Errorf("computing CDI edits for claim %s/%s: device %s share %q appears twice in the allocation",
				claim.Namespace, claim.Name, r.Device, r.ShareID)
		}
		seen[name] = true
		c := byUUID[r.GPU.UUID]
		edits := cdispec.ContainerEdits{Env: listEnv(claim, requestCards[BaseRequest(r.Request)])}
		edits.Env = append(edits.Env, cardEnv(c)...)
		usesMPS := !c.whole && c.backend == v1alpha1.BackendMPS
		if usesMPS {
			edits.Env = append(edits.Env, mps.Env...)
			edits.Mounts = mps.Mounts
		}
		if h := r.MemoryLimitHook; h != nil && !c.whole {
			// The claim's memory on the card, so that shares of one card
			// in one claim add up, whichever of their devices a
			// container is given; the hooks of several are the same.
			edits.Hooks = append(edits.Hooks, h.hook(c.uuid, c.memBytes))
		}
		out.Devices = append(out.Devices, DeviceEdits{Name: name, ID: DeviceID(name), Edits: copyEdits(edits), MPS: usesMPS})
	}
	if NeedsClaimWideDevice(requests) {
		name := ClaimWideDeviceName(claim.UID)
		if seen[name] {
			return nil, fmt.Errorf("computing CDI edits for claim %s/%s: the claim-wide device name %s clashes with a device", claim.Namespace, claim.Name, name)
		}
		// Only the lists: the cards' own devices, injected before it, bring
		// the per-card variables, the MPS settings and the device nodes.
		edits := cdispec.ContainerEdits{Env: listEnv(claim, cards)}
		out.ClaimWide = &DeviceEdits{Name: name, ID: DeviceID(name), Edits: edits}
	}
	return out, nil
}

// aggregate groups results by card, in first-seen order, and checks that
// the MPS shares agree on one pipe directory.
func aggregate(results []Result) ([]*card, string, error) {
	var cards []*card
	byUUID := map[string]*card{}
	pipeDir := ""
	for _, r := range results {
		if r.GPU.UUID == "" {
			return nil, "", fmt.Errorf("device %s (request %q) has no GPU UUID", r.Device, r.Request)
		}
		c, ok := byUUID[r.GPU.UUID]
		if !ok {
			c = &card{index: r.GPU.Index, device: r.Device, uuid: r.GPU.UUID, memory: r.GPU.MemoryBytes}
			byUUID[r.GPU.UUID] = c
			cards = append(cards, c)
		}
		cfg := r.Config
		if cfg == nil {
			cfg = v1alpha1.Default()
		}
		if r.AdminAccess {
			// Monitoring makes the card visible and sets nothing: the
			// limits of the claim's own share of it, if any, still apply.
			continue
		}
		if q, ok := r.ConsumedCapacity[device.CapacityMemory]; ok {
			// IsShare compares exactly, so a value beyond int64 would
			// count as the whole card: refuse it instead.
			if _, err := Int64Value(q); err != nil {
				return nil, "", fmt.Errorf("device %s (request %q) consumed memory %s: %w", r.Device, r.Request, q.String(), err)
			}
		}
		if !IsShare(r) {
			c.whole = true
			continue
		}
		if c.whole {
			continue // see below: a whole card has no share limits
		}
		mem, compute, err := consumed(r)
		if err != nil {
			return nil, "", err
		}
		backend := cfg.Sharing.Backend
		if backend == "" {
			backend = v1alpha1.DefaultBackend
		}
		if c.backend != "" && c.backend != backend {
			return nil, "", fmt.Errorf("device %s has shares with sharing backends %q and %q in one claim; "+
				"use one backend for all requests that share a card", r.Device, c.backend, backend)
		}
		c.backend = backend
		c.memBytes += mem
		c.compute += compute
		if backend == v1alpha1.BackendMPS {
			if r.MPSPipeDir == "" {
				return nil, "", fmt.Errorf("share of device %s (request %q) uses MPS but no MPS pipe directory was given", r.Device, r.Request)
			}
			if pipeDir != "" && pipeDir != r.MPSPipeDir {
				return nil, "", fmt.Errorf("MPS shares of one claim use different pipe directories %q and %q; "+
					"a container can reach only one MPS daemon", pipeDir, r.MPSPipeDir)
			}
			pipeDir = r.MPSPipeDir
			if mps := cfg.Sharing.MPS; mps != nil && mps.DefaultActiveThreadPercentage != nil {
				c.defaultCap = *mps.DefaultActiveThreadPercentage
			}
		}
	}
	anyMPS := false
	for _, c := range cards {
		if c.whole || c.backend == "" {
			// Held whole, or only seen through admin access. (A whole card
			// next to a share of itself cannot be allocated; if it is, the
			// card is exclusive and no share limits apply.)
			c.whole, c.memBytes, c.backend, c.compute = true, c.memory, "", 0
		}
		anyMPS = anyMPS || c.backend == v1alpha1.BackendMPS
		c.finish()
	}
	if !anyMPS {
		pipeDir = ""
	}
	return cards, pipeDir, nil
}

// consumed reads a share's memory (bytes) and compute (percent).
func consumed(r Result) (int64, int64, error) {
	q := r.ConsumedCapacity[device.CapacityMemory]
	mem, err := Int64Value(q)
	if err != nil {
		return 0, 0, fmt.Errorf("device %s (request %q) consumed memory %s: %w", r.Device, r.Request, q.String(), err)
	}
	if mem < mib {
		return 0, 0, fmt.Errorf("share of device %s (request %q) consumed %s memory; a share needs at least 1Mi",
			r.Device, r.Request, q.String())
	}
	var compute int64
	if q, ok := r.ConsumedCapacity[device.CapacityCompute]; ok {
		compute, err = Int64Value(q)
		if err != nil {
			return 0, 0, fmt.Errorf("device %s (request %q) consumed compute %s: %w", r.Device, r.Request, q.String(), err)
		}
		if compute < 0 || compute > fullComputePercent {
			return 0, 0, fmt.Errorf("share of device %s (request %q) consumed compute %s; expected a percentage 0..100",
				r.Device, r.Request, q.String())
		}
	}
	return mem, compute, nil
}

// listEnv builds the claim's identity and the list variables over cards.
func listEnv(claim Claim, cards []*card) []string {
	var uuids, devices, memMiB, compute, backends []string
	for _, c := range cards {
		uuids = append(uuids, c.uuid)
		devices = append(devices, c.device)
		memMiB = append(memMiB, strconv.FormatInt(c.memBytes/mib, 10))
		compute = append(compute, strconv.Itoa(int(c.percent)))
		backends = append(backends, c.backendName())
	}
	joined := func(s []string) string { return strings.Join(s, ",") }
	return []string{
		EnvVisibleDevices + "=" + joined(uuids),
		EnvClaim + "=" + claim.Namespace + "/" + claim.Name,
		EnvClaimUID + "=" + claim.UID,
		EnvGPUDevices + "=" + joined(devices),
		EnvGPUUUIDs + "=" + joined(uuids),
		EnvGPUMemoryLimitMiB + "=" + joined(memMiB),
		EnvGPUComputePercent + "=" + joined(compute),
		EnvGPUSharingBackend + "=" + joined(backends),
	}
}

// cardEnv builds the variables of one card, keyed by its index so that the
// variables of several cards never overwrite each other.
func cardEnv(c *card) []string {
	prefix := fmt.Sprintf("%s%d_", EnvGPUPrefix, c.index)
	return []string{
		prefix + "UUID=" + c.uuid,
		prefix + "MEMORY_LIMIT_MIB=" + strconv.FormatInt(c.memBytes/mib, 10),
		prefix + "COMPUTE_PERCENT=" + strconv.Itoa(int(c.percent)),
		prefix + "SHARING_BACKEND=" + c.backendName(),
	}
}

func (c *card) backendName() string {
	if c.whole {
		return sharingModeExclusive
	}
	return string(c.backend)
}

// mpsEdits builds the MPS client settings of the claim: the same on every
// device of an MPS-shared card. Empty when the claim has no MPS share.
func mpsEdits(cards []*card, pipeDir string) cdispec.ContainerEdits {
	var edits cdispec.ContainerEdits
	if pipeDir == "" {
		return edits
	}
	var memLimits []string
	threadCap := int32(math.MaxInt32)
	for _, c := range cards {
		if !c.whole && c.backend == v1alpha1.BackendMPS {
			memLimits = append(memLimits, fmt.Sprintf("%s=%dM", c.uuid, c.memBytes/mib))
			if c.threadCap > 0 {
				threadCap = min(threadCap, c.threadCap)
			}
		}
	}
	edits.Env = []string{
		EnvMPSPipeDirectory + "=" + pipeDir,
		EnvMPSPinnedMemLimit + "=" + strings.Join(memLimits, ","),
	}
	if threadCap != math.MaxInt32 {
		edits.Env = append(edits.Env, EnvMPSActiveThreadPct+"="+strconv.Itoa(int(threadCap)))
	}
	edits.Mounts = []*cdispec.Mount{{
		HostPath:      pipeDir,
		ContainerPath: pipeDir,
		Options:       []string{"rbind", "rw", "nosuid", "nodev"},
	}}
	return edits
}

func copyEdits(e cdispec.ContainerEdits) cdispec.ContainerEdits {
	out := cdispec.ContainerEdits{Env: append([]string(nil), e.Env...)}
	for _, m := range e.Mounts {
		mc := *m
		mc.Options = append([]string(nil), m.Options...)
		out.Mounts = append(out.Mounts, &mc)
	}
	for _, h := range e.Hooks {
		hc := *h
		hc.Args = append([]string(nil), h.Args...)
		hc.Env = append([]string(nil), h.Env...)
		out.Hooks = append(out.Hooks, &hc)
	}
	return out
}
