//go:build cgo

package nvmlgpu

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"k8s.io/klog/v2"

	"github.com/tangram-gpu/tangram/pkg/gpu"
)

// partitions is gpu.MIGPartitions through NVML: GPU instances at a
// placement (nvmlDeviceCreateGpuInstanceWithPlacement), one compute
// instance spanning each (nvmlGpuInstanceCreateComputeInstance), the MIG
// device's UUID through its handle (nvmlDeviceGetMigDeviceHandleByIndex).
type partitions struct {
	lib nvml.Interface
}

// Partitions returns the MIG instance calls on src's NVML (src from Open).
func Partitions(src gpu.Source) (gpu.MIGPartitions, error) {
	s, ok := src.(*source)
	if !ok {
		return nil, fmt.Errorf("MIG partitions: the source is not NVML's (%T)", src)
	}
	return &partitions{lib: s.lib}, nil
}

func (p *partitions) device(card gpu.GPU) (nvml.Device, error) {
	dev, ret := p.lib.DeviceGetHandleByUUID(card.UUID)
	if ret != nvml.SUCCESS {
		return nil, fmt.Errorf("card %d (%s): NVML handle: %w", card.Index, card.UUID, ret)
	}
	return dev, nil
}

// profileByID finds the profile value NVML queries profile ID id by
// (profiles are enumerated from 0 until INVALID_ARGUMENT, nvml.h).
func profileByID(dev nvml.Device, id int) (nvml.GpuInstanceProfileInfo, error) {
	for profile := 0; profile < nvml.GPU_INSTANCE_PROFILE_COUNT; profile++ {
		info, ret := dev.GetGpuInstanceProfileInfo(profile)
		if ret == nvml.ERROR_INVALID_ARGUMENT {
			break
		}
		if ret == nvml.SUCCESS && int(info.Id) == id {
			return info, nil
		}
	}
	return nvml.GpuInstanceProfileInfo{}, fmt.Errorf("NVML has no GPU instance profile %d on this card", id)
}

// Create implements gpu.MIGPartitions.
func (p *partitions) Create(ctx context.Context, card gpu.GPU, profileID, start int) (gpu.MIGInstance, error) {
	dev, err := p.device(card)
	if err != nil {
		return gpu.MIGInstance{}, err
	}
	if cur, _, ret := dev.GetMigMode(); ret != nvml.SUCCESS || cur != nvml.DEVICE_MIG_ENABLE {
		return gpu.MIGInstance{}, fmt.Errorf("card %d (%s): %w", card.Index, card.UUID, gpu.ErrMIGNotEnabled)
	}
	info, err := profileByID(dev, profileID)
	if err != nil {
		return gpu.MIGInstance{}, fmt.Errorf("card %d (%s): %w", card.Index, card.UUID, err)
	}
	placements, ret := dev.GetGpuInstancePossiblePlacements(&info)
	if ret != nvml.SUCCESS {
		return gpu.MIGInstance{}, fmt.Errorf("card %d (%s): placements of profile %d: %w", card.Index, card.UUID, profileID, ret)
	}
	i := slices.IndexFunc(placements, func(pl nvml.GpuInstancePlacement) bool { return int(pl.Start) == start })
	if i < 0 {
		return gpu.MIGInstance{}, fmt.Errorf("card %d (%s): profile %d has no placement at memory slice %d", card.Index, card.UUID, profileID, start)
	}
	placement := placements[i]
	gi, ret := dev.CreateGpuInstanceWithPlacement(&info, &placement)
	if ret == nvml.ERROR_INSUFFICIENT_RESOURCES {
		// NVML says the same for a taken placement and a profile with
		// no instance left; the card's instances tell them apart.
		want := gpu.MIGPlacement{Start: int(placement.Start), Size: int(placement.Size)}
		if existing, err := p.List(ctx, card); err == nil {
			for _, m := range existing {
				if m.Placement.Overlaps(want) {
					return gpu.MIGInstance{}, fmt.Errorf("card %d (%s): profile %d at %d: %w (%s)", card.Index, card.UUID, profileID, start, gpu.ErrMIGPlacementTaken, m)
				}
			}
		}
		return gpu.MIGInstance{}, fmt.Errorf("card %d (%s): profile %d at %d: %w", card.Index, card.UUID, profileID, start, gpu.ErrMIGOutOfResources)
	}
	if ret != nvml.SUCCESS {
		return gpu.MIGInstance{}, fmt.Errorf("card %d (%s): creating a GPU instance of profile %d at %d: %w", card.Index, card.UUID, profileID, start, ret)
	}
	giInfo, ret := gi.GetInfo()
	if ret != nvml.SUCCESS {
		return gpu.MIGInstance{}, errors.Join(fmt.Errorf("card %d (%s): reading the new GPU instance: %w", card.Index, card.UUID, ret), destroyGI(gi))
	}
	out, err := p.complete(dev, card, gi, giInfo, int(info.SliceCount))
	if err != nil {
		// complete destroyed the compute instance it may have created:
		// no GPU instance left without its compute instance.
		return gpu.MIGInstance{}, errors.Join(err, destroyGI(gi))
	}
	klog.FromContext(ctx).V(2).Info("Created MIG instance", "card", card.Index, "uuid", card.UUID, "instance", out.String(), "migUUID", out.UUID)
	return out, nil
}

