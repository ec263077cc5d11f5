// Package migpartition is the MIG partition kind of the kubelet plugin:
// the MIG instances of the claims that hold partitions, created at
// prepare, destroyed at unprepare, repaired and adopted at start-up, and
// the partitions tainted while an instance Tangram did not create holds
// their placement (docs/prepare.md, "MIG").
//
// Which instances are Tangram's is decided by the records alone: an
// instance is ours when a record (in any state) names its card, profile
// and placement. A record names a placement (the intent, with the claim
// PrepareStarted) before the instance is created, and only after the
// placement was found free of instances no record names; so an instance
// that no record names was not created by Tangram, or was created by a
// Tangram whose records are gone, and is never touched, with one
// exception: after a corrupt or missing checkpoint (rebuild), the instance
// at exactly the placement of a claim allocated on this node is that
// claim's: a claim with a spec adopts it (Adopt), and its unprepare
// destroys it; a claim without one (its prepare was interrupted after the
// create) gets back its intent (Intents), and start-up rolls it back with
// the instance. While an instance no record names holds a placement, the
// partitions overlapping it are published tainted
// (device.TaintKeyMIGPlacementTaken, MIGTaints), so that the scheduler does
// not allocate what prepare would refuse.
package migpartition

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"

	"github.com/tangram-gpu/tangram/pkg/device"
	"github.com/tangram-gpu/tangram/pkg/gpu"
	"github.com/tangram-gpu/tangram/pkg/plugin/kinds"
	"github.com/tangram-gpu/tangram/pkg/plugin/prepared"
	"github.com/tangram-gpu/tangram/pkg/resourceslices"
)

// Partitions are the MIG partition kind's effects on the node's cards.
type Partitions struct {
	// cards are the node's cards by ResourceSlice device name.
	cards map[string]gpu.GPU
	// calls creates, lists and destroys instances (NVML, or a file for
	// fake cards); nil refuses every partition.
	calls   gpu.MIGPartitions
	records kinds.Records

	mu sync.Mutex
	// foreign holds, by card UUID, the instances no record names, as last
	// listed under the state lock (setForeignMIG); changed is closed when
	// it changes (Changed).
	foreign map[string][]foreignMIG
	changed chan struct{}
}

var (
	_ kinds.Effects   = (*Partitions)(nil)
	_ kinds.Rebuilder = (*Partitions)(nil)
)

// New returns the MIG partitions of cards (by device name); calls nil
// refuses every partition.
func New(cards map[string]gpu.GPU, calls gpu.MIGPartitions, records kinds.Records) *Partitions {
	return &Partitions{cards: cards, calls: calls, records: records}
}

// Kind names the kind.
func (p *Partitions) Kind() string { return "MIG partition" }

// Admit refuses a partition whose placement an instance Tangram did not
// create holds (checkMIGFree).
func (p *Partitions) Admit(ctx context.Context, rec prepared.Claim) error {
	if len(rec.MIGDevices()) == 0 {
		return nil
	}
	return p.checkMIGFree(ctx, rec)
}

// NeedsIntent is true for a claim with partitions: an instance outlives
// the process, and a restart finds the one a crash interrupted by the
// intent's placement (RollBack).
func (p *Partitions) NeedsIntent(rec prepared.Claim) bool { return len(rec.MIGDevices()) > 0 }

// SetUp creates the claim's instances (createMIG).
func (p *Partitions) SetUp(ctx context.Context, rec prepared.Claim) (prepared.Claim, error) {
	if len(rec.MIGDevices()) == 0 {
		return rec, nil
	}
	return p.createMIG(ctx, rec)
}

// Undo destroys the claim's instances (destroyMIG), after the Driver
// removed the claim's spec: the containers are gone, and nothing the spec
// names is left.
func (p *Partitions) Undo(ctx context.Context, rec prepared.Claim) error {
	return p.destroyMIG(ctx, rec)
}

