package cdi

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

	cdiparser "tags.cncf.io/container-device-interface/pkg/parser"
	cdispec "tags.cncf.io/container-device-interface/specs-go"

	"github.com/tangram-gpu/tangram/api/gpu/v1alpha1"
	"github.com/tangram-gpu/tangram/pkg/gpu"
	"github.com/tangram-gpu/tangram/pkg/plugin/prepared"
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
	EnvGPUPrefix         = "TANGRAM_GPU_"
	sharingModeExclusive = "exclusive"
	mib                  = 1 << 20
	fullComputePercent   = 100
)

// Inputs is what a claim's edits need besides its record.
type Inputs struct {
	// Cards are the node's cards by device name; every device of the
	// claim names one (its index, memory and device nodes).
	Cards map[string]gpu.GPU
	// MPSPipeDir is the pipe directory of the MPS daemon serving the
	// claim (mps.ClientConfig); required when the claim has shares
	// whose backend is mps. One per claim: a container can reach only
	// one MPS control daemon.
	MPSPipeDir string
	// MPSPipeReadOnly mounts MPSPipeDir read-only (classic MPS, where it
	// is the node daemon's directory; mps.ClientConfig.PipeReadOnly).
	MPSPipeReadOnly bool
	// ShmDir, when set, is the host directory mounted at /dev/shm on
	// every device of the claim's cards: the claim's own directory
	// (claim-scoped IPC, shared by all containers of all pods of the
	// claim), MPS shares included, classic or v3. One per claim, so
	// that a container given several of the claim's devices gets one
	// /dev/shm whichever is injected last. The claim-wide device carries
	// none (it only adds lists to the cards' devices).
	ShmDir string
	// MemoryLimitHook, when set, gives a share's device a createRuntime
	// hook that holds the container to the claim's memory on the card
	// (nodes with hard enforcement only). Whole cards get none.
	MemoryLimitHook *MemoryLimitHook
}

// DeviceEdits is one CDI device of the claim's spec, in the order of the
// claim's devices.
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
	ClaimUID string
	Devices  []DeviceEdits
	// ClaimWide, set when the claim's results come from several requests,
	// is the device that gives a container naming the whole claim the
	// claim's lists; see ComputeClaimEdits.
	ClaimWide *DeviceEdits
	// MPS reports whether the claim's containers connect to an MPS daemon.
	MPS bool
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
func ComputeClaimEdits(claim prepared.Claim, in Inputs) (*ClaimEdits, error) {
	if claim.UID == "" {
		return nil, fmt.Errorf("computing CDI edits: claim %s/%s has no UID", claim.Namespace, claim.Name)
	}
	if len(claim.Devices) == 0 {
		return nil, fmt.Errorf("computing CDI edits for claim %s/%s: no device results", claim.Namespace, claim.Name)
	}
	cards, pipeDir, err := aggregate(claim.Devices, in)
	if err != nil {
		return nil, fmt.Errorf("computing CDI edits for claim %s/%s: %w", claim.Namespace, claim.Name, err)
	}
	byUUID := map[string]*card{}
	for _, c := range cards {
		byUUID[c.uuid] = c
	}
	requestCards := map[string][]*card{}
	var requests []string
	for _, r := range claim.Devices {
		base := prepared.BaseRequest(r.Request)
		requests = append(requests, r.Request)
		c := byUUID[deviceKey(r)]
		if !slices.Contains(requestCards[base], c) {
			requestCards[base] = append(requestCards[base], c)
		}
	}
	mps := mpsEdits(cards, pipeDir, in.MPSPipeReadOnly)

	out := &ClaimEdits{ClaimUID: claim.UID, MPS: pipeDir != ""}
	seen := map[string]bool{}
	for _, r := range claim.Devices {
		name := prepared.CDIDeviceName(claim.UID, r.Device, r.ShareID)
		if err := cdiparser.ValidateDeviceName(name); err != nil {
			return nil, fmt.Errorf("computing CDI edits for claim %s/%s: device %s: %w", claim.Namespace, claim.Name, r.Device, err)
		}
		if seen[name] {
			return nil, fmt.Errorf("computing CDI edits for claim %s/%s: device %s share %q appears twice in the allocation",
				claim.Namespace, claim.Name, r.Device, r.ShareID)
		}
		seen[name] = true
		c := byUUID[deviceKey(r)]
		edits := cdispec.ContainerEdits{Env: listEnv(claim, requestCards[prepared.BaseRequest(r.Request)])}
		edits.Env = append(edits.Env, cardEnv(c)...)
		usesMPS := !c.whole && c.backend == v1alpha1.BackendMPS
		if usesMPS {
			edits.Env = append(edits.Env, mps.Env...)
			edits.Mounts = mps.Mounts
		}
		if in.ShmDir != "" {
			edits.Mounts = append(edits.Mounts, ShmMount(in.ShmDir))
		}
		if h := in.MemoryLimitHook; h != nil && !c.whole {
			// The claim's memory on the card, so that shares of one card
			// in one claim add up, whichever of their devices a
			// container is given; the hooks of several are the same.
			edits.Hooks = append(edits.Hooks, h.hook(claim, c.uuid, c.memBytes))
		}
		out.Devices = append(out.Devices, DeviceEdits{Name: name, ID: prepared.CDIDeviceID(name), Edits: copyEdits(edits), MPS: usesMPS})
	}
	if prepared.NeedsClaimWideDevice(requests) {
		name := prepared.ClaimWideDeviceName(claim.UID)
		if seen[name] {
			return nil, fmt.Errorf("computing CDI edits for claim %s/%s: the claim-wide device name %s clashes with a device", claim.Namespace, claim.Name, name)
		}
		// Only the lists: the cards' own devices, injected before it, bring
		// the per-card variables, the MPS settings and the device nodes.
		edits := cdispec.ContainerEdits{Env: listEnv(claim, cards)}
		out.ClaimWide = &DeviceEdits{Name: name, ID: prepared.CDIDeviceID(name), Edits: edits}
	}
	return out, nil
}

