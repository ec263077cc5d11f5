// Package names holds the identifiers Tangram shares with the cluster: the DRA
// driver name, CDI kind, DeviceClass names and device attribute names. They
// are part of the user-facing API (CEL selectors, claims, CDI device IDs), so
// they live in one place and never change silently.
package device

import (
	"fmt"
	"strconv"
	"strings"
)

const (
	// DriverName is the DRA driver name in ResourceSlices, claims and configs.
	DriverName = "gpu.tangram.dev"

	// CDIVendor and CDIClass form the CDI kind of our transient specs:
	// "k8s.gpu.tangram.dev/claim".
	CDIVendor = "k8s." + DriverName
	CDIClass  = "claim"
	CDIKind   = CDIVendor + "/" + CDIClass

	// DeviceClass names published by the Helm chart.
	DeviceClassName       = "gpu.tangram.dev"
	SharedDeviceClassName = "shared-gpu.tangram.dev"
	// HardSharedDeviceClassName is the strict shared class: only cards of
	// nodes whose shareEnforcement is "hard" and whose sharing backend is
	// mps. A tenant who must not share on an advisory node names it.
	HardSharedDeviceClassName = "hard-shared-gpu.tangram.dev"
	// MIGDeviceClassName is the class of MIG partitions: a claim selects
	// a profile with device.attributes["gpu.tangram.dev"].profile.
	MIGDeviceClassName = "mig.tangram.dev"
)

// IsTangramClass reports whether name is one of the DeviceClasses the
// chart publishes.
func IsTangramClass(name string) bool {
	return name == DeviceClassName || IsSharedClass(name)
}

// IsSharedClass reports whether name is one of the chart's shared classes.
func IsSharedClass(name string) bool {
	return name == SharedDeviceClassName || name == HardSharedDeviceClassName
}

// Device attribute names, without the driver domain; in CEL they are written
// device.attributes["gpu.tangram.dev"].<name>.
const (
	AttrType                  = "type"
	AttrUUID                  = "uuid"
	AttrIndex                 = "index"
	AttrMinor                 = "minor"
	AttrProductName           = "productName"
	AttrBrand                 = "brand"
	AttrArchitecture          = "architecture"
	AttrCUDAComputeCapability = "cudaComputeCapability"
	AttrDriverVersion         = "driverVersion"
	AttrCUDADriverVersion     = "cudaDriverVersion"
	AttrNVLinkDomain          = "nvlinkDomain"
	AttrNVLinkPeers           = "nvlinkPeers"
	AttrShareable             = "shareable"
	// AttrShareEnforcement says how hard the node enforces a share's limits:
	// "hard", "compute-only" or "advisory" (pkg/plugin/enforcement).
	AttrShareEnforcement = "shareEnforcement"
	// AttrShareBackend is the sharing backend the node's admin chose for
	// its shareable cards (--share-backend): "mps" or "none". The shared
	// classes select on it, so shares of different backends never meet on
	// one card; a card without it (a plugin before the attribute) counts
	// as "mps".
	AttrShareBackend = "shareBackend"

	// TypeGPU is the value of the "type" attribute of every device we publish.
	TypeGPU = "gpu"
)

// Capacity names. Memory is in bytes; compute is a percentage of the card's
// streaming multiprocessors (100 = the whole card).
const (
	CapacityMemory  = "memory"
	CapacityCompute = "compute"
)

// DevicePrefix + index is the ResourceSlice device name of a card: "gpu-0".
const DevicePrefix = "gpu-"

// MIG device attributes (a card in MIG mode publishes one device per
// profile and placement instead of the card, docs/resourceslices.md).
const (
	// TypeMIG is the "type" attribute of a MIG partition device.
	TypeMIG = "mig"
	// AttrMIGProfile is the profile's name as NVIDIA spells it: "3g.71gb".
	AttrMIGProfile = "profile"
	// AttrMIGProfileID is NVML's GPU instance profile ID (19 for 1g.18gb).
	AttrMIGProfileID = "migProfileID"
	// AttrMIGPlacementStart is the placement's first memory slice.
	AttrMIGPlacementStart = "migPlacementStart"
	// AttrParentUUID is the UUID of the card a MIG partition is cut from.
	AttrParentUUID = "parentUUID"
	// AttrParentIndex is the index of the card a MIG partition is cut from.
	AttrParentIndex = "parentIndex"
	// AttrMultiprocessors and AttrCopyEngines are the partition's SMs and
	// copy engines, as NVML's profile reports them.
	AttrMultiprocessors = "multiprocessors"
	AttrCopyEngines     = "copyEngines"
)

// migInfix separates a card's name from its MIG partition's profile ID and
// placement: "gpu-0-mig-19-3".
const migInfix = "-mig-"

// CardDeviceName is the ResourceSlice device name of card index: "gpu-0".
func CardDeviceName(index int) string { return DevicePrefix + strconv.Itoa(index) }

// MIGDeviceName is the device name of the MIG partition of card index with
// NVML profile ID profileID at the placement starting at memory slice
// start: "gpu-0-mig-19-3". Names carry IDs, not profile names, because
// profile names hold '.' and '+', which device names (DNS labels) cannot.
func MIGDeviceName(index, profileID, start int) string {
	return fmt.Sprintf("%s%d%s%d-%d", DevicePrefix, index, migInfix, profileID, start)
}

// DeviceRef is what a Tangram device name says: the card's index and, for
// a MIG partition, its profile ID and placement start.
type DeviceRef struct {
	Index int
	// MIG is nil for a whole card (and its shares).
	MIG *MIGRef
}

// MIGRef names a MIG partition within its card.
type MIGRef struct {
	ProfileID, Start int
}

// ParseDeviceName reads a name CardDeviceName or MIGDeviceName made.
func ParseDeviceName(name string) (DeviceRef, error) {
	rest, ok := strings.CutPrefix(name, DevicePrefix)
	if !ok {
		return DeviceRef{}, fmt.Errorf("device %q is not a Tangram device name (%s<index> or %s<index>%s<profileID>-<start>)", name, DevicePrefix, DevicePrefix, migInfix)
	}
	card, mig, isMIG := strings.Cut(rest, migInfix)
	index, err := nonNegative(card)
	if err != nil {
		return DeviceRef{}, fmt.Errorf("device %q: card index %q: %w", name, card, err)
	}
	if !isMIG {
		return DeviceRef{Index: index}, nil
	}
	id, start, ok := strings.Cut(mig, "-")
	if !ok {
		return DeviceRef{}, fmt.Errorf("device %q: MIG part %q is not <profileID>-<start>", name, mig)
	}
	ref := &MIGRef{}
	if ref.ProfileID, err = nonNegative(id); err != nil {
		return DeviceRef{}, fmt.Errorf("device %q: MIG profile ID %q: %w", name, id, err)
	}
	if ref.Start, err = nonNegative(start); err != nil {
		return DeviceRef{}, fmt.Errorf("device %q: MIG placement start %q: %w", name, start, err)
	}
	return DeviceRef{Index: index, MIG: ref}, nil
}

// nonNegative parses a decimal number written without sign or leading
// zeros, so that each device has exactly one name.
func nonNegative(s string) (int, error) {
	if s == "" || (len(s) > 1 && s[0] == '0') || strings.TrimLeft(s, "0123456789") != "" {
		return 0, fmt.Errorf("not a plain decimal number")
	}
	return strconv.Atoi(s)
}