// RollBack destroys the instances of a claim whose preparation did not
// complete: an instance only the intent names was created before the
// crash, it is the claim's, and goes with it.
func (p *Partitions) RollBack(ctx context.Context, rec prepared.Claim) error {
	return p.destroyMIG(ctx, rec)
}

// Recover checks a kept claim's instances, creating again, and saving at
// once, those a reset removed (reconcileMIG).
func (p *Partitions) Recover(ctx context.Context, rec prepared.Claim) (prepared.Claim, bool, error) {
	if len(rec.MIGDevices()) == 0 {
		return rec, false, nil
	}
	return p.reconcileMIG(ctx, rec, true)
}

// Adopt takes back the instances at a rebuilt claim's placements
// (reconcileMIG without saving: the records are being rebuilt).
func (p *Partitions) Adopt(ctx context.Context, rec prepared.Claim) (prepared.Claim, error) {
	if len(rec.MIGDevices()) == 0 {
		return rec, nil
	}
	fixed, _, err := p.reconcileMIG(ctx, rec, false)
	return fixed, err
}

// Settle lists the instances no record names (they taint partitions).
func (p *Partitions) Settle(ctx context.Context, _ map[string]prepared.Claim) error {
	p.scanForeignMIG(ctx)
	return nil
}

// Leftovers counts the instances on the node's cards in MIG mode.
func (p *Partitions) Leftovers(ctx context.Context) int { return p.countMIGInstances(ctx) }

// Intents gives back their intents to the claims whose instances a lost
// checkpoint named (rebuildMIGIntents).
func (p *Partitions) Intents(ctx context.Context, planned []prepared.Claim, records map[string]prepared.Claim) {
	p.rebuildMIGIntents(ctx, planned, records)
}

// foreignPollInterval is how often the plugin lists the MIG instances of
// its cards for instances it did not create (WatchForeignMIG): NVML has
// no event for an admin's nvidia-smi mig -cgi or -dgi.
const foreignPollInterval = 30 * time.Second

// migDeviceOfTimeout bounds DeviceOf's listing of a card's instances.
const migDeviceOfTimeout = 5 * time.Second

// migAdvice ends the refusal of a placement taken by an instance no record
// names.
const migAdvice = "Tangram never touches MIG instances it did not create: destroy that instance (nvidia-smi mig -dci then -dgi, on the card) or take the card out of MIG mode, then the kubelet's retry prepares the claim"

// FindInstance finds the instance of a recorded MIG device among a
// card's instances: the recorded GPU instance at the recorded profile and
// placement once created; else (an intent, whose instance may have been
// created before a crash that left only the intent recorded, or a record
// whose instance was re-created under another GPU instance ID by a start-up
// that crashed before saving it) any instance at exactly that profile and
// placement, which namedByRecord counts as the record's all the same. Pure.
func FindInstance(list []gpu.MIGInstance, m *prepared.MIG) (gpu.MIGInstance, bool) {
	var fallback *gpu.MIGInstance
	for i, inst := range list {
		if inst.ProfileID != m.ProfileID || inst.Placement.Start != m.Start {
			continue
		}
		if !m.Created() || inst.GPUInstanceID == m.GPUInstanceIDValue() {
			return inst, true
		}
		if fallback == nil {
			fallback = &list[i]
		}
	}
	if fallback != nil {
		return *fallback, true
	}
	return gpu.MIGInstance{}, false
}

// namedByRecord reports the claim whose record names inst on cardUUID,
// "" when none does. Pure.
func namedByRecord(records map[string]prepared.Claim, cardUUID string, inst gpu.MIGInstance) string {
	for _, uid := range slices.Sorted(maps.Keys(records)) {
		for _, dev := range records[uid].Devices {
			if dev.MIG != nil && dev.GPUUUID == cardUUID && dev.MIG.ProfileID == inst.ProfileID && dev.MIG.Start == inst.Placement.Start {
				return uid
			}
		}
	}
	return ""
}

