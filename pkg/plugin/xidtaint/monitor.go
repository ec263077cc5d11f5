package xidtaint

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/tangram-gpu/tangram/pkg/device"
	"github.com/tangram-gpu/tangram/pkg/gpu"
)

// DefaultRecoverAfter is how long a card must stay quiet after its last
// XID before the XID taint is removed.
const DefaultRecoverAfter = 10 * time.Minute

// retryWatchAfter is how long the monitor waits before watching again
// after the source failed.
const retryWatchAfter = 30 * time.Second

// Config configures a Monitor.
type Config struct {
	// Cards are the node's cards; events for other indexes are ignored.
	Cards  []gpu.GPU
	Policy Policy
	// RecoverAfter is the quiet time after a card's last XID after which
	// its XID taint is removed; 0 or less means only an explicit recovery
	// event removes it. A lost card always waits for such an event.
	RecoverAfter time.Duration
	// Clock is the real clock when nil.
	Clock clock.WithTicker
	// MIGDevice names the ResourceSlice device of GPU instance
	// gpuInstance of card index (gpu-<i>-mig-<profileID>-<start>); ok is
	// false when the card has no such instance. nil: an event of a MIG
	// instance taints its whole card.
	MIGDevice func(index, gpuInstance int) (name string, ok bool)
}

// Change is one taint put on or taken off a card.
type Change struct {
	Device string
	UUID   string
	Taint  Taint
	// Added is true when the taint was put on (or its value or effect
	// changed), false when it was removed.
	Added bool
	// Reason says why, for logs and Node events.
	Reason string
}

// DeviceHealth is a card's health as the monitor sees it.
type DeviceHealth struct {
	Device string
	UUID   string
	// Taints are the card's taints, sorted by key.
	Taints []resourceapi.DeviceTaint
	// Known is false while the cards' events cannot be watched.
	Known bool
	// Healthy is false when a taint keeps new claims off the card.
	Healthy bool
	// Message explains the taints (empty when there are none).
	Message string
}

type taintState struct {
	Taint
	added, last time.Time
	count       int
}

// Monitor keeps each card's health taints.
type Monitor struct {
	cfg     Config
	byIndex map[int]gpu.GPU

	mu sync.Mutex
	// taints is device → key → state.
	taints   map[string]map[string]*taintState
	watchErr error
	changed  chan struct{}
}

