package driver

import (
	"context"
	"fmt"
	"os"
	"slices"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	cdispec "tags.cncf.io/container-device-interface/specs-go"

	configapi "github.com/tangram-gpu/tangram/api/gpu/v1alpha1"
	"github.com/tangram-gpu/tangram/pkg/cdi"
	"github.com/tangram-gpu/tangram/pkg/config"
	"github.com/tangram-gpu/tangram/pkg/sharing"
)

// ResolveConfigs is the ConfigResolver backed by pkg/config.
func ResolveConfigs(claim *resourceapi.ResourceClaim, plan []plannedDevice) ([]*configapi.GpuConfig, error) {
	resolved, err := config.Resolve(claim.Status.Allocation.Devices.Config, config.RequestNames(claim))
	if err != nil {
		return nil, err
	}
	out := make([]*configapi.GpuConfig, len(plan))
	for i, p := range plan {
		out[i] = resolved.For(p.Request)
	}
	return out, nil
}

// APIClaimLister lists every ResourceClaim through the API server.
func APIClaimLister(client kubernetes.Interface) ClaimLister {
	return func(ctx context.Context) ([]resourceapi.ResourceClaim, error) {
		list, err := client.ResourceV1().ResourceClaims(metav1.NamespaceAll).List(ctx, metav1.ListOptions{})
		if err != nil {
			return nil, fmt.Errorf("listing ResourceClaims: %w", err)
		}
		return list.Items, nil
	}
}

// CDISpecs is the SpecStore backed by pkg/cdi: pure edits from
// cdi.ComputeClaimEdits, hardware edits, one transient spec per claim.
type CDISpecs struct {
	Store    *cdi.SpecStore
	Hardware cdi.HardwareEdits
	// MemoryLimitHook is given to every result (cdi.Result.MemoryLimitHook);
	// nil on nodes without hard enforcement.
	MemoryLimitHook *cdi.MemoryLimitHook
}

var _ SpecStore = CDISpecs{}

// Write computes the claim's edits and writes its spec.
func (c CDISpecs) Write(_ context.Context, spec ClaimSpec) ([][]string, error) {
	results := make([]cdi.Result, len(spec.Devices))
	for i, d := range spec.Devices {
		results[i] = cdi.Result{
			Request:          d.Request,
			Device:           d.Device,
			GPU:              d.GPU,
			ShareID:          d.ShareID,
			ConsumedCapacity: d.ConsumedCapacity,
			AdminAccess:      d.AdminAccess,

			AllocatableMemoryBytes: d.AllocatableMemoryBytes,
			Config:                 d.Config,
			MPSPipeDir:             spec.MPS.PipeDir,
			MemoryLimitHook:        c.MemoryLimitHook,
		}
	}
	claim := cdi.Claim{UID: spec.UID, Namespace: spec.Namespace, Name: spec.Name}
	edits, err := cdi.ComputeClaimEdits(claim, results)
	if err != nil {
		return nil, err
	}
	cdiSpec, err := cdi.BuildSpec(edits, results, c.Hardware)
	if err != nil {
		return nil, err
	}
	if edits.MPS {
		addMPSMounts(cdiSpec, edits, spec.MPS.Mounts)
	}
	if err := c.Store.Write(spec.UID, cdiSpec); err != nil {
		return nil, err
	}
	ids := make([][]string, len(edits.Devices))
	for i, d := range edits.Devices {
		ids[i] = []string{d.ID}
	}
	return ids, nil
}

// addMPSMounts adds the MPS client mounts pkg/cdi does not add itself (the
// daemon's /dev/shm) to the devices of MPS-shared cards, which carry the
// other MPS settings: a container given only whole cards keeps its own
// /dev/shm.
func addMPSMounts(spec *cdispec.Spec, edits *cdi.ClaimEdits, mounts []sharing.Mount) {
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
			edits.Mounts = append(edits.Mounts, &cdispec.Mount{
				HostPath: m.HostPath, ContainerPath: m.ContainerPath,
				Options: []string{"rbind", "rw", "nosuid", "nodev"},
			})
		}
	}
}

// Remove deletes the claim's spec.
func (c CDISpecs) Remove(_ context.Context, claimUID string) error { return c.Store.Remove(claimUID) }

// Exists reports whether the claim's spec file is there.
func (c CDISpecs) Exists(_ context.Context, claimUID string) bool {
	_, err := os.Stat(c.Store.Path(claimUID))
	return err == nil
}

// List returns the claims with a spec of ours.
func (c CDISpecs) List(context.Context) ([]string, error) { return c.Store.List() }
