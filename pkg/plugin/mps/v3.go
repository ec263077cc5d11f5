package mps

import (
	"fmt"
	"math"
	"regexp"
	"strconv"
	"strings"
)

// MPS v3 (driver release 615, nvidia-cuda-mps-control -p 3) gives each
// share a namespace of one node-wide server: the namespace's active-thread
// percentage is set by the control daemon and overrides what the client's
// environment asks, so a tenant that unsets CUDA_MPS_ACTIVE_THREAD_PERCENTAGE
// keeps its cap. This file has the modes and a claim's namespace;
// v3commands.go the control commands, v3namespaces.go the server's
// namespaces through them.

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

// NamespaceSpec is the namespace of one claim on the node's v3 server.
type NamespaceSpec struct {
	Name string
	// ActiveThreadPercentage is 0 when the claim asks for no cap.
	ActiveThreadPercentage int64
	// PinnedMemoryLimit in the control daemon's form (e.g. "20480M" or, as
	// listed, "20G"), "" for none. Compare with ParseSize, never as text.
	PinnedMemoryLimit string
	// PipeDirectory is where the daemon says clients reach the namespace;
	// set only on what the daemon lists, "" when it does not say.
	PipeDirectory string
}

// Namespace names: the control daemon takes lowercase letters, digits and
// underscores only, at most 64 characters (NVIDIA's KAI project validates
// ^[a-z0-9_]+$ against r615; docs/nvml.md).
const (
	namespacePrefix = "tangram_"
	// legacyNamespacePrefix is what earlier versions of the plugin named
	// their namespaces; a real daemon refuses such names, but start-up
	// still removes any a daemon lists.
	legacyNamespacePrefix = "tangram-"
)

var namespaceNameForm = regexp.MustCompile(`^[a-z0-9_]{1,64}$`)

// NamespaceName is the v3 namespace of a claim: the prefix and the claim
// UID with dashes as underscores (a UID is 36 characters: 44 in all).
func NamespaceName(claimUID string) string {
	return namespacePrefix + strings.ReplaceAll(strings.ToLower(claimUID), "-", "_")
}

// ValidNamespaceName checks a name against the daemon's rule.
func ValidNamespaceName(name string) error {
	if !namespaceNameForm.MatchString(name) {
		return fmt.Errorf("%q is not a valid MPS v3 namespace name: lowercase letters, digits and underscores only, 1 to 64 characters", name)
	}
	return nil
}

// ownNamespace reports whether the plugin made the namespace.
func ownNamespace(name string) bool {
	return strings.HasPrefix(name, namespacePrefix) || strings.HasPrefix(name, legacyNamespacePrefix)
}

// namespaceFor derives a claim's namespace from its shares. A claim has one
// namespace whatever its number of cards, because its containers reach one
// namespace's pipe directory: the cap is the smallest of its shares' caps
// (the same rule as the client environment), the pinned-memory limit the
// largest share. The pinned-memory limit is defence in depth only: NVIDIA
// documents that a client naming, in CUDA_MPS_PINNED_DEVICE_MEM_LIMIT, a
// device it cannot see drops every MPS memory limit, so memory is held by
// the per-container cgroup limit, not by MPS.
func namespaceFor(claimUID string, shares []Share) NamespaceSpec {
	spec := NamespaceSpec{Name: NamespaceName(claimUID)}
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

// ParseSize reads a memory size as the control daemon writes or takes
// it: a number with a binary unit K, M, G or T (optionally followed by B
// or iB, any case; "20G" and "20480M" are the same), or bare bytes. "",
// "0", "none", "unlimited", "-" and "n/a" mean no limit: 0.
func ParseSize(s string) (int64, error) {
	t := strings.TrimSpace(s)
	switch strings.ToLower(t) {
	case "", "0", "none", "unlimited", "-", "n/a":
		return 0, nil
	}
	i := 0
	for i < len(t) && (t[i] >= '0' && t[i] <= '9' || t[i] == '.') {
		i++
	}
	num, unit := t[:i], strings.ToUpper(strings.TrimSpace(t[i:]))
	unit = strings.TrimSuffix(strings.TrimSuffix(unit, "B"), "I")
	shift := 0
	if unit != "" {
		shift = strings.Index("KMGT", unit) + 1
	}
	if len(unit) > 1 || (unit != "" && shift == 0) {
		return 0, fmt.Errorf("memory size %q: unknown unit %q", s, unit)
	}
	v, err := strconv.ParseFloat(num, 64)
	if err != nil || v < 0 {
		return 0, fmt.Errorf("memory size %q is not a number with a unit", s)
	}
	return int64(math.Round(v * float64(int64(1)<<(10*shift)))), nil
}

// parsePercent reads an active-thread percentage as listed ("30.00",
// "30", "30%"), rounded to a whole percent; "", "none" and "-" are 0.
func parsePercent(s string) (int64, error) {
	t := strings.TrimSuffix(strings.TrimSpace(s), "%")
	switch strings.ToLower(t) {
	case "", "none", "-", "n/a":
		return 0, nil
	}
	v, err := strconv.ParseFloat(t, 64)
	if err != nil || v < 0 || v > 100 {
		return 0, fmt.Errorf("%q is not a percentage", s)
	}
	return int64(math.Round(v)), nil
}

// sameLimits compares the limits of what a claim wants with what the
// daemon lists, as numbers: "20G" is "20480M", and no cap is 100%.
func sameLimits(want, have NamespaceSpec) bool {
	capOf := func(p int64) int64 {
		if p <= 0 || p >= 100 {
			return 100
		}
		return p
	}
	if capOf(want.ActiveThreadPercentage) != capOf(have.ActiveThreadPercentage) {
		return false
	}
	w, errW := ParseSize(want.PinnedMemoryLimit)
	h, errH := ParseSize(have.PinnedMemoryLimit)
	return errW == nil && errH == nil && w == h
}

// The v3 control commands, as the words given to nvidia-cuda-mps-control
// after "-p 3".