// foreignMIGConflicts returns the instances of a card that overlap the
// device's placement and that no record names. Pure.
func foreignMIGConflicts(records map[string]prepared.Claim, dev prepared.Device, list []gpu.MIGInstance) []gpu.MIGInstance {
	want := gpu.MIGPlacement{Start: dev.MIG.Start, Size: dev.MIG.Size}
	var out []gpu.MIGInstance
	for _, inst := range list {
		if inst.Placement.Overlaps(want) && namedByRecord(records, dev.GPUUUID, inst) == "" {
			out = append(out, inst)
		}
	}
	return out
}

// withMIGInstance is the device with its created instance recorded. Pure.
func withMIGInstance(dev prepared.Device, inst gpu.MIGInstance) prepared.Device {
	dev.MIG = dev.MIG.DeepCopy()
	gi, ci := inst.GPUInstanceID, inst.ComputeInstanceID
	dev.MIG.GPUInstanceID, dev.MIG.ComputeInstanceID, dev.MIG.UUID = &gi, &ci, inst.UUID
	return dev
}

// migCard is the card of a MIG device, looked up by the recorded card UUID
// (the index may name another card after a hardware change).
func (p *Partitions) migCard(dev prepared.Device) (gpu.GPU, error) {
	for _, card := range p.cards {
		if card.UUID == dev.GPUUUID {
			return card, nil
		}
	}
	return gpu.GPU{}, fmt.Errorf("MIG partition %s: its card %s (index %d when prepared) is not on this node any more; delete the claim's pods (its unprepare drops the record)", dev.Device, dev.GPUUUID, dev.MIG.ParentIndex)
}

func (p *Partitions) needMIG(rec prepared.Claim) error {
	if len(rec.MIGDevices()) > 0 && p.calls == nil {
		return fmt.Errorf("claim %s holds MIG partitions, but this plugin has no MIG instance calls (internal error: no gpu.MIGPartitions was wired)", rec.Key())
	}
	return nil
}

// checkMIGFree refuses, before the intent is recorded, a partition whose
// placement (or part of it) is held by an instance no record names. An
// instance a record names is the overlap check's (checkOverlap) or, named
// by this claim, its own (adopted by createMIG).
func (p *Partitions) checkMIGFree(ctx context.Context, rec prepared.Claim) error {
	if err := p.needMIG(rec); err != nil {
		return err
	}
	records := p.records.Snapshot()
	for _, i := range rec.MIGDevices() {
		dev := rec.Devices[i]
		card, err := p.migCard(dev)
		if err != nil {
			return err
		}
		list, err := p.calls.List(ctx, card)
		if err != nil {
			return fmt.Errorf("listing the MIG instances of card %d (%s) for %s: %w", dev.MIG.ParentIndex, dev.GPUUUID, dev.Device, err)
		}
		// What was found is published at once (tainted partitions), not
		// only at the next poll.
		p.setForeignMIG(ctx, card, list, records)
		if foreign := foreignMIGConflicts(records, dev, list); len(foreign) > 0 {
			return fmt.Errorf("MIG partition %s (card %d %s, profile %s at memory slice %d): the placement is taken by an instance Tangram did not create: %s; %s",
				dev.Device, dev.MIG.ParentIndex, dev.GPUUUID, dev.MIG.Profile, dev.MIG.Start, foreign[0], migAdvice)
		}
	}
	return nil
}

// migAction is what ensureMIGInstance did.
type migAction int

const (
	migFound     migAction = iota // an instance at the record's placement, complete
	migCompleted                  // its GPU instance got its compute instance
	migCreated                    // created at the record's placement
)

