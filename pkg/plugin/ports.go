package plugin

import (
	"context"
	"path/filepath"
	"time"

	resourceapi "k8s.io/api/resource/v1"

	configapi "github.com/tangram-gpu/tangram/api/gpu/v1alpha1"
	"github.com/tangram-gpu/tangram/pkg/plugin/prepared"
)

// The Driver talks to storage, CDI and the claims' /dev/shm through these
// small interfaces (and to MPS and MIG through its kinds, kinds.go);
// pkg/plugin/checkpoint (checkpoint.Claims), pkg/plugin/cdi (cdi.ClaimSpecs) and
// pkg/plugin/mps implement them, tests bind them to the same packages on temp
// dirs or to fault-injecting wrappers. All of them carry the one record
// type, prepared.Claim.

// StateStore persists the claim records crash-safely.
type StateStore interface {
	// Load returns the records of this boot. bootChanged reports that the
	// stored records were written during an earlier boot. A corrupt file is
	// moved aside and reported with an error wrapping checkpoint.ErrCorrupt;
	// a missing one with checkpoint.ErrMissing.
	Load(ctx context.Context) (records map[string]prepared.Claim, bootChanged bool, err error)
	// Save replaces the stored records atomically and durably.
	Save(ctx context.Context, records map[string]prepared.Claim) error
	// SaveUnsynced replaces them atomically without waiting for the disk:
	// every later process of this boot reads them, a power loss (a reboot,
	// after which every record is dropped) may lose them. Prepare records
	// PrepareStarted with it, so that its Save of PrepareCompleted is the
	// call's one durable write.
	SaveUnsynced(ctx context.Context, records map[string]prepared.Claim) error
	// Lock waits for the lock between the plugin processes of the node
	// (two run side by side during a rolling update) and returns its
	// release. The driver holds it from Load to its last Save of a call.
	Lock(ctx context.Context) (unlock func(), err error)
}

// SpecStore computes and writes the per-claim transient CDI specs.
type SpecStore interface {
	// Write writes the claim's spec (atomically, replacing an old one) and
	// returns the CDI device IDs of each device, in order.
	Write(ctx context.Context, claim prepared.Claim) ([][]string, error)
	// Remove deletes the claim's spec; a missing spec is not an error.
	Remove(ctx context.Context, claimUID string) error
	// List returns the UIDs of the claims that have a spec of ours on disk.
	List(ctx context.Context) ([]string, error)
	// Exists reports whether the claim's spec is on disk.
	Exists(ctx context.Context, claimUID string) bool
}

// ClaimDirs makes each prepared claim's own /dev/shm directory
// (daemon.ClaimDirs): created before the claim's spec is written, removed
// when the claim is undone, and those of claims no record holds swept at
// start-up.
type ClaimDirs interface {
	Create(ctx context.Context, claimUID string) error
	Remove(ctx context.Context, claimUID string) error
	// Exists reports whether the claim has a directory.
	Exists(claimUID string) bool
	// Sweep removes the directories of claims not in keep.
	Sweep(ctx context.Context, keep []string) error
}

// MemoryLimitRecords are tangram-cdi-hook's records of which pod holds
// each hard share claim (records.Dir): a claim's record goes when its spec
// does (cdi.ClaimSpecs.Remove), and those of claims not prepared, left by
// a reboot or by claims unprepared while the plugin was down, are swept
// at start-up.
type MemoryLimitRecords interface {
	// Sweep removes the records of claims not in keep, waiting at most
	// wait for the records lock, and returns what it removed and the
	// kept records it cannot read.
	Sweep(keep []string, wait time.Duration, holder string) (removed []string, unreadable []error, err error)
}

// ConfigResolver returns the effective config of each planned device
// (class configs, then claim configs; later wins), in order.
type ConfigResolver func(claim *resourceapi.ResourceClaim, devices []prepared.Device) ([]*configapi.GpuConfig, error)

// ClaimLister lists the cluster's ResourceClaims, for rebuilding state from
// our specs after a corrupt checkpoint. nil means no API server.
type ClaimLister func(ctx context.Context) ([]resourceapi.ResourceClaim, error)

// MemoryLimitStateDir is where tangram-cdi-hook keeps its records, under
// the plugin's state directory (mounted at the same path on the host).
func MemoryLimitStateDir(stateDir string) string { return filepath.Join(stateDir, "memory-limits") }
