// Package checkpoint persists which claims the kubelet plugin has prepared,
// so that prepare is idempotent and a restarted plugin knows what it owns.
//
// The file is versioned and checksummed:
//
//	{"version":"v1","checksum":"sha256:<hex of data>","data":{"bootID":"...","claims":{...}}}
//
// The claims are the plugin's records (prepared.Claim), persisted as they
// are; testdata/checkpoint-a1512ea.json pins the format. Claims (claims.go)
// is the plugin's durable state: this file and the lock between the plugin
// processes of a node.
//
// Each claim is in one of two states: PrepareStarted (written before any
// side effect) and PrepareCompleted (written after the CDI spec and MPS
// daemons are in place). A claim found PrepareStarted after a restart was
// interrupted and must be rolled back by the caller.
//
// Store.Save writes atomically (temp file in the same directory, fsync,
// rename, fsync of the directory). Store.Load never fails on bad content: a
// corrupt, unreadable or unknown-version file is moved aside to
// "<path>.corrupt-<timestamp>" and reported in LoadResult.Corrupt, with an
// empty checkpoint for the caller to rebuild from CDI specs and the API
// server. When the node's boot ID differs from the one in the file, the
// machine rebooted: nothing prepared before survives, so the claims are
// dropped and listed in LoadResult.Dropped.
package checkpoint

import (
	"github.com/tangram-gpu/tangram/pkg/plugin/prepared"
)

// Version is the current file format version.
const Version = "v1"

// Checkpoint is the plugin's prepared state, keyed by claim UID. The claims
// are the plugin's own records (pkg/plugin/prepared), persisted as they are:
// their JSON is the file format.
type Checkpoint struct {
	// BootID is the node boot ID the state belongs to; Save stamps it.
	BootID string                    `json:"bootID"`
	Claims map[string]prepared.Claim `json:"claims"`
}

// New returns an empty checkpoint.
func New() *Checkpoint {
	return &Checkpoint{Claims: map[string]prepared.Claim{}}
}

// DeepCopy returns an independent copy, for callers that snapshot state
// before changing it.
func (c *Checkpoint) DeepCopy() *Checkpoint {
	out := &Checkpoint{BootID: c.BootID, Claims: make(map[string]prepared.Claim, len(c.Claims))}
	for uid, claim := range c.Claims {
		out.Claims[uid] = claim.DeepCopy()
	}
	return out
}
