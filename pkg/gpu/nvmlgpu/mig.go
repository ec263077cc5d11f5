//go:build cgo

package nvmlgpu

import (
	"fmt"
	"math"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/tangram-gpu/tangram/pkg/gpu"
)

// mig reads the card's MIG mode and, in either mode (NVML answers the
// profile and placement queries with MIG off too, as an H200 on r580 did),
// its GPU instance profiles and their placements, through NVML's queries
// only (no table of our own): nvmlDeviceGetGpuInstanceProfileInfo for every profile value
// from 0 until INVALID_ARGUMENT, as nvml.h says to enumerate them, and
// nvmlDeviceGetGpuInstancePossiblePlacements_v2. nil for a card that
// cannot do MIG (NOT_SUPPORTED) or whose mode cannot be read. A profile
// that cannot be read is left out and logged; the card stays.
func (r cardReader) mig(cardBytes int64) *gpu.MIG {
	current, pending, ret := r.dev.GetMigMode()
	if ret != nvml.SUCCESS {
		r.leaveOut("migMode", ret)
		return nil
	}
	m := &gpu.MIG{Enabled: current == nvml.DEVICE_MIG_ENABLE, PendingEnabled: pending == nvml.DEVICE_MIG_ENABLE}
	for profile := 0; ; profile++ {
		info, ret := r.dev.GetGpuInstanceProfileInfo(profile)
		if ret == nvml.ERROR_INVALID_ARGUMENT {
			break // past the last profile this NVML knows
		}
		if ret == nvml.ERROR_NOT_SUPPORTED {
			continue // not a profile of this card
		}
		if ret != nvml.SUCCESS {
			r.logger.Error(ret, "Leaving out a MIG profile NVML cannot report", "profile", profile)
			continue
		}
		name, err := migProfileName(profile, info, cardBytes)
		if err != nil {
			r.logger.Error(err, "Leaving out a MIG profile", "profile", profile, "profileID", info.Id)
			continue
		}
		placements, ret := r.dev.GetGpuInstancePossiblePlacements(&info)
		if ret != nvml.SUCCESS {
			r.logger.Error(ret, "Leaving out a MIG profile whose placements NVML cannot report", "profile", name)
			continue
		}
		p := gpu.MIGProfile{
			ID:              int(info.Id),
			Name:            name,
			ComputeSlices:   int(info.SliceCount),
			Instances:       int(info.InstanceCount),
			Multiprocessors: int(info.MultiprocessorCount),
			CopyEngines:     int(info.CopyEngineCount),
			Decoders:        int(info.DecoderCount),
			Encoders:        int(info.EncoderCount),
			JPEGs:           int(info.JpegCount),
			OFAs:            int(info.OfaCount),
			MemoryBytes:     int64(info.MemorySizeMB) << 20,
		}
		for _, pl := range placements {
			p.Placements = append(p.Placements, gpu.MIGPlacement{Start: int(pl.Start), Size: int(pl.Size)})
		}
		m.Profiles = append(m.Profiles, p)
	}
	return m
}

// migProfileName names a GPU instance profile the way NVIDIA's own Go
// tooling does (go-nvlib pkg/nvlib/device, MigProfileInfo.String, used by
// the GPU operator, mig-parted and NVIDIA's DRA driver): "<g>g.<gb>gb"
// plus "+me" (media extensions), "-me" (none), "+me.all" or "+gfx" after
// the NVML profile value, where gb is the profile's memory as eighths of
// the card's, times the card's memory in whole GB. This gives the MIG
// user guide's names (1g.10gb, 3g.71gb on an H200) from NVML's numbers.
func migProfileName(profile int, info nvml.GpuInstanceProfileInfo, cardBytes int64) (string, error) {
	var slices int
	suffix := ""
	switch profile {
	case nvml.GPU_INSTANCE_PROFILE_1_SLICE, nvml.GPU_INSTANCE_PROFILE_1_SLICE_REV2:
		slices = 1
	case nvml.GPU_INSTANCE_PROFILE_1_SLICE_REV1:
		slices, suffix = 1, "+me"
	case nvml.GPU_INSTANCE_PROFILE_1_SLICE_ALL_ME:
		slices, suffix = 1, "+me.all"
	case nvml.GPU_INSTANCE_PROFILE_1_SLICE_NO_ME:
		slices, suffix = 1, "-me"
	case nvml.GPU_INSTANCE_PROFILE_1_SLICE_GFX:
		slices, suffix = 1, "+gfx"
	case nvml.GPU_INSTANCE_PROFILE_2_SLICE:
		slices = 2
	case nvml.GPU_INSTANCE_PROFILE_2_SLICE_REV1:
		slices, suffix = 2, "+me"
	case nvml.GPU_INSTANCE_PROFILE_2_SLICE_ALL_ME:
		slices, suffix = 2, "+me.all"
	case nvml.GPU_INSTANCE_PROFILE_2_SLICE_NO_ME:
		slices, suffix = 2, "-me"
	case nvml.GPU_INSTANCE_PROFILE_2_SLICE_GFX:
		slices, suffix = 2, "+gfx"
	case nvml.GPU_INSTANCE_PROFILE_3_SLICE:
		slices = 3
	case nvml.GPU_INSTANCE_PROFILE_3_SLICE_GFX:
		slices, suffix = 3, "+gfx"
	case nvml.GPU_INSTANCE_PROFILE_4_SLICE:
		slices = 4
	case nvml.GPU_INSTANCE_PROFILE_4_SLICE_GFX:
		slices, suffix = 4, "+gfx"
	case nvml.GPU_INSTANCE_PROFILE_6_SLICE:
		slices = 6
	case nvml.GPU_INSTANCE_PROFILE_7_SLICE:
		slices = 7
	case nvml.GPU_INSTANCE_PROFILE_8_SLICE:
		slices = 8
	default:
		return "", fmt.Errorf("NVML profile %d (ID %d) is not one Tangram can name", profile, info.Id)
	}
	if cardBytes <= 0 || info.MemorySizeMB == 0 {
		return "", fmt.Errorf("NVML profile %d (ID %d): no memory size to name it by (card %d bytes, profile %d MiB)",
			profile, info.Id, cardBytes, info.MemorySizeMB)
	}
	const oneGB = 1 << 30
	fraction := float64(info.MemorySizeMB<<20) / float64(cardBytes)
	fraction = math.Ceil(fraction*8) / 8
	cardGB := float64((cardBytes + oneGB - 1) / oneGB)
	return fmt.Sprintf("%dg.%dgb%s", slices, int64(math.Round(fraction*cardGB)), suffix), nil
}
