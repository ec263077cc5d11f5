package driver

import (
	"context"
	"errors"

	resourceapi "k8s.io/api/resource/v1"

	configapi "github.com/tangram-gpu/tangram/api/gpu/v1alpha1"
	"github.com/tangram-gpu/tangram/pkg/sharing"
)

// The Driver talks to storage, CDI and MPS through these small interfaces;
// adapters.go binds them to pkg/checkpoint, pkg/cdi, pkg/config and
// pkg/sharing, tests bind them to the same packages on temp dirs or to
// fault-injecting wrappers.

// ErrCorruptCheckpoint marks a checkpoint that could not be read; the store
// has moved it aside and the driver rebuilds its state.
var ErrCorruptCheckpoint = errors.New("checkpoint is corrupt or unreadable")

// ErrNoCheckpoint marks a start without any checkpoint: the first one, or
// one after a rebuild from a corrupt checkpoint did not finish.
var ErrNoCheckpoint = errors.New("no checkpoint")

// StateStore persists the claim records crash-safely.
type StateStore interface {
	// Load returns the records of this boot. bootChanged reports that the
	// stored records were written during an earlier boot. A corrupt file is
	// moved aside and reported with an error wrapping ErrCorruptCheckpoint;
	// a missing one with ErrNoCheckpoint.
	Load(ctx context.Context) (records map[string]ClaimRecord, bootChanged bool, err error)
	// Save replaces the stored records atomically and durably.
	Save(ctx context.Context, records map[string]ClaimRecord) error
	// Lock waits for the lock between the plugin processes of the node
	// (two run side by side during a rolling update) and returns its
	// release. The driver holds it from Load to its last Save of a call.
	Lock(ctx context.Context) (unlock func(), err error)
}

// SpecDevice is one result to write into a claim's CDI spec.
type SpecDevice struct {
	plannedDevice
	// Config is the effective GpuConfig of the result's request.
	Config *configapi.GpuConfig
}

// ClaimSpec is what one claim's CDI spec is built from.
type ClaimSpec struct {
	UID       string
	Namespace string
	Name      string
	Devices   []SpecDevice
	// MPS is how a share's container reaches the node's MPS daemon.
	MPS sharing.ClientConfig
}

// SpecStore computes and writes the per-claim transient CDI specs.
type SpecStore interface {
	// Write writes the claim's spec (atomically, replacing an old one) and
	// returns the CDI device IDs of each device, in order.
	Write(ctx context.Context, spec ClaimSpec) ([][]string, error)
	// Remove deletes the claim's spec; a missing spec is not an error.
	Remove(ctx context.Context, claimUID string) error
	// List returns the UIDs of the claims that have a spec of ours on disk.
	List(ctx context.Context) ([]string, error)
	// Exists reports whether the claim's spec is on disk.
	Exists(ctx context.Context, claimUID string) bool
}

// ConfigResolver returns the effective config of each planned result
// (class configs, then claim configs; later wins), in order.
type ConfigResolver func(claim *resourceapi.ResourceClaim, plan []plannedDevice) ([]*configapi.GpuConfig, error)

// Shares is the MPS accounting the driver needs. None of its calls waits
// long on the MPS daemon (see sharing.Manager).
type Shares interface {
	// Acquire accounts a new claim's shares; an error wrapping
	// *sharing.DaemonNotReadyError means the daemon is not ready yet and
	// the kubelet should retry.
	Acquire(ctx context.Context, claimUID string, shares []sharing.Share) error
	// Restore accounts, at start-up, shares that may be running; it never
	// fails, so nothing a running share uses is torn down.
	Restore(ctx context.Context, claimUID string, shares []sharing.Share)
	Release(ctx context.Context, claimUID string) error
	Reconcile(ctx context.Context) error
	// Resync makes the accounting look at the daemon again: another plugin
	// process may have started or stopped it.
	Resync(ctx context.Context)
	// ClientConfig is how the claim's containers reach their MPS server.
	ClientConfig(claimUID string) sharing.ClientConfig
	// GuardStops makes the daemon stop only under g: see sharing.StopGuard.
	GuardStops(g sharing.StopGuard)
}

// ClaimLister lists the cluster's ResourceClaims, for rebuilding state from
// our specs after a corrupt checkpoint. nil means no API server.
type ClaimLister func(ctx context.Context) ([]resourceapi.ResourceClaim, error)