// ensureMIGInstance makes sure a recorded MIG device has its instance
// among list (the card's instances): the one FindInstance finds, given
// its compute instance when it lacks it, else one created at the
// placement unless an instance no record names overlaps it.
func (p *Partitions) ensureMIGInstance(ctx context.Context, card gpu.GPU, dev prepared.Device, list []gpu.MIGInstance) (gpu.MIGInstance, migAction, error) {
	inst, found := FindInstance(list, dev.MIG)
	switch {
	case found && inst.ComputeInstanceID < 0:
		inst, err := p.calls.CompleteComputeInstance(ctx, card, inst.GPUInstanceID)
		return inst, migCompleted, err
	case found:
		return inst, migFound, nil
	}
	records := p.records.Snapshot()
	if foreign := foreignMIGConflicts(records, dev, list); len(foreign) > 0 {
		return inst, migCreated, fmt.Errorf("%w: %s", gpu.ErrMIGPlacementTaken, foreign[0])
	}
	inst, err := p.calls.Create(ctx, card, dev.MIG.ProfileID, dev.MIG.Start)
	return inst, migCreated, err
}

// recordMIGInstance records inst as the instance of the claim's device i
// and saves the records. It returns the record with it.
func (p *Partitions) recordMIGInstance(ctx context.Context, rec prepared.Claim, i int, inst gpu.MIGInstance) (prepared.Claim, error) {
	dev := rec.Devices[i]
	rec = rec.DeepCopy()
	rec.Devices[i] = withMIGInstance(dev, inst)
	if err := p.records.Save(ctx, rec); err != nil {
		return rec, fmt.Errorf("recording MIG instance %s of %s: %w", inst, dev.Device, err)
	}
	return rec, nil
}

// createMIG creates the claim's MIG instances (or adopts the one an
// interrupted attempt of this claim left at exactly the placement) and
// records each one's IDs and UUID, persisted, before the next. It returns
// the record with what was created, also on error.
func (p *Partitions) createMIG(ctx context.Context, rec prepared.Claim) (prepared.Claim, error) {
	if err := p.needMIG(rec); err != nil {
		return rec, err
	}
	logger := klog.FromContext(ctx)
	for _, i := range rec.MIGDevices() {
		dev := rec.Devices[i]
		card, err := p.migCard(dev)
		if err != nil {
			return rec, err
		}
		list, err := p.calls.List(ctx, card)
		if err != nil {
			return rec, fmt.Errorf("listing the MIG instances of card %d (%s): %w", card.Index, card.UUID, err)
		}
		inst, action, err := p.ensureMIGInstance(ctx, card, dev, list)
		if err != nil {
			return rec, migCreateError(dev, err)
		}
		switch action {
		case migCompleted:
			logger.Info("Completed a MIG instance an interrupted prepare of this claim left without its compute instance", "device", dev.Device, "instance", inst.String())
		case migFound:
			logger.Info("Adopting the MIG instance an earlier prepare of this claim created", "device", dev.Device, "instance", inst.String(), "migUUID", inst.UUID)
		}
		if rec, err = p.recordMIGInstance(ctx, rec, i, inst); err != nil {
			return rec, err
		}
		logger.V(2).Info("MIG instance ready", "device", dev.Device, "profile", dev.MIG.Profile, "instance", inst.String(), "migUUID", inst.UUID)
	}
	return rec, nil
}

// migCreateError says what failed and what to do.
func migCreateError(dev prepared.Device, err error) error {
	what := fmt.Sprintf("creating MIG partition %s (card %d %s, profile %s at memory slice %d)", dev.Device, dev.MIG.ParentIndex, dev.GPUUUID, dev.MIG.Profile, dev.MIG.Start)
	switch {
	case errors.Is(err, gpu.ErrMIGPlacementTaken):
		return fmt.Errorf("%s: %w; %s", what, err, migAdvice)
	case errors.Is(err, gpu.ErrMIGOutOfResources):
		return fmt.Errorf("%s: %w; instances Tangram did not create may use the card (nvidia-smi mig -lgi lists them): %s", what, err, migAdvice)
	case errors.Is(err, gpu.ErrMIGNotEnabled):
		return fmt.Errorf("%s: %w; the card left MIG mode after allocation: delete and recreate the claim", what, err)
	}
	return fmt.Errorf("%s: %w", what, err)
}

