package plugin

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"slices"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"

	"github.com/tangram-gpu/tangram/pkg/plugin/checkpoint"
	"github.com/tangram-gpu/tangram/pkg/plugin/mps"
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
//   - completed claims get their MIG instances checked: one gone (a card
//     reset) is created again at its placement, its record saved at once
//     and its spec rewritten (recoverMIG); a rolled-back claim's instances
//     are destroyed;
//   - completed claims get their MPS accounting replayed (never failing,
//     never waiting: the daemon is adopted in the background);
//   - specs of ours that no record owns are removed, and so are the
//     /dev/shm directories and memory limit records of claims no record
//     holds;
//   - an MPS daemon nobody needs any more is stopped.
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
		if len(rec.MIGDevices()) > 0 {
			rec = d.recoverMIG(ctx, rec, &errs)
		}
		d.records[rec.UID] = rec
		if len(rec.MPSCards()) > 0 {
			if d.cfg.Shares == nil {
				errs = append(errs, fmt.Errorf("claim %s holds MPS shares but the plugin now runs with --sharing=disabled; restart it with --sharing=enabled until the claim's pods are gone", rec.Key()))
				continue
			}
			// Accounted unconditionally and without waiting for the
			// daemon: the claim's containers may be running on it.
			d.cfg.Shares.Restore(ctx, rec.UID, rec.MPSShares())
		}
	}
	for _, rec := range plan.Rollback {
		logger.Info("Rolling back claim", "claim", rec.Key(), "claimUID", rec.UID, "state", rec.State)
		err := d.cfg.Specs.Remove(ctx, rec.UID)
		if err == nil {
			// An instance only the intent names was created before the
			// crash: it is the claim's, and goes with it.
			err = d.destroyMIG(ctx, rec)
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
		// Under the state lock: a claim of the other plugin process of a
		// rolling update gets its directory only once it is recorded.
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
	d.scanForeignMIG(ctx)
	if d.cfg.Shares != nil {
		if err := d.cfg.Shares.Reconcile(ctx); err != nil {
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
//     placement, gets back its intent (rebuildMIGIntents): the prepare was
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
	instances := d.countMIGInstances(ctx)
	if len(specUIDs) == 0 && instances == 0 {
		return records, nil
	}
	if d.cfg.ListClaims == nil {
		logger.Info("No API server to rebuild from; specs of unknown claims will be removed, MIG instances no record names are left alone", "specs", len(specUIDs), "migInstances", instances)
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
		planned, err := planClaim(claim, d.cfg.NodeName, d.cards, d.cfg.AllocatableMemory)
		if err != nil || len(planned.Devices) == 0 {
			logger.Info("Claim with a spec is not prepared on this node any more", "claim", klog.KObj(claim), "reason", err)
			continue
		}
		configs, err := d.cfg.Configs(claim, planned.Devices)
		if err != nil {
			logger.Error(err, "Cannot rebuild claim", "claim", klog.KObj(claim))
			continue
		}
		rec := withConfigs(planned, configs, d.cfg.MPSPipeDir, d.cfg.ShareBackend)
		if len(rec.MIGDevices()) > 0 {
			// The instance at the claim's placement is the claim's (its
			// record is what was lost); created again if gone.
			if rec, _, err = d.reconcileMIG(ctx, rec, false); err != nil {
				logger.Error(err, "Cannot rebuild the claim's MIG partitions", "claim", klog.KObj(claim))
				continue
			}
		}
		if d.cfg.ClaimDirs != nil {
			if err := d.cfg.ClaimDirs.Create(ctx, rec.UID); err != nil {
				logger.Error(err, "Cannot recreate the claim's /dev/shm while rebuilding", "claim", klog.KObj(claim))
				continue
			}
		}
		var client mps.ClientConfig
		if len(rec.MPSCards()) > 0 && d.cfg.Shares != nil {
			client = d.cfg.Shares.ClientConfig(rec.UID)
		}
		ids, err := d.cfg.Specs.Write(ctx, rec, client)
		if err == nil {
			rec, err = completed(rec, ids)
		}
		if err != nil {
			logger.Error(err, "Cannot rewrite spec while rebuilding", "claim", klog.KObj(claim))
			continue
		}
		records[uid] = rec
		logger.Info("Rebuilt claim from its spec and the API server", "claim", klog.KObj(claim), "claimUID", uid)
	}
	if instances > 0 {
		d.rebuildMIGIntents(ctx, claims, specUIDs, records)
	}
	return records, nil
}

// recoverMIG reconciles a kept claim's MIG instances (reconcileMIG) and,
// when they changed, writes its spec again (same CDI IDs, the new MIG
// UUID). A failure is logged and keeps the record as it was: its pods fail
// on the missing device until the claim is unprepared.
func (d *Driver) recoverMIG(ctx context.Context, rec prepared.Claim, errs *[]error) prepared.Claim {
	fixed, changed, err := d.reconcileMIG(ctx, rec, true)
	if err != nil {
		*errs = append(*errs, err)
		return rec
	}
	if !changed {
		return rec
	}
	var client mps.ClientConfig
	if len(fixed.MPSCards()) > 0 && d.cfg.Shares != nil {
		client = d.cfg.Shares.ClientConfig(fixed.UID)
	}
	ids, err := d.cfg.Specs.Write(ctx, fixed, client)
	if err == nil {
		fixed, err = completed(fixed, ids)
	}
	if err != nil {
		*errs = append(*errs, fmt.Errorf("claim %s: writing the spec of its re-created MIG partitions: %w", rec.Key(), err))
		return rec
	}
	klog.FromContext(ctx).Info("Repaired the record of a claim whose MIG partitions were re-created", "claim", rec.Key(), "claimUID", rec.UID)
	// Its status.devices names the new MIG UUID.
	d.writeStatus(ctx, fixed)
	return fixed
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
