package plugin

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"

	"github.com/tangram-gpu/tangram/pkg/plugin/checkpoint"
	"github.com/tangram-gpu/tangram/pkg/plugin/kinds"
	"github.com/tangram-gpu/tangram/pkg/plugin/prepared"
)

// memoryLimitRecordsWait bounds the start-up sweep's wait for the memory
// limit records lock, which a hung tangram-cdi-hook may hold until its OCI
// timeout kills it.
const memoryLimitRecordsWait = 20 * time.Second

// recover brings the node to a consistent state at start-up:
//   - a corrupt checkpoint (moved aside by the store), or a missing one
//     beside specs of ours or MIG instances, is rebuilt from our CDI specs,
//     the MIG instances and the API server's claims (rebuild);
//   - after a reboot every record is dropped;
//   - claims only "started" are rolled back;
//   - completed claims are recovered by each kind (recoverKept): their MIG
//     instances checked, one gone (a card reset) created again at its
//     placement, its record saved at once and its spec rewritten; their
//     MPS accounting replayed (never failing, never waiting: the daemon is
//     adopted in the background); a rolled-back claim's MIG instances are
//     destroyed;
//   - specs of ours that no record owns are removed, and so are the
//     /dev/shm directories and memory limit records of claims no record
//     holds;
//   - each kind settles (kinds.Effects.Settle): the MIG instances no
//     record names are listed, an MPS daemon nobody needs any more is
//     stopped.
func (d *Driver) recover(ctx context.Context) error {
	logger := klog.FromContext(ctx)
	records, bootChanged, err := d.cfg.State.Load(ctx)
	switch {
	case errors.Is(err, checkpoint.ErrCorrupt):
		logger.Error(err, "Checkpoint unusable; rebuilding state from CDI specs and the API server")
		records, err = d.rebuild(ctx)
		if err != nil {
			return fmt.Errorf("rebuilding state after a corrupt checkpoint: %w", err)
		}
		bootChanged = false
	case errors.Is(err, checkpoint.ErrMissing):
		// Nothing to rebuild on a first start. Specs of ours without a
		// checkpoint mean an earlier rebuild was interrupted (the corrupt
		// file is already moved aside): rebuild again rather than take the
		// specs of running claims for orphans. MIG instances without a
		// checkpoint may be those of a prepare interrupted before its
		// spec (the checkpoint deleted, or a rebuild interrupted):
		// rebuild gives them back to their claims.
		records, err = d.rebuild(ctx)
		if err != nil {
			return fmt.Errorf("rebuilding state: there is no checkpoint but there are CDI specs or MIG instances: %w", err)
		}
	case err != nil:
		return fmt.Errorf("loading checkpoint: %w", err)
	}
	specUIDs, err := d.cfg.Specs.List(ctx)
	if err != nil {
		return fmt.Errorf("listing CDI specs: %w", err)
	}
	plan := planStartup(records, specUIDs, bootChanged)
	if bootChanged {
		logger.Info("Node rebooted since the checkpoint was written; dropping its claims", "claims", len(records))
	}

	var errs []error
	// Every record loaded stays recorded until it is rolled back, so that
	// a save during recovery (after each re-created MIG instance) loses
	// none.
	for _, rec := range slices.Concat(plan.Keep, plan.Rollback) {
		d.records[rec.UID] = rec
	}
	for _, rec := range plan.Keep {
		d.records[rec.UID] = d.recoverKept(ctx, rec, &errs)
	}
	for _, rec := range plan.Rollback {
		logger.Info("Rolling back claim", "claim", rec.Key(), "claimUID", rec.UID, "state", rec.State)
		err := d.cfg.Specs.Remove(ctx, rec.UID)
		if err == nil {
			err = d.rollBackKinds(ctx, rec)
		}
		if err != nil {
			// Keep the record so the next start-up tries again.
			rec.State = prepared.PrepareStarted
			d.records[rec.UID] = rec
			errs = append(errs, fmt.Errorf("rolling back claim %s: %w", rec.Key(), err))
			continue
		}
		delete(d.records, rec.UID)
	}
	for _, uid := range plan.RemoveSpecs {
		if _, kept := d.records[uid]; kept {
			continue
		}
		logger.Info("Removing CDI spec no claim record owns", "claimUID", uid)
		if err := d.cfg.Specs.Remove(ctx, uid); err != nil {
			errs = append(errs, err)
		}
	}
	if d.cfg.ClaimDirs != nil {
		// Under the state lock, which the other plugin process of a
		// rolling update holds from its reload until its claim's
		// completed record is saved: a directory no record holds now is
		// no preparation's in progress.
		if err := d.cfg.ClaimDirs.Sweep(ctx, slices.Collect(maps.Keys(d.records))); err != nil {
			errs = append(errs, fmt.Errorf("removing the /dev/shm directories of claims not prepared: %w", err))
		}
	}
	if d.cfg.MemoryLimitRecords != nil {
		// Under the state lock too: a claim the other plugin process of a
		// rolling update prepares is recorded before its hook runs.
		removed, unreadable, err := d.cfg.MemoryLimitRecords.Sweep(slices.Collect(maps.Keys(d.records)), memoryLimitRecordsWait,
			fmt.Sprintf("dra-kubelet-plugin pid %d, start-up sweep", os.Getpid()))
		if len(removed) > 0 {
			logger.Info("Removed the memory limit records of claims not prepared", "files", removed)
		}
		for _, e := range unreadable {
			logger.Error(e, "Memory limit record of a prepared claim is unreadable: its containers are refused until it is prepared again")
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("removing the memory limit records of claims not prepared: %w", err))
		}
	}
	if err := d.cfg.State.Save(ctx, d.records); err != nil {
		return fmt.Errorf("saving recovered checkpoint: %w", err)
	}
	for _, k := range d.kinds {
		if err := k.Settle(ctx, maps.Clone(d.records)); err != nil {
			errs = append(errs, err)
		}
	}
	d.publishGauges()
	if err := errors.Join(errs...); err != nil {
		// The plugin can still serve; what failed is logged and retried by
		// the kubelet's unprepare/prepare calls.
		logger.Error(err, "Start-up recovery was incomplete")
	}
	logger.Info("State recovered", "claims", len(d.records), "rolledBack", len(plan.Rollback), "orphanSpecsRemoved", len(plan.RemoveSpecs))
	return nil
}

