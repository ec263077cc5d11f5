// Package xidtaint turns the cards' health events (NVML XIDs, a card lost
// from the bus, recovery) into ResourceSlice device taints and per-card
// health, and takes the taints away again when a card recovers.
//
// Classify is the pure event → taint table; Monitor keeps the taints of
// every card and expires them; ApplyTaints puts them into what the plugin
// publishes.
package xidtaint

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	resourceapi "k8s.io/api/resource/v1"

	"github.com/tangram-gpu/tangram/pkg/device"
	"github.com/tangram-gpu/tangram/pkg/gpu"
)

// Taint keys the monitor owns. Taints with other keys (put there by
// someone else) are left alone.
const (
	// TaintKeyXID carries the XID number as its value.
	TaintKeyXID = device.DriverName + "/xid"
	// TaintKeyGPULost has the value "true".
	TaintKeyGPULost = device.DriverName + "/gpu-lost"
)

// IsOwnTaintKey reports whether key is one of the monitor's taint keys.
func IsOwnTaintKey(key string) bool { return key == TaintKeyXID || key == TaintKeyGPULost }

// DefaultInformationalXIDs are XIDs caused by the application, not the
// card (13 graphics engine exception, 31 MMU fault, 43 GPU stopped
// processing, 45 preemptive cleanup, 68 video processor exception, 109
// context switch timeout): the card is fine for the next pod. They become
// None taints, visible but not blocking.
var DefaultInformationalXIDs = []uint64{13, 31, 43, 45, 68, 109}

// Policy says what each XID means. XIDs in neither list are fatal: the
// card gets a NoSchedule taint, since an unknown XID is more likely a
// hardware or driver fault than harmless.
type Policy struct {
	// InformationalXIDs get a None taint.
	InformationalXIDs []uint64
	// IgnoredXIDs get no taint at all (still logged).
	IgnoredXIDs []uint64
}

// DefaultPolicy is the built-in table.
func DefaultPolicy() Policy {
	return Policy{InformationalXIDs: slices.Clone(DefaultInformationalXIDs)}
}

// Validate refuses an XID listed as both informational and ignored.
func (p Policy) Validate() error {
	for _, x := range p.IgnoredXIDs {
		if slices.Contains(p.InformationalXIDs, x) {
			return fmt.Errorf("XID %d is listed as both informational and ignored; list it once", x)
		}
	}
	return nil
}

// Taint is what one event does to a card.
type Taint struct {
	Key    string
	Value  string
	Effect resourceapi.DeviceTaintEffect
}

// Classify returns the taint an event puts on its card; ok is false for
// events that add none (recovery, ignored XIDs).
func (p Policy) Classify(ev gpu.HealthEvent) (t Taint, ok bool) {
	switch ev.Kind {
	case gpu.HealthEventGPULost:
		return Taint{Key: TaintKeyGPULost, Value: "true", Effect: resourceapi.DeviceTaintEffectNoSchedule}, true
	case gpu.HealthEventXID:
		value := strconv.FormatUint(ev.XID, 10)
		switch {
		case slices.Contains(p.IgnoredXIDs, ev.XID):
			return Taint{}, false
		case slices.Contains(p.InformationalXIDs, ev.XID):
			return Taint{Key: TaintKeyXID, Value: value, Effect: resourceapi.DeviceTaintEffectNone}, true
		default:
			return Taint{Key: TaintKeyXID, Value: value, Effect: resourceapi.DeviceTaintEffectNoSchedule}, true
		}
	default:
		return Taint{}, false
	}
}

// effectRank orders effects by how much they block: a stronger taint is
// not replaced by a weaker one under the same key.
func effectRank(e resourceapi.DeviceTaintEffect) int {
	switch e {
	case resourceapi.DeviceTaintEffectNoExecute:
		return 2
	case resourceapi.DeviceTaintEffectNoSchedule:
		return 1
	default:
		return 0
	}
}

// Blocks reports whether a taint keeps new claims off the card (the card
// counts as unhealthy).
func Blocks(e resourceapi.DeviceTaintEffect) bool { return effectRank(e) > 0 }

// ParseXIDList parses a comma-separated list of XIDs ("13,31,43"); an
// empty string is an empty list.
func ParseXIDList(s string) ([]uint64, error) {
	var out []uint64
	for _, field := range strings.Split(s, ",") {
		field = strings.TrimSpace(field)
		if field == "" {
			continue
		}
		x, err := strconv.ParseUint(field, 10, 64)
		if err != nil || x == 0 {
			return nil, fmt.Errorf("%q is not an XID: want positive numbers separated by commas, e.g. 13,31,43", field)
		}
		out = append(out, x)
	}
	return out, nil
}