func destroyGI(gi nvml.GpuInstance) error {
	if ret := gi.Destroy(); ret != nvml.SUCCESS {
		return fmt.Errorf("destroying the GPU instance again: %w", ret)
	}
	return nil
}

// complete creates the compute instance spanning gi (computeSlices of
// them) and reads its MIG device.
func (p *partitions) complete(dev nvml.Device, card gpu.GPU, gi nvml.GpuInstance, giInfo nvml.GpuInstanceInfo, computeSlices int) (gpu.MIGInstance, error) {
	out := gpu.MIGInstance{ProfileID: int(giInfo.ProfileId), GPUInstanceID: int(giInfo.Id), ComputeInstanceID: -1,
		Placement: gpu.MIGPlacement{Start: int(giInfo.Placement.Start), Size: int(giInfo.Placement.Size)}}
	var ciInfo *nvml.ComputeInstanceProfileInfo
	for profile := 0; profile < nvml.COMPUTE_INSTANCE_PROFILE_COUNT; profile++ {
		info, ret := gi.GetComputeInstanceProfileInfo(profile, nvml.COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED)
		if ret == nvml.SUCCESS && int(info.SliceCount) == computeSlices {
			ciInfo = &info
			break
		}
	}
	if ciInfo == nil {
		return out, fmt.Errorf("card %d (%s): GPU instance %d has no compute instance profile of %d slices", card.Index, card.UUID, out.GPUInstanceID, computeSlices)
	}
	ci, ret := gi.CreateComputeInstance(ciInfo)
	if ret != nvml.SUCCESS {
		return out, fmt.Errorf("card %d (%s): creating the compute instance of GPU instance %d: %w", card.Index, card.UUID, out.GPUInstanceID, ret)
	}
	// Past this point a failure destroys the compute instance again: gi
	// is left as it was found (Create then destroys it, which NVML
	// refuses with IN_USE while it has a compute instance).
	fail := func(err error) (gpu.MIGInstance, error) {
		if ret := ci.Destroy(); ret != nvml.SUCCESS {
			err = errors.Join(err, fmt.Errorf("destroying the compute instance again: %w", ret))
		}
		out.ComputeInstanceID, out.UUID = -1, ""
		return out, err
	}
	ciInfoGot, ret := ci.GetInfo()
	if ret != nvml.SUCCESS {
		return fail(fmt.Errorf("card %d (%s): reading the compute instance of GPU instance %d: %w", card.Index, card.UUID, out.GPUInstanceID, ret))
	}
	out.ComputeInstanceID = int(ciInfoGot.Id)
	uuids, err := migUUIDs(dev)
	if err != nil {
		return fail(fmt.Errorf("card %d (%s): %w", card.Index, card.UUID, err))
	}
	out.UUID = uuids[[2]int{out.GPUInstanceID, out.ComputeInstanceID}]
	if out.UUID == "" {
		return fail(fmt.Errorf("card %d (%s): no MIG device for GPU instance %d, compute instance %d", card.Index, card.UUID, out.GPUInstanceID, out.ComputeInstanceID))
	}
	return out, nil
}

