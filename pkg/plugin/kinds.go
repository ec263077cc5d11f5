package plugin

import (
	"context"

	"github.com/tangram-gpu/tangram/pkg/gpu"
	"github.com/tangram-gpu/tangram/pkg/plugin/kinds"
	"github.com/tangram-gpu/tangram/pkg/plugin/kinds/migpartition"
	"github.com/tangram-gpu/tangram/pkg/plugin/kinds/mpsshare"
	"github.com/tangram-gpu/tangram/pkg/plugin/prepared"
)

// KindConfig is what the kinds with effects need from the plugin's wiring.
type KindConfig struct {
	// Shares is the MPS accounting; nil on nodes with sharing disabled,
	// where an MPS share is refused.
	Shares mpsshare.Shares
	// MIG creates and destroys the MIG instances of claims of MIG
	// partitions (NVML, or a file for fake cards); nil refuses them.
	MIG gpu.MIGPartitions
}

// registerKinds builds the effects of the node's kinds of prepared device
// (pkg/plugin/kinds), in the order their set-up runs: the MPS accounting
// first (a daemon not ready refuses the claim before any MIG instance is
// created), then the MIG instances; undo runs in reverse. A whole card, admin access and
// a share without a backend have no effects beyond their CDI spec. Adding
// a kind with effects is its package under pkg/plugin/kinds and one line
// here (docs/architecture.md, "Adding a kind").
func (d *Driver) registerKinds() {
	d.kinds = []kinds.Effects{
		mpsshare.New(d.cfg.Shares, d.cfg.NodeName, d.cfg.State),
		migpartition.New(d.cards, d.cfg.MIG, driverRecords{d}),
	}
}

// MIGPartitions is the MIG partition kind, which the plugin also wires to
// the ResourceSlices' taints (partitions held by instances Tangram did not
// create) and to the health monitor (the device of a MIG instance).
func (d *Driver) MIGPartitions() *migpartition.Partitions {
	for _, k := range d.kinds {
		if p, ok := k.(*migpartition.Partitions); ok {
			return p
		}
	}
	return nil
}

// driverRecords are the Driver's records as its kinds use them.
type driverRecords struct{ d *Driver }

var _ kinds.Records = driverRecords{}

func (r driverRecords) Snapshot() map[string]prepared.Claim { return r.d.Records() }

func (r driverRecords) Save(ctx context.Context, rec prepared.Claim) error {
	r.d.mu.Lock()
	r.d.records[rec.UID] = rec
	r.d.mu.Unlock()
	return r.d.persist(ctx)
}

func (r driverRecords) Lock(ctx context.Context) (func(), error) { return r.d.lockState(ctx) }
