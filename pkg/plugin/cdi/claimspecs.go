package cdi

import (
	"context"
	"os"
	"slices"

	cdispec "tags.cncf.io/container-device-interface/specs-go"

	"github.com/tangram-gpu/tangram/pkg/gpu"
	"github.com/tangram-gpu/tangram/pkg/plugin/memlimit/records"
	"github.com/tangram-gpu/tangram/pkg/plugin/mps"
	"github.com/tangram-gpu/tangram/pkg/plugin/prepared"
)

// ClaimSpecs writes the plugin's per-claim transient CDI specs: pure edits
// from ComputeClaimEdits, the hardware edits of the cards, one spec file per
// claim in Store.
type ClaimSpecs struct {
	Store    *SpecStore
	Hardware HardwareEdits
	// Cards are the node's cards by device name.
	Cards map[string]gpu.GPU
	// MemoryLimitHook is given to every share (Inputs.MemoryLimitHook);
	// nil on nodes without hard enforcement.
	MemoryLimitHook *MemoryLimitHook
	// ClaimShmDir, when set, names each claim's own /dev/shm directory
	// (daemon.ClaimDirs.ShmDir), which the driver creates before the spec is
	// written; nil leaves the runtime's /dev/shm (tests, older set-ups).
	ClaimShmDir func(claimUID string) string
	// MPS is how the claims' MPS shares reach their daemon (mps.Manager);
	// nil on nodes with sharing disabled.
	MPS MPSClients
}

// MPSClients gives each claim with MPS shares its client configuration.
type MPSClients interface {
	ClientConfig(claimUID string) mps.ClientConfig
}

// Write computes the claim's edits and writes its spec (atomically,
// replacing an old one). It returns the CDI device IDs of each of the
// claim's devices, in order.
func (c ClaimSpecs) Write(_ context.Context, claim prepared.Claim) ([][]string, error) {
	var client mps.ClientConfig
	if c.MPS != nil && len(claim.MPSCards()) > 0 {
		client = c.MPS.ClientConfig(claim.UID)
	}
	edits, err := ComputeClaimEdits(claim, Inputs{Cards: c.Cards, MPSPipeDir: client.PipeDir, MPSPipeReadOnly: client.PipeReadOnly,
		ShmDir: c.shmDir(claim.UID, client), MemoryLimitHook: c.MemoryLimitHook})
	if err != nil {
		return nil, err
	}
	cdiSpec, err := BuildSpec(edits, claim, c.Cards, c.Hardware)
	if err != nil {
		return nil, err
	}
	if edits.MPS {
		addMPSMounts(cdiSpec, edits, client.Mounts)
	}
	if err := c.Store.Write(claim.UID, cdiSpec); err != nil {
		return nil, err
	}
	ids := make([][]string, len(edits.Devices))
	for i, d := range edits.Devices {
		ids[i] = []string{d.ID}
	}
	return ids, nil
}

// shmDir is the claim's /dev/shm: the one its MPS client configuration
// names when the claim has MPS shares (the claim's own, in classic and v3
// mode alike), else the claim's own directory; "" without claim
// directories.
func (c ClaimSpecs) shmDir(claimUID string, client mps.ClientConfig) string {
	for _, m := range client.Mounts {
		if m.ContainerPath == ShmContainerPath {
			return m.HostPath
		}
	}
	if c.ClaimShmDir == nil {
		return ""
	}
	return c.ClaimShmDir(claimUID)
}

// addMPSMounts adds the MPS client mounts ComputeClaimEdits does not add
// itself to the devices of MPS-shared cards, which carry the other MPS
// settings. ComputeClaimEdits already mounts the pipe directory and (as
// Inputs.ShmDir) the client's /dev/shm, so this adds only what a client
// configuration may list beyond them.
func addMPSMounts(spec *cdispec.Spec, edits *ClaimEdits, mounts []mps.Mount) {
	mpsDevices := map[string]bool{}
	for _, d := range edits.Devices {
		mpsDevices[d.Name] = d.MPS
	}
	for i := range spec.Devices {
		if !mpsDevices[spec.Devices[i].Name] {
			continue
		}
		edits := &spec.Devices[i].ContainerEdits
		for _, m := range mounts {
			if slices.ContainsFunc(edits.Mounts, func(have *cdispec.Mount) bool { return have.ContainerPath == m.ContainerPath }) {
				continue
			}
			mode := "rw"
			if m.ReadOnly {
				mode = "ro"
			}
			edits.Mounts = append(edits.Mounts, &cdispec.Mount{
				HostPath: m.HostPath, ContainerPath: m.ContainerPath,
				Options: []string{"rbind", mode, "nosuid", "nodev"},
			})
		}
	}
}

// Remove deletes the claim's spec; a missing spec is not an error.
// With a memory limit hook, the claim's record of its owning pod goes too
// (the pod's cgroup, and with it the limit, goes with the pod).
func (c ClaimSpecs) Remove(_ context.Context, claimUID string) error {
	if c.MemoryLimitHook != nil && c.MemoryLimitHook.StateDir != "" {
		if err := (records.Dir{Path: c.MemoryLimitHook.StateDir}).Remove(claimUID); err != nil {
			return err
		}
	}
	return c.Store.Remove(claimUID)
}

// Exists reports whether the claim's spec file is there.
func (c ClaimSpecs) Exists(_ context.Context, claimUID string) bool {
	_, err := os.Stat(c.Store.Path(claimUID))
	return err == nil
}

// List returns the UIDs of the claims that have a spec of ours.
func (c ClaimSpecs) List(context.Context) ([]string, error) { return c.Store.List() }