// migUUIDs maps (GPU instance, compute instance) to the MIG device's UUID.
func migUUIDs(dev nvml.Device) (map[[2]int]string, error) {
	n, ret := dev.GetMaxMigDeviceCount()
	if ret != nvml.SUCCESS {
		return nil, fmt.Errorf("counting MIG devices: %w", ret)
	}
	out := map[[2]int]string{}
	for i := 0; i < n; i++ {
		mig, ret := dev.GetMigDeviceHandleByIndex(i)
		if ret == nvml.ERROR_NOT_FOUND {
			continue
		}
		if ret != nvml.SUCCESS {
			return nil, fmt.Errorf("MIG device %d: %w", i, ret)
		}
		gi, ret1 := mig.GetGpuInstanceId()
		ci, ret2 := mig.GetComputeInstanceId()
		uuid, ret3 := mig.GetUUID()
		if ret1 != nvml.SUCCESS || ret2 != nvml.SUCCESS || ret3 != nvml.SUCCESS {
			return nil, fmt.Errorf("MIG device %d: %v", i, errors.Join(ret1, ret2, ret3))
		}
		out[[2]int{gi, ci}] = uuid
	}
	return out, nil
}

// CompleteComputeInstance implements gpu.MIGPartitions.
func (p *partitions) CompleteComputeInstance(_ context.Context, card gpu.GPU, gpuInstanceID int) (gpu.MIGInstance, error) {
	dev, err := p.device(card)
	if err != nil {
		return gpu.MIGInstance{}, err
	}
	gi, ret := dev.GetGpuInstanceById(gpuInstanceID)
	if ret != nvml.SUCCESS {
		return gpu.MIGInstance{}, fmt.Errorf("card %d (%s): GPU instance %d: %w", card.Index, card.UUID, gpuInstanceID, ret)
	}
	giInfo, ret := gi.GetInfo()
	if ret != nvml.SUCCESS {
		return gpu.MIGInstance{}, fmt.Errorf("card %d (%s): GPU instance %d: %w", card.Index, card.UUID, gpuInstanceID, ret)
	}
	info, err := profileByID(dev, int(giInfo.ProfileId))
	if err != nil {
		return gpu.MIGInstance{}, fmt.Errorf("card %d (%s): %w", card.Index, card.UUID, err)
	}
	return p.complete(dev, card, gi, giInfo, int(info.SliceCount))
}

// computeInstances lists gi's compute instances, sorted by ID.
func computeInstances(gi nvml.GpuInstance) ([]nvml.ComputeInstance, []int, error) {
	var cis []nvml.ComputeInstance
	var ids []int
	for profile := 0; profile < nvml.COMPUTE_INSTANCE_PROFILE_COUNT; profile++ {
		info, ret := gi.GetComputeInstanceProfileInfo(profile, nvml.COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED)
		if ret != nvml.SUCCESS {
			continue // not a compute profile of this GPU instance
		}
		list, ret := gi.GetComputeInstances(&info)
		if ret != nvml.SUCCESS {
			return nil, nil, fmt.Errorf("listing compute instances: %w", ret)
		}
		for _, ci := range list {
			ciInfo, ret := ci.GetInfo()
			if ret != nvml.SUCCESS {
				return nil, nil, fmt.Errorf("reading a compute instance: %w", ret)
			}
			cis = append(cis, ci)
			ids = append(ids, int(ciInfo.Id))
		}
	}
	return cis, ids, nil
}

