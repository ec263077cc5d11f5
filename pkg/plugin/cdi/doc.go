// Package cdi turns the devices prepared for one ResourceClaim into a
// transient CDI spec that containerd injects into the claim's containers.
//
// It has three parts:
//
//   - ComputeClaimEdits (pure): from the claim's record
//     (pkg/plugin/prepared: its devices, whether each is a share, what it
//     consumed, its resolved GpuConfig) and Inputs (the node's cards, the
//     claim's MPS pipe directory, the memory-limit hook), the CDI device
//     names and the environment, mounts and hooks each device carries.
//   - HardwareEdits: device nodes and driver files of real cards, added by
//     BuildSpec. NoHardware is used with fake GPUs; package pkg/cdi/nvidia
//     generates them for real cards with NVIDIA's nvcdi.
//   - SpecStore: writes, reads, removes and lists our transient specs (one
//     file per claim) under a CDI root, with the CDI library's own writer.
//     ClaimSpecs puts the three together for the plugin (its SpecStore).
//
// Environment design. containerd merges the environment of all CDI devices
// injected into a container, and when two devices set the same variable the
// result depends on injection order. So every CDI device of a claim carries
// the same claim-wide environment (NVIDIA_VISIBLE_DEVICES with all the
// claim's cards, the MPS limits of all its shares, the TANGRAM_* summary):
// whichever devices of the claim a container gets, each variable has one
// value. Per-card lists (TANGRAM_GPU_*) are comma-separated and aligned with
// TANGRAM_GPU_UUIDS. Only hardware edits (device nodes) differ per device.
package cdi
