package mps

import (
	"fmt"

	"github.com/tangram-gpu/tangram/pkg/plugin/mps/mpsv3"
)

// MPS v3 (driver release 615, nvidia-cuda-mps-control -p 3) gives each
// share a namespace of one node-wide server: the namespace's active-thread
// percentage is set by the control daemon and overrides what the client's
// environment asks, so a tenant that unsets CUDA_MPS_ACTIVE_THREAD_PERCENTAGE
// keeps its cap. This file has the modes and a claim's namespace;
// namespaces.go keeps the server's namespaces in step with the shares, and
// package mpsv3 sends the control commands.

// Mode chooses how shares are enforced with MPS (--mps-mode).
type Mode string

const (
	// ModeAuto picks v3 on drivers that have it, classic otherwise.
	ModeAuto Mode = "auto"
	// ModeV3 runs one MPS v3 server with a namespace per claim.
	ModeV3 Mode = "v3"
	// ModeClassic runs the legacy daemon with per-client limits.
	ModeClassic Mode = "classic"
)

// ParseMode reads a --mps-mode value.
func ParseMode(s string) (Mode, error) {
	switch m := Mode(s); m {
	case ModeAuto, ModeV3, ModeClassic:
		return m, nil
	case "":
		return ModeAuto, nil
	}
	return "", fmt.Errorf("--mps-mode=%s: want auto, v3 or classic", s)
}

// ResolveMode decides the mode for a node: auto means v3 where the node's
// driver has MPS v3 (pkg/plugin/enforcement detects it), classic elsewhere.
func ResolveMode(m Mode, v3Available bool) Mode {
	if m != ModeAuto {
		return m
	}
	if v3Available {
		return ModeV3
	}
	return ModeClassic
}

// Share is one card's share of a claim, as MPS needs to know it.
type Share struct {
	// Card is the card's UUID.
	Card string
	// MemoryBytes is the share's memory.
	MemoryBytes int64
	// ThreadPercent is the share's active-thread cap, 0 for none.
	ThreadPercent int64
}

// namespaceFor derives a claim's namespace from its shares. A claim has one
// namespace whatever its number of cards, because its containers reach one
// namespace's pipe directory: the cap is the smallest of its shares' caps
// (the same rule as the client environment), the pinned-memory limit the
// largest share. The pinned-memory limit is defence in depth only: NVIDIA
// documents that a client naming, in CUDA_MPS_PINNED_DEVICE_MEM_LIMIT, a
// device it cannot see drops every MPS memory limit, so memory is held by
// the per-container cgroup limit, not by MPS.
func namespaceFor(claimUID string, shares []Share) mpsv3.NamespaceSpec {
	spec := mpsv3.NamespaceSpec{Name: mpsv3.NamespaceName(claimUID)}
	var mem int64
	for _, s := range shares {
		if s.ThreadPercent > 0 && (spec.ActiveThreadPercentage == 0 || s.ThreadPercent < spec.ActiveThreadPercentage) {
			spec.ActiveThreadPercentage = min(s.ThreadPercent, 100)
		}
		mem = max(mem, s.MemoryBytes)
	}
	if mem > 0 {
		// Rounded up to MiB: never below what the share was given.
		spec.PinnedMemoryLimit = fmt.Sprintf("%dM", (mem+mib-1)/mib)
	}
	return spec
}

const mib = 1 << 20
