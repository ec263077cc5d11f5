// Package mpsv3 drives the node's MPS v3 server (driver release 615,
// nvidia-cuda-mps-control -p 3) and its namespaces through the control
// daemon's commands: spec.go is a namespace and its names, commands.go the
// command words and the parsing of their answers, namespaces.go the
// server's namespaces. Which namespaces should exist is the mps Manager's
// business, not this package's.
package mpsv3

import (
	"fmt"
	"math"
	"regexp"
	"strconv"
	"strings"
)

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

// OwnNamespace reports whether the plugin made the namespace.
func OwnNamespace(name string) bool {
	return strings.HasPrefix(name, namespacePrefix) || strings.HasPrefix(name, legacyNamespacePrefix)
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
