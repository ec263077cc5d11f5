// Package plugin is the kubelet plugin of gpu.tangram.dev: it prepares and
// unprepares ResourceClaims (one transient CDI spec per claim, MPS
// accounting for shares, a two-phase checkpoint) and publishes the node's
// GPUs as ResourceSlices.
package plugin

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/tools/record"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/klog/v2"

	"github.com/tangram-gpu/tangram/pkg/config"
	"github.com/tangram-gpu/tangram/pkg/device"
	"github.com/tangram-gpu/tangram/pkg/gpu"
	"github.com/tangram-gpu/tangram/pkg/plugin/checkpoint"
	"github.com/tangram-gpu/tangram/pkg/plugin/claimstatus"
	"github.com/tangram-gpu/tangram/pkg/plugin/kinds"
	"github.com/tangram-gpu/tangram/pkg/plugin/podcheck"
	"github.com/tangram-gpu/tangram/pkg/plugin/prepared"
)

// Config wires a Driver.
type Config struct {
	// Inventory is the node and its cards.
	Inventory
	State   StateStore
	Specs   SpecStore
	Configs ConfigResolver
	// MPSPipeDir is the node's MPS pipe directory, recorded on every MPS
	// share (prepared.Device.UsesMPS).
	MPSPipeDir string
	// ClaimDirs makes each claim's own /dev/shm, which its spec mounts
	// (cdi.ClaimSpecs.ClaimShmDir); nil makes none.
	ClaimDirs ClaimDirs
	// MemoryLimitRecords are tangram-cdi-hook's records of which pod holds
	// each hard share claim; those of claims not prepared are swept at
	// start-up. nil sweeps none.
	MemoryLimitRecords MemoryLimitRecords
	// APIClients reach the API server; zero offline.
	APIClients
	// ShareBackend is the node's sharing backend (--share-backend: "mps"
	// or "none"), published as shareBackend: every share of the node uses
	// it, and a DeviceClass config naming another is refused
	// (config.CheckAllocationBackends). Empty: the class config decides,
	// as before nodes published one (tests of the mixed-backend guard).
	ShareBackend string
	// ShareStatus is what a share's status.devices entry, its condition
	// LimitsEnforced and the Warning event on its pods say of how the
	// node enforces shares: simulated (fake GPUs), MPS v3 (the daemon
	// holds a namespace's compute cap), and the node's published
	// shareEnforcement level (pkg/plugin/enforcement) with, below hard,
	// its reason code. Empty level: not detected (tests), the status says
	// what the MPS mode holds.
	ShareStatus claimstatus.Node
	Metrics     *Metrics
	// DeviceHealth is the cards' health for the kubelet (WatchHealthStatus); nil
	// when it is not watched.
	DeviceHealth DeviceHealth
	// OnFatal is called for background errors that retrying cannot fix,
	// typically to cancel the plugin's context. May be nil.
	OnFatal func(error)
	// KindConfig wires the kinds of prepared device (kinds.go).
	KindConfig
}

// Inventory is the node and the cards the Driver prepares.
type Inventory struct {
	// NodeName is the node and the name of its resource pool.
	NodeName string
	GPUs     []gpu.GPU
	// AllocatableMemory is, by device name, the most memory one allocation
	// may consume on a shareable card: the published memory request
	// policy's maximum. A result that consumed that much holds the whole
	// card. Cards without an entry use their memory.
	AllocatableMemory map[string]int64
}

// APIClients are what the Driver reads from and writes to the API
// server; each nil (zero) does without.
type APIClients struct {
	// ListClaims is used only to rebuild state after a corrupt checkpoint.
	ListClaims ClaimLister
	// ClaimStatus, if set, receives each prepared claim's device data
	// (ResourceClaim.status.devices); nil writes none.
	ClaimStatus claimstatus.Writer
	// Events, if set, receives a Warning event on each pod reserving a
	// claim whose shares are not enforced hard; nil records none.
	Events record.EventRecorder
	// PodCheck refuses, at prepare, a claim of a strict device class
	// (--nonroot-device-classes; pkg/plugin/podsecurity) that pods not
	// locked down reserve; its zero value checks nothing.
	PodCheck podcheck.Checker
}

