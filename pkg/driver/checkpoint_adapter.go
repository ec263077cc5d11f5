package driver

import (
	"context"
	"errors"
	"fmt"

	"k8s.io/klog/v2"

	"github.com/tangram-gpu/tangram/pkg/checkpoint"
)

// CheckpointState is the StateStore backed by pkg/checkpoint.
type CheckpointState struct {
	Store *checkpoint.Store
	// StateLock is shared by every plugin process of the node; it lives
	// next to the checkpoint.
	StateLock *checkpoint.FileLock
	// Pool is the node's resource pool; pkg/checkpoint does not store it
	// because every result of this plugin is in it.
	Pool string
	// MPSPipeDir is recorded with every MPS share.
	MPSPipeDir string
}

var _ StateStore = CheckpointState{}

// Load reads the checkpoint; a corrupt file (already moved aside by the
// store) is reported as ErrCorruptCheckpoint, a missing one as
// ErrNoCheckpoint, a reboot as bootChanged.
func (c CheckpointState) Load(ctx context.Context) (map[string]ClaimRecord, bool, error) {
	res, err := c.Store.Load()
	if err != nil {
		return nil, false, err
	}
	for _, path := range res.RemovedCorrupt {
		klog.FromContext(ctx).Info("Removed an old moved-aside checkpoint", "path", path)
	}
	if res.Corrupt != nil {
		return nil, false, fmt.Errorf("%w: %v", ErrCorruptCheckpoint, res.Corrupt)
	}
	if res.Missing {
		return nil, false, fmt.Errorf("%w at %s", ErrNoCheckpoint, c.Store.Path())
	}
	if res.PreviousBootID != "" {
		klog.FromContext(ctx).Info("Checkpoint is from an earlier boot", "previousBootID", res.PreviousBootID, "droppedClaims", len(res.Dropped))
	}
	records := make(map[string]ClaimRecord, len(res.Checkpoint.Claims))
	for uid, claim := range res.Checkpoint.Claims {
		records[uid] = fromCheckpoint(uid, c.Pool, claim)
	}
	return records, res.PreviousBootID != "" || len(res.Dropped) > 0, nil
}

// Lock takes the lock between the node's plugin processes.
func (c CheckpointState) Lock(ctx context.Context) (func(), error) {
	if c.StateLock == nil {
		return nil, errors.New("internal error: the checkpoint has no lock between plugin processes")
	}
	return c.StateLock.Lock(ctx)
}

// Save writes the records atomically with fsync.
func (c CheckpointState) Save(_ context.Context, records map[string]ClaimRecord) error {
	cp := checkpoint.New()
	for uid, rec := range records {
		cp.Claims[uid] = c.toCheckpoint(rec)
	}
	return c.Store.Save(cp)
}

func (c CheckpointState) toCheckpoint(rec ClaimRecord) checkpoint.Claim {
	out := checkpoint.Claim{Namespace: rec.Namespace, Name: rec.Name, State: checkpoint.PrepareStarted, Allocation: rec.Allocation}
	if rec.Phase == PhaseCompleted {
		out.State = checkpoint.PrepareCompleted
	}
	for _, d := range rec.Devices {
		dev := checkpoint.Device{
			Request:        d.Request,
			Device:         d.Device,
			GPUUUID:        d.UUID,
			ShareID:        d.ShareID,
			Share:          d.Share,
			CDIDeviceIDs:   d.CDIDeviceIDs,
			MemoryBytes:    d.MemoryBytes,
			ComputePercent: d.ComputePercent,
			AdminAccess:    d.AdminAccess,
			Config:         d.Config,
		}
		if d.MPS {
			dev.MPSPipeDir = c.MPSPipeDir
		}
		out.Devices = append(out.Devices, dev)
	}
	return out
}

// fromCheckpoint restores a record. MPS is recorded as the share's pipe
// directory.
func fromCheckpoint(uid, pool string, claim checkpoint.Claim) ClaimRecord {
	rec := ClaimRecord{UID: uid, Namespace: claim.Namespace, Name: claim.Name, Phase: PhaseStarted, Allocation: claim.Allocation}
	if claim.State == checkpoint.PrepareCompleted {
		rec.Phase = PhaseCompleted
	}
	for _, d := range claim.Devices {
		rec.Devices = append(rec.Devices, PreparedDevice{
			Request:        d.Request,
			Pool:           pool,
			Device:         d.Device,
			UUID:           d.GPUUUID,
			ShareID:        d.ShareID,
			Share:          d.Share,
			MPS:            d.Share && d.MPSPipeDir != "",
			CDIDeviceIDs:   d.CDIDeviceIDs,
			MemoryBytes:    d.MemoryBytes,
			ComputePercent: d.ComputePercent,
			AdminAccess:    d.AdminAccess,
			Config:         d.Config,
		})
	}
	return rec
}