// destroyMIG destroys the claim's MIG instances, compute instance then GPU
// instance: the recorded one, or for an intent the instance at exactly
// the recorded placement (FindInstance). An instance already gone, or
// on a card no longer on the node, is fine.
func (p *Partitions) destroyMIG(ctx context.Context, rec prepared.Claim) error {
	if len(rec.MIGDevices()) == 0 {
		return nil
	}
	if err := p.needMIG(rec); err != nil {
		return err
	}
	var errs []error
	for _, i := range rec.MIGDevices() {
		dev := rec.Devices[i]
		card, err := p.migCard(dev)
		if err != nil {
			// Its instances went with the card.
			klog.FromContext(ctx).Info("Not destroying the MIG instance of a card this node no longer has", "device", dev.Device, "reason", err.Error())
			continue
		}
		list, err := p.calls.List(ctx, card)
		if err != nil {
			errs = append(errs, fmt.Errorf("listing the MIG instances of card %d (%s): %w", card.Index, card.UUID, err))
			continue
		}
		inst, found := FindInstance(list, dev.MIG)
		if !found {
			continue
		}
		if err := p.calls.Destroy(ctx, card, inst.GPUInstanceID); err != nil {
			errs = append(errs, fmt.Errorf("destroying MIG partition %s (%s): %w", dev.Device, inst, err))
			continue
		}
		klog.FromContext(ctx).V(2).Info("Destroyed MIG instance", "device", dev.Device, "instance", inst.String())
	}
	return errors.Join(errs...)
}

// reconcileMIG checks, at start-up, a completed claim's MIG instances: one
// present is kept; a GPU instance left without its compute instance gets
// it; one gone (the card was reset, or someone destroyed it) is created
// again at its placement. With save, the record is saved after each
// instance it changed, so that a crash before the end of the start-up
// does not leave the old GPU instance ID recorded. It returns the record
// with what exists now and whether that changed (the spec must then be
// written again: the MIG UUID changed).
func (p *Partitions) reconcileMIG(ctx context.Context, rec prepared.Claim, save bool) (prepared.Claim, bool, error) {
	if err := p.needMIG(rec); err != nil {
		return rec, false, err
	}
	logger := klog.FromContext(ctx)
	changed := false
	for _, i := range rec.MIGDevices() {
		dev := rec.Devices[i]
		card, err := p.migCard(dev)
		if err != nil {
			return rec, changed, fmt.Errorf("claim %s: %w", rec.Key(), err)
		}
		list, err := p.calls.List(ctx, card)
		if err != nil {
			return rec, changed, fmt.Errorf("listing the MIG instances of card %d (%s): %w", card.Index, card.UUID, err)
		}
		inst, action, err := p.ensureMIGInstance(ctx, card, dev, list)
		if err != nil {
			return rec, changed, fmt.Errorf("claim %s: %w", rec.Key(), migCreateError(dev, err))
		}
		switch {
		case action == migFound && inst.UUID == dev.MIG.UUID && dev.MIG.GPUInstanceIDValue() == inst.GPUInstanceID:
			continue
		case action == migCompleted:
			logger.Info("A prepared claim's MIG instance lost its compute instance; created it again", "claim", rec.Key(), "device", dev.Device, "instance", inst.String())
		case action == migCreated:
			logger.Info("A prepared claim's MIG instance was gone (card reset?); created it again at its placement", "claim", rec.Key(), "device", dev.Device, "profile", dev.MIG.Profile, "start", dev.MIG.Start, "instance", inst.String())
		}
		// migFound otherwise: the instance at the placement under another
		// MIG UUID or GPU instance ID: record it.
		changed = true
		if !save {
			rec = rec.DeepCopy()
			rec.Devices[i] = withMIGInstance(dev, inst)
			continue
		}
		if rec, err = p.recordMIGInstance(ctx, rec, i, inst); err != nil {
			return rec, changed, fmt.Errorf("claim %s: %w", rec.Key(), err)
		}
	}
	return rec, changed, nil
}