// Driver implements kubeletplugin.DRAPlugin.
type Driver struct {
	cfg   Config
	cards map[string]gpu.GPU

	// kinds are the effects of the node's kinds of prepared device
	// (kinds.go), in the order their set-up runs.
	kinds []kinds.Effects

	// mu guards records against readers outside calls (Records). Calls
	// themselves are ordered by the state lock (StateStore.Lock), across
	// plugin processes too.
	mu      sync.Mutex
	records map[string]prepared.Claim
}

var _ kubeletplugin.DRAPlugin = &Driver{}

// New recovers the state left by an earlier process (see Recover) and
// returns a driver ready to serve the kubelet.
func New(ctx context.Context, cfg Config) (*Driver, error) {
	if cfg.Metrics == nil {
		cfg.Metrics = NewMetrics()
	}
	d := &Driver{
		cfg:     cfg,
		cards:   CardsByDevice(cfg.GPUs),
		records: map[string]prepared.Claim{},
	}
	if cfg.MPSPipeDir == "" {
		return nil, errors.New("internal error: the driver has no MPS pipe directory to record on MPS shares")
	}
	d.registerKinds()
	// Under the lock, a record only started is truly abandoned: a plugin
	// process still serving holds the lock for its whole call.
	unlock, err := cfg.State.Lock(ctx)
	if err != nil {
		return nil, fmt.Errorf("waiting for the plugin state lock: %w", err)
	}
	defer unlock()
	if err := d.recover(ctx); err != nil {
		return nil, err
	}
	return d, nil
}

// PrepareResourceClaims prepares each claim independently; one claim's
// failure does not affect the others.
func (d *Driver) PrepareResourceClaims(ctx context.Context, claims []*resourceapi.ResourceClaim) (map[types.UID]kubeletplugin.PrepareResult, error) {
	if len(claims) == 0 {
		// The health check's call (DRASocketCheck): it proves the
		// service answers, and takes no lock, so that a call holding
		// the state lock never fails the probe.
		return map[types.UID]kubeletplugin.PrepareResult{}, nil
	}
	// A pod that is not locked down refuses a claim of a strict class
	// here, before any wait or lock: the admission policies could not
	// check a pod created before its claim or template.
	checks := d.cfg.PodCheck.Check(ctx, claims)
	// Planning is pure: done once, before the lock, so that a kind can
	// wait for what its set-up needs (a starting MPS daemon) before the
	// state lock and no other call waits with it (docs/prepare.md, "No
	// long waits").
	plans := make(map[types.UID]plannedClaim, len(claims))
	for _, claim := range claims {
		if checks[claim.UID].Refused == nil {
			rec, err := d.plan(claim, checks[claim.UID].StrictClass)
			plans[claim.UID] = plannedClaim{rec: rec, err: err}
		}
	}
	defer d.beforeLock(ctx, plans)()
	unlock, err := d.lockState(ctx)
	if err != nil {
		return nil, err
	}
	defer unlock()
	out := make(map[types.UID]kubeletplugin.PrepareResult, len(claims))
	// One after the other: a call holds a pod's few claims, and preparing
	// them in parallel saved nothing measurable (docs/prepare.md).
	for _, claim := range claims {
		out[claim.UID] = d.prepareOne(ctx, claim, checks[claim.UID], plans[claim.UID])
	}
	d.publishGauges()
	return out, nil
}

// plannedClaim is a claim's record as planned, or why it cannot be.
type plannedClaim struct {
	rec prepared.Claim
	err error
}

// plan is the claim's record before anything is done: its devices of this
// node with their kind and effective config, PrepareStarted; no devices
// when the claim has no result of ours. strictClass is the strict class
// its containers are held to (podcheck.Checker), "" for none.
func (d *Driver) plan(claim *resourceapi.ResourceClaim, strictClass string) (prepared.Claim, error) {
	planned, err := planClaim(claim, d.cfg.NodeName, d.cards, d.cfg.AllocatableMemory)
	if err != nil || len(planned.Devices) == 0 {
		return planned, err
	}
	configs, err := d.cfg.Configs(claim, planned.Devices)
	if err != nil {
		return planned, err
	}
	rec := withConfigs(planned, configs, d.cfg.MPSPipeDir, d.cfg.ShareBackend)
	rec.NonRootClass = strictClass
	return rec, nil
}