// rebuild reconstructs the records a lost checkpoint held, from what
// outlives it: our CDI specs, the MIG instances on the node's cards and
// the API server's claims.
//   - A claim with a spec of ours that still exists, allocated on this
//     node, gets its completed record back; the spec is rewritten from the
//     claim, which yields the same content and IDs, and the MIG instance
//     at exactly each of its partitions' placements is adopted (created
//     again if gone).
//   - A claim allocated on this node without a spec, one of whose MIG
//     partitions has an instance at exactly its card, profile and
//     placement, gets back its intent (kinds.Rebuilder.Intents): the prepare was
//     interrupted after the create, before the spec.
//
// Claims that cannot be found lose their spec (planStartup removes it);
// an instance at no claim's placement stays foreign.
func (d *Driver) rebuild(ctx context.Context) (map[string]prepared.Claim, error) {
	logger := klog.FromContext(ctx)
	records := map[string]prepared.Claim{}
	specUIDs, err := d.cfg.Specs.List(ctx)
	if err != nil {
		return nil, fmt.Errorf("listing CDI specs: %w", err)
	}
	leftovers := map[kinds.Rebuilder]int{}
	total := 0
	for _, k := range d.kinds {
		if r, ok := k.(kinds.Rebuilder); ok {
			leftovers[r] = r.Leftovers(ctx)
			total += leftovers[r]
		}
	}
	if len(specUIDs) == 0 && total == 0 {
		return records, nil
	}
	if d.cfg.ListClaims == nil {
		logger.Info("No API server to rebuild from; specs of unknown claims will be removed, what kinds left on the node (MIG instances) that no record names is left alone", "specs", len(specUIDs), "leftovers", total)
		return records, nil
	}
	claims, err := d.cfg.ListClaims(ctx)
	if err != nil {
		return nil, fmt.Errorf("listing ResourceClaims: %w", err)
	}
	byUID := map[string]*resourceapi.ResourceClaim{}
	for i := range claims {
		byUID[string(claims[i].UID)] = &claims[i]
	}
	for _, uid := range specUIDs {
		claim, ok := byUID[uid]
		if !ok {
			continue
		}
		rec, err := d.plan(claim, "")
		if err != nil || len(rec.Devices) == 0 {
			logger.Info("Claim with a spec is not prepared on this node any more", "claim", klog.KObj(claim), "reason", err)
			continue
		}
		if rec, err = d.adopt(ctx, rec); err != nil {
			logger.Error(err, "Cannot rebuild claim", "claim", klog.KObj(claim))
			continue
		}
		records[uid] = rec
		logger.Info("Rebuilt claim from its spec and the API server", "claim", klog.KObj(claim), "claimUID", uid)
	}
	if total > 0 {
		d.rebuildIntents(ctx, claims, specUIDs, records, leftovers)
	}
	return records, nil
}

