package mpsshare

import (
	"context"
	"fmt"

	"github.com/tangram-gpu/tangram/pkg/plugin/mps"
)

// stopGuard lets the MPS worker stop the daemon only under the state lock
// and only while the checkpoint records no share of any plugin process:
// during a rolling update the other plugin pod may have prepared the
// node's first share since this process last looked, and its container
// needs the daemon.
type stopGuard struct{ state Checkpoint }

var _ mps.StopGuard = stopGuard{}

func (g stopGuard) LockForStop(ctx context.Context) (func(), bool, error) {
	unlock, err := g.state.Lock(ctx)
	if err != nil {
		return nil, false, fmt.Errorf("waiting for the plugin state lock: %w", err)
	}
	records, bootChanged, err := g.state.Load(ctx)
	if err != nil {
		unlock()
		// Unknown shares may be running: keep the daemon. The next call
		// rewrites the checkpoint, and the worker retries.
		return nil, false, fmt.Errorf("reading the checkpoint: %w", err)
	}
	if !bootChanged {
		// Records of an earlier boot have no daemon left to use.
		for _, rec := range records {
			// Started records count too: their prepare may be under way.
			if len(rec.MPSCards()) > 0 {
				return unlock, false, nil
			}
		}
	}
	return unlock, true, nil
}