// beforeLock lets each kind wait, holding no lock, for what the call's
// claims need (kinds.Waiter); the returned function, called at the end of
// the call, ends the waits.
func (d *Driver) beforeLock(ctx context.Context, plans map[types.UID]plannedClaim) (done func()) {
	var recs []prepared.Claim
	for _, p := range plans {
		if p.err == nil && len(p.rec.Devices) > 0 {
			recs = append(recs, p.rec)
		}
	}
	var dones []func()
	for _, k := range d.kinds {
		if w, ok := k.(kinds.Waiter); ok {
			dones = append(dones, w.BeforeLock(ctx, recs))
		}
	}
	return func() {
		for _, done := range dones {
			done()
		}
	}
}

// prepareOne prepares one claim, or answers refused when the pod check
// refused it.
func (d *Driver) prepareOne(ctx context.Context, claim *resourceapi.ResourceClaim, check podcheck.Result, planned plannedClaim) kubeletplugin.PrepareResult {
	start := time.Now()
	logger := klog.FromContext(ctx).WithValues("claim", klog.KObj(claim), "claimUID", claim.UID)
	devices, err := []kubeletplugin.Device(nil), check.Refused
	if err == nil {
		err = planned.err
	}
	if err == nil {
		devices, err = d.prepareClaim(klog.NewContext(ctx, logger), claim, planned.rec)
	}
	d.cfg.Metrics.observePrepare(start, err)
	if err != nil {
		err = fmt.Errorf("preparing claim %s/%s: %w", claim.Namespace, claim.Name, err)
		logger.Error(err, "Prepare failed")
		return kubeletplugin.PrepareResult{Err: err}
	}
	logger.V(2).Info("Prepared", "devices", len(devices), "duration", time.Since(start))
	return kubeletplugin.PrepareResult{Devices: devices}
}

// UnprepareResourceClaims undoes Prepare; unknown claims succeed.
func (d *Driver) UnprepareResourceClaims(ctx context.Context, claims []kubeletplugin.NamespacedObject) (map[types.UID]error, error) {
	unlock, err := d.lockState(ctx)
	if err != nil {
		return nil, err
	}
	defer unlock()
	out := make(map[types.UID]error, len(claims))
	for _, claim := range claims {
		start := time.Now()
		logger := klog.FromContext(ctx).WithValues("claim", claim.NamespacedName, "claimUID", claim.UID)
		err := d.unprepareClaim(klog.NewContext(ctx, logger), string(claim.UID))
		d.cfg.Metrics.observeUnprepare(start, err)
		if err != nil {
			err = fmt.Errorf("unpreparing claim %s: %w", claim.String(), err)
			logger.Error(err, "Unprepare failed")
		} else {
			logger.V(2).Info("Unprepared", "duration", time.Since(start))
		}
		out[claim.UID] = err
	}
	d.publishGauges()
	return out, nil
}

// HandleError logs background errors (e.g. publishing ResourceSlices) and
// calls OnFatal for those retrying cannot fix.
func (d *Driver) HandleError(ctx context.Context, err error, msg string) {
	utilruntime.HandleErrorWithContext(ctx, err, msg)
	if !errors.Is(err, kubeletplugin.ErrRecoverable) && d.cfg.OnFatal != nil {
		d.cfg.OnFatal(fmt.Errorf("%s: %w", msg, err))
	}
}