// deviceKey is what aggregate groups a device by: its card, or for a MIG
// partition its MIG device.
func deviceKey(r prepared.Device) string {
	if r.MIG != nil {
		return r.MIG.UUID
	}
	return r.GPUUUID
}

// aggregate groups the devices by card (a MIG partition by itself), in first-seen order, and works out
// each card's limits. Whether a device is a share is the record's (decided
// once by the plan), not derived again here.
func aggregate(devices []prepared.Device, in Inputs) ([]*card, string, error) {
	var cards []*card
	byUUID := map[string]*card{}
	for _, r := range devices {
		if r.GPUUUID == "" {
			return nil, "", fmt.Errorf("device %s (request %q) has no GPU UUID", r.Device, r.Request)
		}
		if r.MIG != nil {
			// A MIG partition is a device of its own (its UUID, its
			// memory), held whole: no share limits, no MPS.
			if r.MIG.UUID == "" {
				return nil, "", fmt.Errorf("MIG partition %s (request %q) has no MIG device UUID: its instance was not created", r.Device, r.Request)
			}
			if _, dup := byUUID[r.MIG.UUID]; !dup {
				c := &card{index: r.MIG.ParentIndex, device: r.Device, uuid: r.MIG.UUID, memory: r.MemoryBytes, whole: true}
				byUUID[r.MIG.UUID] = c
				cards = append(cards, c)
			}
			continue
		}
		c, ok := byUUID[r.GPUUUID]
		if !ok {
			g, known := in.Cards[r.Device]
			if !known {
				return nil, "", fmt.Errorf("device %s (request %q) is not a card of this node", r.Device, r.Request)
			}
			c = &card{index: g.Index, device: r.Device, uuid: r.GPUUUID, memory: g.MemoryBytes}
			byUUID[r.GPUUUID] = c
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
		if !r.Share {
			c.whole = true
			continue
		}
		if c.whole {
			continue // see below: a whole card has no share limits
		}
		if err := checkShare(r); err != nil {
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
		c.memBytes += r.MemoryBytes
		c.compute += r.ComputePercent
		if backend == v1alpha1.BackendMPS {
			if in.MPSPipeDir == "" {
				return nil, "", fmt.Errorf("share of device %s (request %q) uses MPS but no MPS pipe directory was given", r.Device, r.Request)
			}
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
	pipeDir := ""
	if anyMPS {
		pipeDir = in.MPSPipeDir
	}
	return cards, pipeDir, nil
}

// checkShare refuses a share's consumed memory (bytes) and compute
// (percent) that no limit can express.
func checkShare(r prepared.Device) error {
	if r.MemoryBytes < mib {
		return fmt.Errorf("share of device %s (request %q) consumed %d bytes of memory; a share needs at least 1Mi",
			r.Device, r.Request, r.MemoryBytes)
	}
	if r.ComputePercent < 0 || r.ComputePercent > fullComputePercent {
		return fmt.Errorf("share of device %s (request %q) consumed compute %d; expected a percentage 0..100",
			r.Device, r.Request, r.ComputePercent)
	}
	return nil
}

// listEnv builds the claim's identity and the list variables over cards.
func listEnv(claim prepared.Claim, cards []*card) []string {
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

// ShmContainerPath is where the claim's /dev/shm is mounted.
const ShmContainerPath = "/dev/shm"

// ShmMount mounts hostDir at /dev/shm with the options of a container's
// own /dev/shm (no devices, no set-UID, no executables). A CDI mount
// replaces a mount at the same path, so it also replaces the runtime's
// /dev/shm and any volume the pod mounts there (docs/prepare.md).
func ShmMount(hostDir string) *cdispec.Mount {
	return &cdispec.Mount{
		HostPath:      hostDir,
		ContainerPath: ShmContainerPath,
		Options:       []string{"rbind", "rw", "nosuid", "nodev", "noexec"},
	}
}

// mpsEdits builds the MPS client settings of the claim: the same on every
// device of an MPS-shared card. Empty when the claim has no MPS share. The
// pipe directory is mounted read-only when readOnly (classic MPS).
func mpsEdits(cards []*card, pipeDir string, readOnly bool) cdispec.ContainerEdits {
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
	mode := "rw"
	if readOnly {
		mode = "ro"
	}
	edits.Mounts = []*cdispec.Mount{{
		HostPath:      pipeDir,
		ContainerPath: pipeDir,
		Options:       []string{"rbind", mode, "nosuid", "nodev"},
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
		if h.Timeout != nil {
			timeout := *h.Timeout
			hc.Timeout = &timeout
		}
		out.Hooks = append(out.Hooks, &hc)
	}
	return out
}
