//go:build cgo

package nvmlgpu

import (
	"context"
	"errors"
	"fmt"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"k8s.io/klog/v2"

	"github.com/tangram-gpu/tangram/pkg/gpu"
)

// eventWaitMillis bounds one nvmlEventSetWait so a cancelled context is
// noticed within that time.
const eventWaitMillis = 1000

// healthEventTypes are the NVML events the monitor wants, where a card
// supports them: XIDs and (newer drivers) the recovery action NVML
// recommends after one.
const healthEventTypes = nvml.EventTypeXidCriticalError | nvml.EventTypeGpuRecoveryAction

var _ gpu.HealthWatcher = &source{}

// WatchHealth implements gpu.HealthWatcher over one NVML event set: XID
// critical errors become XID events, NVML_ERROR_GPU_IS_LOST a lost card,
// and a recovery action of NONE a recovery. It is an error when no card
// supports XID events.
func (s *source) WatchHealth(ctx context.Context, events chan<- gpu.HealthEvent) error {
	logger := klog.FromContext(ctx)
	set, ret := s.lib.EventSetCreate()
	if ret != nvml.SUCCESS {
		return fmt.Errorf("creating an NVML event set: %w", ret)
	}
	defer func() {
		if ret := set.Free(); ret != nvml.SUCCESS {
			logger.Error(ret, "Freeing the NVML event set")
		}
	}()
	count, ret := s.lib.DeviceGetCount()
	if ret != nvml.SUCCESS {
		return fmt.Errorf("counting GPUs for health events: nvmlDeviceGetCount: %w", ret)
	}
	var registered []int
	for i := 0; i < count; i++ {
		dev, ret := s.lib.DeviceGetHandleByIndex(i)
		if ret != nvml.SUCCESS {
			logger.Error(ret, "Not watching a GPU's health: cannot get its handle", "index", i)
			continue
		}
		supported, ret := dev.GetSupportedEventTypes()
		if ret != nvml.SUCCESS {
			logger.Error(ret, "Not watching a GPU's health: cannot read its supported events", "index", i)
			continue
		}
		types := supported & healthEventTypes
		if types&nvml.EventTypeXidCriticalError == 0 {
			logger.Info("GPU does not report XID events; its health is not watched", "index", i)
			continue
		}
		if ret := dev.RegisterEvents(types, set); ret != nvml.SUCCESS {
			logger.Error(ret, "Not watching a GPU's health: registering for events failed", "index", i)
			continue
		}
		registered = append(registered, i)
	}
	if len(registered) == 0 {
		return errors.New("no GPU on this node reports XID events through NVML")
	}
	logger.Info("Watching GPU health through NVML events", "gpus", registered)
	send := func(ev gpu.HealthEvent) bool {
		select {
		case events <- ev:
			return true
		case <-ctx.Done():
			return false
		}
	}
	for ctx.Err() == nil {
		data, ret := set.Wait(eventWaitMillis)
		switch ret {
		case nvml.SUCCESS:
			index, ret := data.Device.GetIndex()
			if ret != nvml.SUCCESS {
				logger.Error(ret, "NVML event for a GPU whose index cannot be read; ignoring it", "eventType", data.EventType, "data", data.EventData)
				continue
			}
			if ev, ok := healthEventOf(index, data); ok && !send(ev) {
				return nil
			}
		case nvml.ERROR_TIMEOUT:
		case nvml.ERROR_GPU_IS_LOST:
			// NVML does not always say which card; then every watched
			// card is suspect, as a lost card can take the bus with it.
			lost := registered
			if index, ret := data.Device.GetIndex(); ret == nvml.SUCCESS {
				lost = []int{index}
			}
			logger.Error(ret, "NVML reports a lost GPU", "gpus", lost)
			for _, index := range lost {
				if !send(gpu.HealthEvent{Index: index, Kind: gpu.HealthEventGPULost}) {
					return nil
				}
			}
		default:
			return fmt.Errorf("waiting for NVML events: %w", ret)
		}
	}
	return nil
}

// healthEventOf turns an NVML event into a health event; ok is false for
// events that say nothing about health.
func healthEventOf(index int, data nvml.EventData) (gpu.HealthEvent, bool) {
	switch data.EventType {
	case nvml.EventTypeXidCriticalError:
		return gpu.HealthEvent{Index: index, Kind: gpu.HealthEventXID, XID: data.EventData}, true
	case nvml.EventTypeGpuRecoveryAction:
		action := nvml.DeviceGpuRecoveryAction(data.EventData)
		if action == nvml.GPU_RECOVERY_ACTION_NONE {
			return gpu.HealthEvent{Index: index, Kind: gpu.HealthEventRecovered, Message: "NVML: no recovery action pending"}, true
		}
		// The XID that needs the action has tainted the card; the action
		// is for the operator.
		return gpu.HealthEvent{}, false
	default:
		return gpu.HealthEvent{}, false
	}
}