// prepareClaim prepares one claim as planned (rec).
func (d *Driver) prepareClaim(ctx context.Context, claim *resourceapi.ResourceClaim, rec prepared.Claim) ([]kubeletplugin.Device, error) {
	uid := string(claim.UID)
	if len(rec.Devices) == 0 {
		// The kubelet only asks for claims with results of ours; nothing
		// to write or remember otherwise.
		return []kubeletplugin.Device{}, nil
	}

	d.mu.Lock()
	old, found := d.records[uid]
	var oldPtr *prepared.Claim
	if found {
		oldPtr = &old
	}
	d.mu.Unlock()
	specPresent := found && old.State == prepared.PrepareCompleted && d.cfg.Specs.Exists(ctx, uid)
	action := decidePrepare(oldPtr, specPresent, found && sameAllocation(old, rec))
	if action == actionReturnExisting {
		klog.FromContext(ctx).V(3).Info("Already prepared; returning the recorded devices")
		return old.KubeletDevices(d.cfg.NodeName), nil
	}
	// The sharing backend is the node's (and its classes'), never the
	// claim's: defence in depth behind admission, checked before anything
	// is reserved. A claim already prepared was returned above.
	if err := config.CheckAllocationBackends(claim.Status.Allocation.Devices.Config, d.cfg.ShareBackend, d.cfg.NodeName); err != nil {
		return nil, err
	}
	if action == actionRollbackThenPrepare {
		if old.State == prepared.PrepareCompleted {
			klog.FromContext(ctx).Info("Undoing the preparation of an earlier allocation of this claim", "oldAllocation", old.Allocation, "newAllocation", rec.Allocation)
		} else {
			klog.FromContext(ctx).Info("Rolling back a preparation that did not complete")
		}
		if err := d.undo(ctx, old); err != nil {
			return nil, fmt.Errorf("rolling back an earlier incomplete preparation: %w", err)
		}
	}
	// What a kind's set-up would refuse (a MIG placement held by an
	// instance Tangram did not create) is refused before the intent is
	// recorded.
	for _, k := range d.kinds {
		if err := k.Admit(ctx, rec); err != nil {
			return nil, err
		}
	}
	// Reserve the cards by recording PrepareStarted (for a MIG partition:
	// the intent to create it at its placement).
	d.mu.Lock()
	held := d.holdingsLocked()
	if err := checkOverlap(uid, rec.Key(), rec.Devices, held); err != nil {
		d.mu.Unlock()
		return nil, err
	}
	if err := checkBackends(uid, rec.Key(), rec.Devices, held); err != nil {
		d.mu.Unlock()
		return nil, err
	}
	d.records[uid] = rec
	d.mu.Unlock()
	// The intent is written where a restart needs it to undo what SetUp
	// leaves (kinds.Effects.NeedsIntent: a MIG instance) or to replace
	// the claim's record on disk; a fresh whole card or share skips it:
	// what a crash leaves of it (its spec and /dev/shm, a share's compute
	// mode) start-up removes as held by no record, or the other plugin pod
	// of a rolling update when asked to unprepare the claim (removeStrays);
	// the state lock keeps that pod from preparing meanwhile.
	// Unsynced: the record must reach any later process of this boot, not
	// the disk: a power loss reboots the node, and a new boot drops every
	// record. The Save of PrepareCompleted below makes the file durable.
	onDisk := found && action != actionRollbackThenPrepare
	if !onDisk && !d.needsIntent(rec) {
		klog.FromContext(ctx).V(5).Info("No intent to record: nothing the claim's set-up leaves outlives the process")
	} else if err := d.persistUnsynced(ctx); err != nil {
		d.mu.Lock()
		if action == actionPrepare && found {
			// A completed claim being redone still holds what it held.
			d.records[uid] = old
		} else {
			delete(d.records, uid)
		}
		d.mu.Unlock()
		return nil, fmt.Errorf("recording the start of preparation: %w", err)
	}

	// Side effects: the claim's /dev/shm, each kind's (never a long wait
	// under this lock: a kind waits in beforeLock) and the CDI spec. On
	// error, applied is the record with what was done.
	completed, err := d.apply(ctx, rec)
	applied := completed
	if err == nil {
		d.mu.Lock()
		d.records[uid] = completed
		d.mu.Unlock()
		if err = d.persist(ctx); err != nil {
			applied.State = prepared.PrepareStarted
			d.mu.Lock()
			d.records[uid] = applied
			d.mu.Unlock()
			err = fmt.Errorf("recording the completed preparation: %w", err)
		}
	}
	if err != nil {
		if undoErr := d.undo(ctx, applied); undoErr != nil {
			err = errors.Join(err, fmt.Errorf("cleaning up: %w", undoErr))
		}
		return nil, err
	}
	d.writeStatus(ctx, completed)
	d.warnUnenforced(ctx, claim, completed)
	return completed.KubeletDevices(d.cfg.NodeName), nil
}

// needsIntent reports whether a kind asks for the claim's intent to be
// recorded before its set-up.
func (d *Driver) needsIntent(rec prepared.Claim) bool {
	for _, k := range d.kinds {
		if k.NeedsIntent(rec) {
			return true
		}
	}
	return false
}