// Cards are the node's cards in MIG mode, by index; none when the plugin
// has no MIG instance calls.
func (p *Partitions) Cards() []gpu.GPU {
	if p.calls == nil {
		return nil
	}
	var out []gpu.GPU
	for _, name := range slices.Sorted(maps.Keys(p.cards)) {
		if card := p.cards[name]; card.MIG != nil && card.MIG.Enabled {
			out = append(out, card)
		}
	}
	return out
}

// countMIGInstances counts the instances on the node's cards in MIG mode
// (a card that cannot be listed is logged and counts none).
func (p *Partitions) countMIGInstances(ctx context.Context) int {
	n := 0
	for _, card := range p.Cards() {
		list, err := p.calls.List(ctx, card)
		if err != nil {
			klog.FromContext(ctx).Error(err, "Listing a card's MIG instances", "card", card.Index, "uuid", card.UUID)
			continue
		}
		n += len(list)
	}
	return n
}

// rebuildMIGIntents, after a lost checkpoint, gives back its intent record
// (PrepareStarted, as prepare saved it before any create) to each claim
// allocated on this node that has neither a spec (a claim with one was
// prepared, its containers may use the instance, and rebuild alone decides
// about it; claims holds those without, planned, in UID order) nor a
// record yet, and one of whose MIG
// partitions has an instance at exactly its card, profile and placement:
// its prepare was interrupted after the create and before the spec, and
// the record that named the instance was lost. The instance is thereby
// the claim's, and start-up rolls the claim back as any interrupted
// prepare, destroying it; the kubelet's retry prepares the claim afresh.
// An instance at another placement, or of another profile, is not the
// claim's and stays foreign. A claim with a partition overlapping one of
// an already rebuilt record (two claims cannot hold overlapping partitions:
// one allocation is stale) is left out, so that no running claim's
// instance is rolled back with it. records gains the intents.
func (p *Partitions) rebuildMIGIntents(ctx context.Context, claims []prepared.Claim, records map[string]prepared.Claim) {
	if p.calls == nil {
		return
	}
	logger := klog.FromContext(ctx)
	lists := map[string][]gpu.MIGInstance{} // by card UUID
	for _, planned := range claims {
		if _, done := records[planned.UID]; done || len(planned.MIGDevices()) == 0 {
			// Not with partitions this node can hold now: none of its
			// instances can be here.
			continue
		}
		var found []string
		overlap := ""
		for _, j := range planned.MIGDevices() {
			dev := planned.Devices[j]
			if overlap = overlappingMIGRecord(records, dev); overlap != "" {
				break
			}
			list, listed := lists[dev.GPUUUID]
			if !listed {
				card, err := p.migCard(dev)
				if err != nil {
					continue
				}
				if list, err = p.calls.List(ctx, card); err != nil {
					logger.Error(err, "Listing a card's MIG instances", "card", card.Index, "uuid", card.UUID)
					continue
				}
				lists[dev.GPUUUID] = list
			}
			if inst, ok := FindInstance(list, dev.MIG); ok {
				found = append(found, dev.Device+": "+inst.String())
			}
		}
		switch {
		case overlap != "":
			logger.Info("Not adopting MIG instances for a claim whose partitions overlap those of a claim already rebuilt; one of the two allocations is stale", "claim", planned.Key(), "other", overlap)
		case len(found) > 0:
			records[planned.UID] = planned
			logger.Info("Adopted the MIG instances at exactly the placements of a claim allocated here whose prepare was interrupted before its spec (the checkpoint that named them is lost): rolled back with the claim, the kubelet's retry prepares it again",
				"claim", planned.Key(), "claimUID", planned.UID, "instances", found)
		}
	}
}