// NewMonitor returns a monitor with every card healthy.
func NewMonitor(cfg Config) (*Monitor, error) {
	if err := cfg.Policy.Validate(); err != nil {
		return nil, fmt.Errorf("health policy: %w", err)
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	m := &Monitor{cfg: cfg, byIndex: map[int]gpu.GPU{}, taints: map[string]map[string]*taintState{}, changed: make(chan struct{})}
	for _, g := range cfg.Cards {
		m.byIndex[g.Index] = g
	}
	return m, nil
}

// DeviceName is the ResourceSlice device of a card.
func DeviceName(g gpu.GPU) string { return device.CardDeviceName(g.Index) }

// eventDevice is the device an event taints: the MIG partition of the
// event's GPU instance when it names one this node knows (only that
// partition), else the card (which taints all its partitions, see
// ApplyTaints).
func (m *Monitor) eventDevice(g gpu.GPU, ev gpu.HealthEvent) string {
	if ev.GPUInstance != nil && m.cfg.MIGDevice != nil {
		if name, ok := m.cfg.MIGDevice(g.Index, *ev.GPUInstance); ok {
			return name
		}
	}
	return DeviceName(g)
}

// partitionOf reports whether name is a MIG partition of card index.
func partitionOf(name string, index int) bool {
	ref, err := device.ParseDeviceName(name)
	return err == nil && ref.MIG != nil && ref.Index == index
}

// Changed returns a channel closed at the next change of any card's health.
func (m *Monitor) Changed() <-chan struct{} {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.changed
}

func (m *Monitor) notifyLocked() {
	close(m.changed)
	m.changed = make(chan struct{})
}

// Handle applies one event and returns what changed.
func (m *Monitor) Handle(ctx context.Context, ev gpu.HealthEvent) []Change {
	logger := klog.FromContext(ctx)
	g, ok := m.byIndex[ev.Index]
	if !ok {
		logger.Info("Ignoring a health event for a card this node does not publish", "index", ev.Index, "event", ev.Kind, "xid", ev.XID)
		return nil
	}
	now := m.cfg.Clock.Now()
	if ev.Time.IsZero() || ev.Time.After(now) {
		ev.Time = now
	}
	device := m.eventDevice(g, ev)
	logger = logger.WithValues("device", device, "uuid", g.UUID, "event", ev.Kind)
	if ev.GPUInstance != nil && device == DeviceName(g) {
		logger.Info("Health event of a MIG instance this node does not know; it concerns the whole card", "gpuInstance", *ev.GPUInstance)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	var changes []Change
	if ev.Kind == gpu.HealthEventRecovered {
		// A card's recovery clears its partitions too.
		for _, dev := range slices.Sorted(maps.Keys(m.taints)) {
			if dev != device && (device != DeviceName(g) || !partitionOf(dev, g.Index)) {
				continue
			}
			for _, key := range slices.Sorted(maps.Keys(m.taints[dev])) {
				changes = append(changes, Change{Device: dev, UUID: g.UUID, Taint: m.taints[dev][key].Taint,
					Reason: "the card reported recovery" + suffix(ev.Message)})
			}
			delete(m.taints, dev)
		}
		logger.Info("GPU recovered", "removedTaints", len(changes), "message", ev.Message)
	} else {
		taint, ok := m.cfg.Policy.Classify(ev)
		if !ok {
			logger.Info("GPU health event adds no taint (ignored by the XID table)", "xid", ev.XID)
			return nil
		}
		if m.taints[device] == nil {
			m.taints[device] = map[string]*taintState{}
		}
		old := m.taints[device][taint.Key]
		switch {
		case old == nil:
			m.taints[device][taint.Key] = &taintState{Taint: taint, added: ev.Time, last: ev.Time, count: 1}
			changes = append(changes, Change{Device: device, UUID: g.UUID, Taint: taint, Added: true, Reason: describe(ev)})
		case effectRank(taint.Effect) >= effectRank(old.Effect) && old.Taint != taint:
			// A newer or worse problem replaces the one shown.
			*old = taintState{Taint: taint, added: ev.Time, last: ev.Time, count: old.count + 1}
			changes = append(changes, Change{Device: device, UUID: g.UUID, Taint: taint, Added: true, Reason: describe(ev)})
		default:
			// The same or a milder problem again: the card stays tainted
			// as it is, and the quiet time starts again.
			old.last = ev.Time
			old.count++
		}
		logger.Info("GPU health event", "xid", ev.XID, "taintKey", taint.Key, "taintValue", taint.Value, "effect", taint.Effect, "message", ev.Message)
	}
	if len(changes) > 0 {
		m.notifyLocked()
	}
	return changes
}

// Expire removes XID taints that have been quiet for RecoverAfter.
func (m *Monitor) Expire(ctx context.Context) []Change {
	if m.cfg.RecoverAfter <= 0 {
		return nil
	}
	now := m.cfg.Clock.Now()
	m.mu.Lock()
	defer m.mu.Unlock()
	var changes []Change
	for _, device := range slices.Sorted(maps.Keys(m.taints)) {
		st := m.taints[device][TaintKeyXID]
		if st == nil || now.Sub(st.last) < m.cfg.RecoverAfter {
			continue
		}
		delete(m.taints[device], TaintKeyXID)
		if len(m.taints[device]) == 0 {
			delete(m.taints, device)
		}
		changes = append(changes, Change{Device: device, UUID: m.uuidOf(device), Taint: st.Taint,
			Reason: fmt.Sprintf("no new XID for %s since XID %s at %s", m.cfg.RecoverAfter, st.Value, st.last.UTC().Format(time.RFC3339))})
	}
	if len(changes) > 0 {
		klog.FromContext(ctx).Info("GPU XID taints expired", "devices", len(changes), "recoverAfter", m.cfg.RecoverAfter)
		m.notifyLocked()
	}
	return changes
}

// nextExpiry is when Expire next has something to do.
func (m *Monitor) nextExpiry() (time.Time, bool) {
	if m.cfg.RecoverAfter <= 0 {
		return time.Time{}, false
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	var next time.Time
	for _, keys := range m.taints {
		if st := keys[TaintKeyXID]; st != nil {
			at := st.last.Add(m.cfg.RecoverAfter)
			if next.IsZero() || at.Before(next) {
				next = at
			}
		}
	}
	return next, !next.IsZero()
}

func (m *Monitor) uuidOf(name string) string {
	if ref, err := device.ParseDeviceName(name); err == nil {
		return m.byIndex[ref.Index].UUID
	}
	return ""
}

// setWatchError records whether the events can be watched (nil: yes).
func (m *Monitor) setWatchError(err error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if (err == nil) != (m.watchErr == nil) {
		m.watchErr = err
		m.notifyLocked()
	}
	m.watchErr = err
}

// Devices returns every card's health, sorted by index, each followed by
// its MIG partitions that have taints of their own: the taints to publish
// (ApplyTaints copies a card's onto its partitions). The kubelet's
// device-health stream needs the devices it allocated instead: ForKubelet.
func (m *Monitor) Devices() []DeviceHealth {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]DeviceHealth, 0, len(m.byIndex))
	var names []string
	for _, index := range slices.Sorted(maps.Keys(m.byIndex)) {
		g := m.byIndex[index]
		names = append(names, DeviceName(g))
		// Then the card's tainted MIG partitions (the others are healthy
		// unless the card is tainted: ApplyTaints).
		for _, dev := range slices.Sorted(maps.Keys(m.taints)) {
			if partitionOf(dev, index) {
				names = append(names, dev)
			}
		}
	}
	for _, name := range names {
		dh := DeviceHealth{Device: name, UUID: m.uuidOf(name), Known: m.watchErr == nil, Healthy: true}
		var why []string
		for _, key := range slices.Sorted(maps.Keys(m.taints[dh.Device])) {
			st := m.taints[dh.Device][key]
			added := metav1.NewTime(st.added.Truncate(time.Second))
			dh.Taints = append(dh.Taints, resourceapi.DeviceTaint{Key: st.Key, Value: st.Value, Effect: st.Effect, TimeAdded: &added})
			if Blocks(st.Effect) {
				dh.Healthy = false
			}
			why = append(why, m.explainLocked(st))
		}
		dh.Message = strings.Join(why, "; ")
		if m.watchErr != nil {
			dh.Message = strings.Join(append([]string{"health events cannot be watched: " + m.watchErr.Error()}, why...), "; ")
		}
		out = append(out, dh)
	}
	return out
}

func (m *Monitor) explainLocked(st *taintState) string {
	var what string
	switch st.Key {
	case TaintKeyGPULost:
		what = "GPU lost (fell off the bus)"
	default:
		what = "XID " + st.Value
	}
	s := fmt.Sprintf("%s (%s) at %s", what, st.Effect, st.added.UTC().Format(time.RFC3339))
	if st.count > 1 {
		s += fmt.Sprintf(", %d events, last at %s", st.count, st.last.UTC().Format(time.RFC3339))
	}
	switch {
	case st.Key == TaintKeyGPULost || m.cfg.RecoverAfter <= 0:
		s += "; cleared when the card reports recovery"
	default:
		s += fmt.Sprintf("; cleared after %s without a new XID", m.cfg.RecoverAfter)
	}
	return s
}

// Run watches w and applies its events until ctx ends, expiring taints on
// time; onChanges (may be nil) gets every batch of changes. When the
// watch fails, the cards' health is Unknown until it works again.
func (m *Monitor) Run(ctx context.Context, w gpu.HealthWatcher, onChanges func([]Change)) {
	logger := klog.FromContext(ctx)
	events := make(chan gpu.HealthEvent)
	watchDone := make(chan error, 1)
	startWatch := func() {
		go func() { watchDone <- w.WatchHealth(ctx, events) }()
	}
	startWatch()
	var retry <-chan time.Time
	report := func(changes []Change) {
		if len(changes) > 0 && onChanges != nil {
			onChanges(changes)
		}
	}
	for {
		var expiry <-chan time.Time
		var timer clock.Timer
		if at, ok := m.nextExpiry(); ok {
			timer = m.cfg.Clock.NewTimer(max(at.Sub(m.cfg.Clock.Now()), 0))
			expiry = timer.C()
		}
		select {
		case <-ctx.Done():
			if timer != nil {
				timer.Stop()
			}
			return
		case ev := <-events:
			report(m.Handle(ctx, ev))
		case <-expiry:
			report(m.Expire(ctx))
		case err := <-watchDone:
			if ctx.Err() != nil {
				continue
			}
			if err == nil {
				err = fmt.Errorf("the watch ended")
			}
			logger.Error(err, "Watching GPU health events failed; GPU health is Unknown until it works again", "retryAfter", retryWatchAfter)
			m.setWatchError(err)
			retry = m.cfg.Clock.After(retryWatchAfter)
		case <-retry:
			retry = nil
			m.setWatchError(nil)
			startWatch()
		}
		if timer != nil {
			timer.Stop()
		}
	}
}

func describe(ev gpu.HealthEvent) string {
	switch ev.Kind {
	case gpu.HealthEventGPULost:
		return "the GPU fell off the bus (NVML: GPU is lost)" + suffix(ev.Message)
	default:
		return fmt.Sprintf("XID %d", ev.XID) + suffix(ev.Message)
	}
}

func suffix(msg string) string {
	if msg == "" {
		return ""
	}
	return ": " + msg
}