// apply makes the claim's /dev/shm, sets up each kind's side effects and
// writes the spec; it returns the completed record, or on error the record
// with what was done so far.
func (d *Driver) apply(ctx context.Context, rec prepared.Claim) (prepared.Claim, error) {
	if d.cfg.ClaimDirs != nil {
		if err := d.cfg.ClaimDirs.Create(ctx, rec.UID); err != nil {
			return rec, fmt.Errorf("creating the claim's /dev/shm: %w", err)
		}
	}
	for _, k := range d.kinds {
		var err error
		if rec, err = k.SetUp(ctx, rec); err != nil {
			return rec, err
		}
	}
	return d.writeSpec(ctx, rec)
}

// writeSpec writes the claim's CDI spec and returns the record completed.
func (d *Driver) writeSpec(ctx context.Context, rec prepared.Claim) (prepared.Claim, error) {
	ids, err := d.cfg.Specs.Write(ctx, rec)
	if err != nil {
		return rec, fmt.Errorf("writing the CDI spec: %w", err)
	}
	return completed(rec, ids)
}

// completed is the record once its spec is written: PrepareCompleted, with
// the CDI device IDs of each device. Pure.
func completed(rec prepared.Claim, ids [][]string) (prepared.Claim, error) {
	if len(ids) != len(rec.Devices) {
		return rec, fmt.Errorf("internal error: CDI spec has IDs for %d devices, want %d", len(ids), len(rec.Devices))
	}
	out := rec
	out.State = prepared.PrepareCompleted
	out.Devices = make([]prepared.Device, len(rec.Devices))
	for i, dev := range rec.Devices {
		dev.CDIDeviceIDs = ids[i]
		out.Devices[i] = dev
	}
	return out, nil
}

// undo removes the claim's spec, each kind's side effects (in reverse
// order of set-up) and its /dev/shm, then its record. The record is kept
// (as started) if cleanup failed, so a retry or the next start-up tries
// again.
func (d *Driver) undo(ctx context.Context, rec prepared.Claim) error {
	var errs []error
	// First: nothing the kinds remove may stay named by a spec.
	if err := d.cfg.Specs.Remove(ctx, rec.UID); err != nil {
		errs = append(errs, fmt.Errorf("removing the CDI spec: %w", err))
	}
	for _, k := range slices.Backward(d.kinds) {
		if err := k.Undo(ctx, rec); err != nil {
			errs = append(errs, err)
		}
	}
	if d.cfg.ClaimDirs != nil {
		if err := d.cfg.ClaimDirs.Remove(ctx, rec.UID); err != nil {
			errs = append(errs, fmt.Errorf("removing the claim's /dev/shm: %w", err))
		}
	}
	d.mu.Lock()
	if len(errs) > 0 {
		rec.State = prepared.PrepareStarted
		d.records[rec.UID] = rec
	} else {
		delete(d.records, rec.UID)
	}
	d.mu.Unlock()
	if err := d.persist(ctx); err != nil {
		errs = append(errs, fmt.Errorf("recording the removal: %w", err))
	}
	return errors.Join(errs...)
}

func (d *Driver) unprepareClaim(ctx context.Context, uid string) error {
	d.mu.Lock()
	rec, found := d.records[uid]
	d.mu.Unlock()
	if !found {
		// A preparation a crash interrupted before it recorded anything
		// (a fresh whole card or share records no intent) may have left
		// its spec and /dev/shm; start-up removes them too, but the
		// other plugin pod of a rolling update does not start again.
		return d.removeStrays(ctx, uid)
	}
	if err := d.undo(ctx, rec); err != nil {
		return err
	}
	d.clearStatus(ctx, rec)
	return nil
}

// removeStrays removes what a preparation of the claim left when it was
// interrupted before it recorded anything (a fresh whole card or share
// records no intent, kinds.Effects.NeedsIntent): its spec, its /dev/shm,
// and, by settling every kind against the records, what a kind set up
// for it (an MPS share's compute mode and v3 namespace). Start-up does
// the same, but the other plugin pod of a rolling update, which the
// kubelet may ask instead, does not start again. Nothing there: nothing
// to do, at the cost of two stats.
func (d *Driver) removeStrays(ctx context.Context, uid string) error {
	spec := d.cfg.Specs.Exists(ctx, uid)
	dir := d.cfg.ClaimDirs != nil && d.cfg.ClaimDirs.Exists(uid)
	if !spec && !dir {
		klog.FromContext(ctx).V(3).Info("Not prepared; nothing to do")
		return nil
	}
	klog.FromContext(ctx).Info("Removing what an interrupted preparation of the claim left", "spec", spec, "shmDir", dir)
	var errs []error
	if err := d.cfg.Specs.Remove(ctx, uid); err != nil {
		errs = append(errs, fmt.Errorf("removing the CDI spec: %w", err))
	}
	if dir {
		if err := d.cfg.ClaimDirs.Remove(ctx, uid); err != nil {
			errs = append(errs, fmt.Errorf("removing the claim's /dev/shm: %w", err))
		}
	}
	records := d.snapshot()
	for _, k := range d.kinds {
		if err := k.Settle(ctx, records); err != nil {
			errs = append(errs, fmt.Errorf("settling the %s kind: %w", k.Kind(), err))
		}
	}
	return errors.Join(errs...)
}