// Destroy implements gpu.MIGPartitions.
func (p *partitions) Destroy(ctx context.Context, card gpu.GPU, gpuInstanceID int) error {
	dev, err := p.device(card)
	if err != nil {
		return err
	}
	gi, ret := dev.GetGpuInstanceById(gpuInstanceID)
	if ret == nvml.ERROR_NOT_FOUND || ret == nvml.ERROR_INVALID_ARGUMENT {
		return nil
	}
	if ret != nvml.SUCCESS {
		return fmt.Errorf("card %d (%s): GPU instance %d: %w", card.Index, card.UUID, gpuInstanceID, ret)
	}
	cis, _, err := computeInstances(gi)
	if err != nil {
		return fmt.Errorf("card %d (%s): GPU instance %d: %w", card.Index, card.UUID, gpuInstanceID, err)
	}
	for _, ci := range cis {
		if ret := ci.Destroy(); ret != nvml.SUCCESS {
			hint := ""
			if ret == nvml.ERROR_IN_USE {
				hint = " (a process still runs on it: nvidia-smi lists it; it goes when the pod's containers have stopped)"
			}
			return fmt.Errorf("card %d (%s): destroying a compute instance of GPU instance %d: %w%s", card.Index, card.UUID, gpuInstanceID, ret, hint)
		}
	}
	if ret := gi.Destroy(); ret != nvml.SUCCESS {
		return fmt.Errorf("card %d (%s): destroying GPU instance %d: %w", card.Index, card.UUID, gpuInstanceID, ret)
	}
	klog.FromContext(ctx).V(2).Info("Destroyed MIG instance", "card", card.Index, "uuid", card.UUID, "gpuInstance", gpuInstanceID)
	return nil
}

// List implements gpu.MIGPartitions.
func (p *partitions) List(_ context.Context, card gpu.GPU) ([]gpu.MIGInstance, error) {
	dev, err := p.device(card)
	if err != nil {
		return nil, err
	}
	if cur, _, ret := dev.GetMigMode(); ret != nvml.SUCCESS || cur != nvml.DEVICE_MIG_ENABLE {
		return nil, nil // no instances outside MIG mode
	}
	uuids, err := migUUIDs(dev)
	if err != nil {
		return nil, fmt.Errorf("card %d (%s): %w", card.Index, card.UUID, err)
	}
	var out []gpu.MIGInstance
	for profile := 0; profile < nvml.GPU_INSTANCE_PROFILE_COUNT; profile++ {
		info, ret := dev.GetGpuInstanceProfileInfo(profile)
		if ret == nvml.ERROR_INVALID_ARGUMENT {
			break
		}
		if ret != nvml.SUCCESS {
			continue
		}
		gis, ret := dev.GetGpuInstances(&info)
		if ret != nvml.SUCCESS {
			return nil, fmt.Errorf("card %d (%s): GPU instances of profile %d: %w", card.Index, card.UUID, info.Id, ret)
		}
		for _, gi := range gis {
			giInfo, ret := gi.GetInfo()
			if ret != nvml.SUCCESS {
				return nil, fmt.Errorf("card %d (%s): reading a GPU instance: %w", card.Index, card.UUID, ret)
			}
			m := gpu.MIGInstance{ProfileID: int(giInfo.ProfileId), GPUInstanceID: int(giInfo.Id), ComputeInstanceID: -1,
				Placement: gpu.MIGPlacement{Start: int(giInfo.Placement.Start), Size: int(giInfo.Placement.Size)}}
			_, ids, err := computeInstances(gi)
			if err != nil {
				return nil, fmt.Errorf("card %d (%s): GPU instance %d: %w", card.Index, card.UUID, m.GPUInstanceID, err)
			}
			if len(ids) > 0 {
				m.ComputeInstanceID = slices.Min(ids)
				m.UUID = uuids[[2]int{m.GPUInstanceID, m.ComputeInstanceID}]
			}
			out = append(out, m)
		}
	}
	slices.SortFunc(out, func(a, b gpu.MIGInstance) int { return a.Placement.Start - b.Placement.Start })
	return out, nil
}
