//go:build cgo

package nvmlgpu

import (
	"context"
	"fmt"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// memoryLimitsSymbol is NVML's per-cgroup memory limit call, which drivers
// before release 615 do not have (pkg/plugin/memlimit calls it).
const memoryLimitsSymbol = "nvmlDeviceSetMemoryLimits_v1"

// HasMemoryLimitsSymbol says whether the loaded NVML has the per-cgroup
// memory limit call. It only looks the symbol up: calling one the library
// lacks would kill the process.
func (s *source) HasMemoryLimitsSymbol() bool {
	return s.lib.Extensions().LookupSymbol(memoryLimitsSymbol) == nil
}

// MIGEnabled lists the UUIDs of the cards whose current MIG mode is on. A
// card that cannot do MIG (NOT_SUPPORTED) is not in MIG mode.
func (s *source) MIGEnabled(ctx context.Context) ([]string, error) {
	count, ret := s.lib.DeviceGetCount()
	if ret != nvml.SUCCESS {
		return nil, fmt.Errorf("reading MIG modes: nvmlDeviceGetCount: %w", ret)
	}
	var on []string
	for i := 0; i < count; i++ {
		dev, ret := s.lib.DeviceGetHandleByIndex(i)
		if ret != nvml.SUCCESS {
			return nil, fmt.Errorf("reading the MIG mode of card %d: %w", i, ret)
		}
		current, _, ret := dev.GetMigMode()
		switch {
		case ret == nvml.ERROR_NOT_SUPPORTED:
			continue
		case ret != nvml.SUCCESS:
			return nil, fmt.Errorf("reading the MIG mode of card %d: %w", i, ret)
		case current == nvml.DEVICE_MIG_ENABLE:
			id, ret := dev.GetUUID()
			if ret != nvml.SUCCESS {
				id = fmt.Sprintf("card %d", i)
			}
			on = append(on, id)
		}
	}
	return on, nil
}
