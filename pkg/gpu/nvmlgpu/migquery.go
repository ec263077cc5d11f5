//go:build cgo

package nvmlgpu

import (
	"fmt"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/tangram-gpu/tangram/pkg/gpu"
)

// QueryMIG asks NVML, through src (a Source from Open), every card's MIG
// mode and every GPU instance profile with its placements, in MIG mode or
// not, and records each answer. Nothing is created or changed.
func QueryMIG(src gpu.Source) ([]gpu.MIGQuery, error) {
	s, ok := src.(*source)
	if !ok {
		return nil, fmt.Errorf("querying MIG: the source is not NVML's (%T)", src)
	}
	count, ret := s.lib.DeviceGetCount()
	if ret != nvml.SUCCESS {
		return nil, fmt.Errorf("querying MIG: counting the cards: %w", ret)
	}
	var out []gpu.MIGQuery
	for i := 0; i < count; i++ {
		dev, ret := s.lib.DeviceGetHandleByIndex(i)
		if ret != nvml.SUCCESS {
			return nil, fmt.Errorf("querying MIG: card %d's handle: %w", i, ret)
		}
		out = append(out, queryCardMIG(i, dev))
	}
	return out, nil
}

func queryCardMIG(index int, dev nvml.Device) gpu.MIGQuery {
	q := gpu.MIGQuery{Index: index}
	q.UUID, _ = dev.GetUUID()
	q.Product, _ = dev.GetName()
	var cardBytes int64
	if mem, ret := dev.GetMemoryInfo(); ret == nvml.SUCCESS {
		cardBytes = int64(mem.Total)
		q.MemoryMiB = cardBytes >> 20
	}
	current, pending, ret := dev.GetMigMode()
	q.ModeReturn = ReturnName(ret)
	q.Enabled, q.Pending = current == nvml.DEVICE_MIG_ENABLE, pending == nvml.DEVICE_MIG_ENABLE
	// NVML's profile values run from 0 to NVML_GPU_INSTANCE_PROFILE_COUNT;
	// the bound stops a library that never says INVALID_ARGUMENT.
	for profile := 0; profile < 64; profile++ {
		p := queryProfile(dev, profile, cardBytes)
		q.Profiles = append(q.Profiles, p)
		if p.Return == returnNames[nvml.ERROR_INVALID_ARGUMENT] {
			break
		}
	}
	return q
}

func queryProfile(dev nvml.Device, profile int, cardBytes int64) gpu.MIGProfileQuery {
	p := gpu.MIGProfileQuery{Profile: profile}
	info, version, name, ret := profileInfo(dev, profile)
	p.Return = ReturnName(ret)
	if ret != nvml.SUCCESS {
		return p
	}
	p.InfoVersion, p.NVMLName = version, name
	// The inventory asks with the v1 call (go-nvml's mocks cannot stand in
	// for the versioned one): record that it answers the same.
	if v1, ret1 := dev.GetGpuInstanceProfileInfo(profile); ret1 != nvml.SUCCESS {
		p.V1Return = ReturnName(ret1)
	} else if v1.Id != info.Id || v1.SliceCount != info.SliceCount || v1.MemorySizeMB != info.MemorySizeMB || v1.InstanceCount != info.InstanceCount {
		p.V1Return = fmt.Sprintf("SUCCESS but differs: ID %d, slices %d, %d MiB, %d instances", v1.Id, v1.SliceCount, v1.MemorySizeMB, v1.InstanceCount)
	} else {
		p.V1Return = ReturnName(ret1)
	}
	p.ID, p.ComputeSlices, p.Instances = int(info.Id), int(info.SliceCount), int(info.InstanceCount)
	p.Multiprocessors, p.CopyEngines = int(info.MultiprocessorCount), int(info.CopyEngineCount)
	p.Decoders, p.Encoders, p.JPEGs, p.OFAs = int(info.DecoderCount), int(info.EncoderCount), int(info.JpegCount), int(info.OfaCount)
	p.MemoryMiB = info.MemorySizeMB
	if name, err := migProfileName(profile, info, cardBytes); err != nil {
		p.NameError = err.Error()
	} else {
		p.TangramName = name
	}
	placements, ret := dev.GetGpuInstancePossiblePlacements(&info)
	p.PlacementsReturn = ReturnName(ret)
	for _, pl := range placements {
		p.Placements = append(p.Placements, gpu.MIGPlacement{Start: int(pl.Start), Size: int(pl.Size)})
	}
	return p
}

// profileInfo asks NVML one GPU instance profile the way the H200 run of
// gpu-check asked it (docs/gpu-reports): the versioned query, v3 then v2
// (both carry NVML's own name, empty with MIG off on r580), then the v1
// call of drivers older than the versioned one. version is the struct
// version that answered; ret the last query's answer.
func profileInfo(dev nvml.Device, profile int) (info nvml.GpuInstanceProfileInfo, version int, name string, ret nvml.Return) {
	v := dev.GetGpuInstanceProfileInfoV(profile)
	if v3, ret := v.V3(); ret == nvml.SUCCESS {
		return nvml.GpuInstanceProfileInfo{Id: v3.Id, SliceCount: v3.SliceCount,
			InstanceCount: v3.InstanceCount, MultiprocessorCount: v3.MultiprocessorCount, CopyEngineCount: v3.CopyEngineCount,
			DecoderCount: v3.DecoderCount, EncoderCount: v3.EncoderCount, JpegCount: v3.JpegCount, OfaCount: v3.OfaCount,
			MemorySizeMB: v3.MemorySizeMB}, 3, cString(v3.Name[:]), ret
	}
	if v2, ret := v.V2(); ret == nvml.SUCCESS {
		return nvml.GpuInstanceProfileInfo{Id: v2.Id, IsP2pSupported: v2.IsP2pSupported, SliceCount: v2.SliceCount,
			InstanceCount: v2.InstanceCount, MultiprocessorCount: v2.MultiprocessorCount, CopyEngineCount: v2.CopyEngineCount,
			DecoderCount: v2.DecoderCount, EncoderCount: v2.EncoderCount, JpegCount: v2.JpegCount, OfaCount: v2.OfaCount,
			MemorySizeMB: v2.MemorySizeMB}, 2, cString(v2.Name[:]), ret
	}
	info, ret = dev.GetGpuInstanceProfileInfo(profile)
	return info, 1, "", ret
}