// adopt completes the record of a claim rebuilt from its spec: each kind
// takes back what exists of it (the MIG instance at the claim's placement
// is the claim's, its record is what was lost; created again if gone), its
// /dev/shm is made again and its spec rewritten, which yields the same
// content and IDs.
func (d *Driver) adopt(ctx context.Context, rec prepared.Claim) (prepared.Claim, error) {
	for _, k := range d.kinds {
		r, ok := k.(kinds.Rebuilder)
		if !ok {
			continue
		}
		var err error
		if rec, err = r.Adopt(ctx, rec); err != nil {
			return rec, fmt.Errorf("adopting its %s: %w", k.Kind(), err)
		}
	}
	if d.cfg.ClaimDirs != nil {
		if err := d.cfg.ClaimDirs.Create(ctx, rec.UID); err != nil {
			return rec, fmt.Errorf("recreating the claim's /dev/shm: %w", err)
		}
	}
	rec, err := d.writeSpec(ctx, rec)
	if err != nil {
		return rec, fmt.Errorf("rewriting its spec: %w", err)
	}
	return rec, nil
}

// rebuildIntents lets each kind with leftovers on the node give back
// their intents to the claims allocated here that have neither a spec
// nor a record (kinds.Rebuilder.Intents); claims are planned without
// their configs, in UID order.
func (d *Driver) rebuildIntents(ctx context.Context, claims []resourceapi.ResourceClaim, specUIDs []string, records map[string]prepared.Claim, leftovers map[kinds.Rebuilder]int) {
	var planned []prepared.Claim
	for i := range claims {
		claim := &claims[i]
		uid := string(claim.UID)
		if _, done := records[uid]; done || claim.Status.Allocation == nil || slices.Contains(specUIDs, uid) {
			continue
		}
		rec, err := planClaim(claim, d.cfg.NodeName, d.cards, d.cfg.AllocatableMemory)
		if err != nil || len(rec.Devices) == 0 {
			// Not allocated here: none of its side effects can be here.
			continue
		}
		planned = append(planned, rec)
	}
	slices.SortFunc(planned, func(a, b prepared.Claim) int { return strings.Compare(a.UID, b.UID) })
	for _, k := range d.kinds {
		if r, ok := k.(kinds.Rebuilder); ok && leftovers[r] > 0 {
			r.Intents(ctx, planned, records)
		}
	}
}

// recoverKept recovers a completed claim kept from the checkpoint: each
// kind replays or repairs its side effects (kinds.Effects.Recover) and,
// when one changed the record (a re-created MIG instance has a new UUID),
// the spec is written again (same CDI IDs) and the status updated. A
// failure is logged and keeps the record as that kind found it: its pods
// fail on the missing device until the claim is unprepared.
func (d *Driver) recoverKept(ctx context.Context, rec prepared.Claim, errs *[]error) prepared.Claim {
	changed := false
	for _, k := range d.kinds {
		fixed, ch, err := k.Recover(ctx, rec)
		if err != nil {
			*errs = append(*errs, err)
			continue
		}
		rec, changed = fixed, changed || ch
	}
	if !changed {
		return rec
	}
	fixed, err := d.writeSpec(ctx, rec)
	if err != nil {
		*errs = append(*errs, fmt.Errorf("claim %s: writing the spec of its repaired devices: %w", rec.Key(), err))
		return rec
	}
	klog.FromContext(ctx).Info("Repaired the record of a claim whose devices were re-created", "claim", rec.Key(), "claimUID", rec.UID)
	// Its status.devices names the new MIG UUID.
	d.writeStatus(ctx, fixed)
	return fixed
}

// rollBackKinds removes, at start-up, what each kind's side effects left
// of a claim whose preparation did not complete (in reverse order of
// set-up).
func (d *Driver) rollBackKinds(ctx context.Context, rec prepared.Claim) error {
	var errs []error
	for _, k := range slices.Backward(d.kinds) {
		if err := k.RollBack(ctx, rec); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// APIClaimLister lists every ResourceClaim through the API server.
func APIClaimLister(client kubernetes.Interface) ClaimLister {
	return func(ctx context.Context) ([]resourceapi.ResourceClaim, error) {
		list, err := client.ResourceV1().ResourceClaims(metav1.NamespaceAll).List(ctx, metav1.ListOptions{})
		if err != nil {
			return nil, fmt.Errorf("listing ResourceClaims: %w", err)
		}
		return list.Items, nil
	}
}