// overlappingMIGRecord returns the claim of records holding a partition
// on dev's card whose placement overlaps dev's, "" when none does. Pure.
func overlappingMIGRecord(records map[string]prepared.Claim, dev prepared.Device) string {
	want := gpu.MIGPlacement{Start: dev.MIG.Start, Size: dev.MIG.Size}
	for _, uid := range slices.Sorted(maps.Keys(records)) {
		for _, other := range records[uid].Devices {
			if other.MIG != nil && other.GPUUUID == dev.GPUUUID && want.Overlaps(gpu.MIGPlacement{Start: other.MIG.Start, Size: other.MIG.Size}) {
				return records[uid].Key()
			}
		}
	}
	return ""
}

// foreignMIG is an instance no record names, and since when the plugin
// has seen it.
type foreignMIG struct {
	gpu.MIGInstance
	Since time.Time
}

// sameMIGInstance reports whether two listings name the same instance; the
// MIG UUID is not compared: an instance whose compute instance an admin
// added later is the same one.
func sameMIGInstance(a, b gpu.MIGInstance) bool {
	return a.GPUInstanceID == b.GPUInstanceID && a.ProfileID == b.ProfileID && a.Placement == b.Placement
}

// setForeignMIG records which of card's instances (list, just listed) no
// record names, logs those new and those gone, and signals a change
// (MIGChanged). The caller holds the state lock, so that records includes
// the other plugin process's (an instance is named before it is created).
func (p *Partitions) setForeignMIG(ctx context.Context, card gpu.GPU, list []gpu.MIGInstance, records map[string]prepared.Claim) {
	logger := klog.FromContext(ctx)
	now := time.Now().Truncate(time.Second)
	p.mu.Lock()
	defer p.mu.Unlock()
	old := p.foreign[card.UUID]
	var current []foreignMIG
	for _, inst := range list {
		if namedByRecord(records, card.UUID, inst) != "" {
			continue
		}
		f := foreignMIG{MIGInstance: inst, Since: now}
		if i := slices.IndexFunc(old, func(o foreignMIG) bool { return sameMIGInstance(o.MIGInstance, inst) }); i >= 0 {
			f.Since = old[i].Since
		} else {
			logger.Info("MIG instance no claim record names: not Tangram's, left alone; the partitions overlapping it are published tainted "+device.TaintKeyMIGPlacementTaken+" and refused at prepare",
				"card", card.Index, "uuid", card.UUID, "instance", inst.String(), "migUUID", inst.UUID)
		}
		current = append(current, f)
	}
	changed := len(current) != len(old)
	for _, o := range old {
		if !slices.ContainsFunc(current, func(f foreignMIG) bool { return sameMIGInstance(f.MIGInstance, o.MIGInstance) }) {
			changed = true
			logger.Info("MIG instance Tangram did not create is gone (or a record names it now): the partitions overlapping it are offered again",
				"card", card.Index, "uuid", card.UUID, "instance", o.String())
		}
	}
	if !changed {
		return
	}
	if p.foreign == nil {
		p.foreign = map[string][]foreignMIG{}
	}
	if len(current) == 0 {
		delete(p.foreign, card.UUID)
	} else {
		p.foreign[card.UUID] = current
	}
	if p.changed != nil {
		close(p.changed)
	}
	p.changed = make(chan struct{})
}

// scanForeignMIG lists the instances of every card in MIG mode and
// records those no record names (setForeignMIG); a card that cannot be
// listed keeps what was known of it. The caller holds the state lock.
func (p *Partitions) scanForeignMIG(ctx context.Context) {
	records := p.records.Snapshot()
	for _, card := range p.Cards() {
		list, err := p.calls.List(ctx, card)
		if err != nil {
			klog.FromContext(ctx).Error(err, "Listing a card's MIG instances", "card", card.Index, "uuid", card.UUID)
			continue
		}
		p.setForeignMIG(ctx, card, list, records)
	}
}

