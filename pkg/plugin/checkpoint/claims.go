package checkpoint

import (
	"context"
	"errors"
	"fmt"

	"k8s.io/klog/v2"

	"github.com/tangram-gpu/tangram/pkg/plugin/prepared"
)

// ErrCorrupt marks a checkpoint that could not be read; the store has moved
// it aside and the plugin rebuilds its state.
var ErrCorrupt = errors.New("checkpoint is corrupt or unreadable")

// ErrMissing marks a start without any checkpoint: the first one, or one
// after a rebuild from a corrupt checkpoint did not finish.
var ErrMissing = errors.New("no checkpoint")

// Claims is the plugin's durable claim state: the checkpoint file holding
// the prepared records as they are, and the lock between the plugin
// processes of the node.
type Claims struct {
	Store *Store
	// StateLock is shared by every plugin process of the node; it lives
	// next to the checkpoint.
	StateLock *FileLock
}

// Load reads the records of this boot. bootChanged reports that the stored
// records were written during an earlier boot (they are dropped). A corrupt
// file (already moved aside by the store) is reported wrapping ErrCorrupt,
// a missing one wrapping ErrMissing.
func (c Claims) Load(ctx context.Context) (records map[string]prepared.Claim, bootChanged bool, err error) {
	res, err := c.Store.Load()
	if err != nil {
		return nil, false, err
	}
	for _, path := range res.RemovedCorrupt {
		klog.FromContext(ctx).Info("Removed an old moved-aside checkpoint", "path", path)
	}
	if res.Corrupt != nil {
		return nil, false, fmt.Errorf("%w: %v", ErrCorrupt, res.Corrupt)
	}
	if res.Missing {
		return nil, false, fmt.Errorf("%w at %s", ErrMissing, c.Store.Path())
	}
	if res.PreviousBootID != "" {
		klog.FromContext(ctx).Info("Checkpoint is from an earlier boot", "previousBootID", res.PreviousBootID, "droppedClaims", len(res.Dropped))
	}
	return res.Checkpoint.Claims, res.PreviousBootID != "" || len(res.Dropped) > 0, nil
}

// Lock waits for the lock between the node's plugin processes (two run
// side by side during a rolling update) and returns its release.
func (c Claims) Lock(ctx context.Context) (func(), error) {
	if c.StateLock == nil {
		return nil, errors.New("internal error: the checkpoint has no lock between plugin processes")
	}
	return c.StateLock.Lock(ctx)
}

// Save replaces the stored records atomically and durably.
func (c Claims) Save(_ context.Context, records map[string]prepared.Claim) error {
	return c.Store.Save(&Checkpoint{Claims: records})
}

// SaveUnsynced replaces the stored records atomically, without waiting for
// the disk (Store.SaveUnsynced).
func (c Claims) SaveUnsynced(_ context.Context, records map[string]prepared.Claim) error {
	return c.Store.SaveUnsynced(&Checkpoint{Claims: records})
}