// persist stores the records durably.
func (d *Driver) persist(ctx context.Context) error {
	return d.cfg.State.Save(ctx, d.snapshot())
}

// persistUnsynced stores the records for the later processes of this boot,
// not waiting for the disk (StateStore.SaveUnsynced).
func (d *Driver) persistUnsynced(ctx context.Context) error {
	return d.cfg.State.SaveUnsynced(ctx, d.snapshot())
}

func (d *Driver) snapshot() map[string]prepared.Claim {
	d.mu.Lock()
	defer d.mu.Unlock()
	return maps.Clone(d.records)
}

// lockState takes the lock between this node's plugin processes and
// re-reads the checkpoint under it: during a rolling update the other
// plugin pod may have prepared or unprepared claims since this process's
// last call. It is also what serializes this process's own calls: the
// kubelet helper is told not to (Serialize(false) in pkg/plugin/app/run.go), and it
// covers start-up recovery, which runs before the helper.
// The returned function releases the lock.
func (d *Driver) lockState(ctx context.Context) (func(), error) {
	unlock, err := d.cfg.State.Lock(ctx)
	if err != nil {
		return nil, fmt.Errorf("waiting for the plugin state lock: %w", err)
	}
	if err := d.reload(ctx); err != nil {
		unlock()
		return nil, err
	}
	return unlock, nil
}

// reload replaces the records with the checkpoint's and brings the kinds'
// state in line with them (kinds.Resyncer: the MPS accounting).
func (d *Driver) reload(ctx context.Context) error {
	records, bootChanged, err := d.cfg.State.Load(ctx)
	switch {
	case errors.Is(err, checkpoint.ErrCorrupt), errors.Is(err, checkpoint.ErrMissing), err == nil && bootChanged:
		// No plugin process writes such a file (each saves at start-up);
		// what this one knows is the best left, and its next save
		// rewrites the file.
		klog.FromContext(ctx).Error(err, "Checkpoint unusable while running; keeping this process's records", "bootChanged", bootChanged)
		return nil
	case err != nil:
		return fmt.Errorf("re-reading the checkpoint: %w", err)
	}
	d.mu.Lock()
	old := d.records
	d.records = records
	d.mu.Unlock()
	for _, k := range d.kinds {
		if r, ok := k.(kinds.Resyncer); ok {
			r.Resync(ctx, old, records)
		}
	}
	return nil
}

func (d *Driver) holdingsLocked() []Holding {
	var out []Holding
	for _, uid := range slices.Sorted(maps.Keys(d.records)) {
		out = append(out, holdings(d.records[uid])...)
	}
	return out
}

// Records returns a copy of the current claim records.
func (d *Driver) Records() map[string]prepared.Claim {
	d.mu.Lock()
	defer d.mu.Unlock()
	return maps.Clone(d.records)
}

func (d *Driver) publishGauges() {
	d.mu.Lock()
	defer d.mu.Unlock()
	claims, whole, shares := 0, 0, 0
	for _, rec := range d.records {
		if rec.State != prepared.PrepareCompleted {
			continue
		}
		claims++
		for _, dev := range rec.Devices {
			if dev.Share {
				shares++
			} else {
				whole++
			}
		}
	}
	d.cfg.Metrics.setPrepared(claims, whole, shares)
}

// CardsByDevice keys the node's cards by their ResourceSlice device name.
func CardsByDevice(gpus []gpu.GPU) map[string]gpu.GPU {
	cards := make(map[string]gpu.GPU, len(gpus))
	for _, g := range gpus {
		cards[device.CardDeviceName(g.Index)] = g
	}
	return cards
}