// WatchForeignMIG lists the cards' MIG instances every
// foreignPollInterval, under
// the state lock (which re-reads the checkpoint: the other plugin process
// of a rolling update names its instances there), until ctx ends, so that
// the tainted partitions follow an admin's instances (MIGTaints).
func (p *Partitions) WatchForeignMIG(ctx context.Context) {
	if len(p.Cards()) == 0 {
		return
	}
	ticker := time.NewTicker(foreignPollInterval)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		}
		p.RefreshForeign(ctx)
	}
}

// RefreshForeign is one round of WatchForeignMIG.
func (p *Partitions) RefreshForeign(ctx context.Context) {
	unlock, err := p.records.Lock(ctx)
	if err != nil {
		if ctx.Err() == nil {
			klog.FromContext(ctx).Error(err, "Looking for MIG instances Tangram did not create")
		}
		return
	}
	defer unlock()
	p.scanForeignMIG(ctx)
}

// MIGChanged is closed at the next change of MIGTaints.
func (p *Partitions) MIGChanged() <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.changed == nil {
		p.changed = make(chan struct{})
	}
	return p.changed
}

// MIGTaints are, by device name, the taints of the partitions that overlap
// an instance no record names (device.TaintKeyMIGPlacementTaken,
// NoSchedule): prepare would refuse them, so the scheduler must not
// allocate them. One taint a partition, valued with the device name of
// the lowest such instance it overlaps. Empty when there is none.
func (p *Partitions) MIGTaints() map[string][]resourceapi.DeviceTaint {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := map[string][]resourceapi.DeviceTaint{}
	for _, card := range p.cards {
		for _, f := range p.foreign[card.UUID] {
			since := metav1.NewTime(f.Since)
			taint := resourceapi.DeviceTaint{
				Key:       device.TaintKeyMIGPlacementTaken,
				Value:     device.MIGDeviceName(card.Index, f.ProfileID, f.Placement.Start),
				Effect:    resourceapi.DeviceTaintEffectNoSchedule,
				TimeAdded: &since,
			}
			for _, name := range resourceslices.MIGPartitionsOverlapping(card, f.Placement) {
				if _, done := out[name]; !done {
					out[name] = []resourceapi.DeviceTaint{taint}
				}
			}
		}
	}
	return out
}

// MIGDeviceOf names the ResourceSlice device of GPU instance gpuInstance
// of card index, for the health monitor: the partition a record holds
// there, else the one at the instance's profile and placement (a
// partition of the card all the same); ok is false when the card has no
// such instance.
func (p *Partitions) MIGDeviceOf(index, gpuInstance int) (string, bool) {
	for _, rec := range p.records.Snapshot() {
		for _, dev := range rec.Devices {
			if dev.MIG != nil && dev.MIG.ParentIndex == index && dev.MIG.Created() && dev.MIG.GPUInstanceIDValue() == gpuInstance {
				return dev.Device, true
			}
		}
	}
	card, ok := p.cards[device.CardDeviceName(index)]
	if !ok || p.calls == nil || card.MIG == nil || !card.MIG.Enabled {
		return "", false
	}
	// Called for each event of a MIG instance: a hung NVML must not hold
	// the health monitor.
	ctx, cancel := context.WithTimeout(context.Background(), migDeviceOfTimeout)
	defer cancel()
	list, err := p.calls.List(ctx, card)
	if err != nil {
		return "", false
	}
	for _, inst := range list {
		if inst.GPUInstanceID == gpuInstance {
			return device.MIGDeviceName(index, inst.ProfileID, inst.Placement.Start), true
		}
	}
	return "", false
}
