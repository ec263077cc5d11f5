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
	regs, err := s.registerHealth(logger, set)
	if err != nil {
		return err
	}
	var registered []int
	for _, r := range regs {
		if r.Error == "" {
			registered = append(registered, r.Index)
		}
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

// allInstances is the instance ID of NVML events that concern the whole
// card.
const allInstances = 0xFFFFFFFF

// healthEventOf turns an NVML event into a health event; ok is false for
// events that say nothing about health.
func healthEventOf(index int, data nvml.EventData) (gpu.HealthEvent, bool) {
	switch data.EventType {
	case nvml.EventTypeXidCriticalError:
		ev := gpu.HealthEvent{Index: index, Kind: gpu.HealthEventXID, XID: data.EventData}
		// nvml.h: the instance IDs are 0xFFFFFFFF when the event is not
		// MIG-specific (the whole card).
		if data.GpuInstanceId != allInstances {
			gi := int(data.GpuInstanceId)
			ev.GPUInstance = &gi
			if data.ComputeInstanceId != allInstances {
				ci := int(data.ComputeInstanceId)
				ev.ComputeInstance = &ci
			}
		}
		return ev, true
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

func eventNames(mask uint64) []string {
	names := []string{}
	if mask&nvml.EventTypeXidCriticalError != 0 {
		names = append(names, EventNameXidCriticalError)
	}
	if mask&nvml.EventTypeGpuRecoveryAction != 0 {
		names = append(names, EventNameGpuRecoveryAction)
	}
	return names
}

// registerHealth registers every card that reports XID events on set for
// the monitor's events, and says card by card what it did. Only a failure
// to count the cards is an error.
func (s *source) registerHealth(logger klog.Logger, set nvml.EventSet) ([]gpu.HealthRegistration, error) {
	count, ret := s.lib.DeviceGetCount()
	if ret != nvml.SUCCESS {
		return nil, fmt.Errorf("counting GPUs for health events: nvmlDeviceGetCount: %w", ret)
	}
	regs := make([]gpu.HealthRegistration, 0, count)
	for i := 0; i < count; i++ {
		reg := gpu.HealthRegistration{Index: i, Wanted: eventNames(healthEventTypes), Supported: []string{}, Registered: []string{}}
		dev, ret := s.lib.DeviceGetHandleByIndex(i)
		if ret != nvml.SUCCESS {
			logger.Error(ret, "Not watching a GPU's health: cannot get its handle", "index", i)
			reg.Error = fmt.Sprintf("cannot get its handle: %v", ret)
			regs = append(regs, reg)
			continue
		}
		if id, ret := dev.GetUUID(); ret == nvml.SUCCESS {
			reg.UUID = id
		}
		supported, ret := dev.GetSupportedEventTypes()
		if ret != nvml.SUCCESS {
			logger.Error(ret, "Not watching a GPU's health: cannot read its supported events", "index", i)
			reg.Error = fmt.Sprintf("cannot read its supported events: %v", ret)
			regs = append(regs, reg)
			continue
		}
		reg.Supported = eventNames(supported)
		types := supported & healthEventTypes
		if types&nvml.EventTypeXidCriticalError == 0 {
			logger.Info("GPU does not report XID events; its health is not watched", "index", i)
			reg.Error = "the card does not report XID events"
			regs = append(regs, reg)
			continue
		}
		if ret := dev.RegisterEvents(types, set); ret != nvml.SUCCESS {
			logger.Error(ret, "Not watching a GPU's health: registering for events failed", "index", i)
			reg.Error = fmt.Sprintf("registering for events failed: %v", ret)
			regs = append(regs, reg)
			continue
		}
		reg.Registered = eventNames(types)
		regs = append(regs, reg)
	}
	return regs, nil
}

var _ gpu.HealthProber = &source{}

// ProbeHealth implements gpu.HealthProber: the registration WatchHealth
// does, on an event set of its own that it frees before returning.
func (s *source) ProbeHealth(ctx context.Context) ([]gpu.HealthRegistration, error) {
	logger := klog.FromContext(ctx)
	set, ret := s.lib.EventSetCreate()
	if ret != nvml.SUCCESS {
		return nil, fmt.Errorf("creating an NVML event set: %w", ret)
	}
	defer func() {
		if ret := set.Free(); ret != nvml.SUCCESS {
			logger.Error(ret, "Freeing the NVML event set")
		}
	}()
	return s.registerHealth(logger, set)
}
