package device

import (
	"fmt"
	"strconv"
)

// More attributes of a MIG partition device (the others are in names.go):
// the media engines of its profile, as NVML reports them.
const (
	AttrDecoders = "decoders"
	AttrJPEGs    = "jpegs"
	AttrOFAs     = "ofas"
)

// MIG partitions are KEP-4815 partitionable devices: each card in MIG mode
// has one counter set in the node's pool, and each partition device
// consumes from it what its placement takes, so the allocator never gives
// out two partitions that cannot exist together (docs/resourceslices.md,
// "MIG partitions"):
//
//   - one counter per memory slice ("memory-slice-<n>", 1 each): a
//     placement consumes the slices it covers, so overlapping placements
//     exclude each other;
//   - "compute-slices", the card's compute slices (7 on A100/H100/H200): a
//     partition consumes its profile's;
//   - "profile-<id>-instances" for a profile NVML allows fewer instances
//     of than it has placements (the single media-extension profile
//     "+me"): each of its partitions consumes 1.
const (
	MIGCounterMemorySlicePrefix = "memory-slice-"
	MIGCounterComputeSlices     = "compute-slices"
)

// MIGCounterSetName is the counter set of card index in MIG mode: the
// card's device name, "gpu-0" (counter sets and devices are named apart).
func MIGCounterSetName(index int) string { return CardDeviceName(index) }

// MIGCounterMemorySlice is the counter of memory slice n: "memory-slice-3".
func MIGCounterMemorySlice(n int) string { return MIGCounterMemorySlicePrefix + strconv.Itoa(n) }

// MIGCounterProfileInstances is the counter bounding the instances of a
// profile: "profile-20-instances".
func MIGCounterProfileInstances(profileID int) string {
	return fmt.Sprintf("profile-%d-instances", profileID)
}

// TaintKeyMIGPlacementTaken is the NoSchedule taint the kubelet plugin
// puts on every MIG partition of a card whose placement overlaps a MIG
// instance Tangram did not create (an admin's nvidia-smi mig -cgi, another
// tool): the plugin would refuse to prepare it, so the scheduler must not
// allocate it. Its value names the partition device at the instance's own
// profile and placement ("gpu-3-mig-19-2"); it goes when the instance is
// gone (docs/resourceslices.md, "MIG partitions").
const TaintKeyMIGPlacementTaken = DriverName + "/mig-placement-taken"
