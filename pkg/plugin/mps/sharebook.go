package mps

import (
	"maps"
	"slices"
)

// shareBook is the share accounting: which claims hold shares on which
// cards. The Manager's mu guards it.
type shareBook struct {
	// holders maps a card UUID to the claims holding a share on it; the
	// value is false while an Acquire is still waiting for the daemon (the
	// share is not in use yet), true once the share is in use.
	holders map[string]map[string]bool
	// claims maps a claim UID to the cards it holds shares on.
	claims map[string]map[string]bool
	// shares keeps each claim's shares, from which its v3 namespace is
	// derived (again at start-up, from the checkpoint).
	shares map[string][]Share
	// settled is set by Reconcile, once the checkpoint's shares are
	// restored: from then on no share in use means none uses the daemon.
	settled bool
	// pendingModes are cards with shares whose EXCLUSIVE_PROCESS could not
	// be restored at start-up; the worker retries them.
	pendingModes map[string]bool
}

func (b *shareBook) hold(claim, uuid string, inUse bool) {
	if b.holders[uuid] == nil {
		b.holders[uuid] = map[string]bool{}
	}
	b.holders[uuid][claim] = inUse
	if b.claims[claim] == nil {
		b.claims[claim] = map[string]bool{}
	}
	b.claims[claim][uuid] = true
}

func (b *shareBook) drop(claim, uuid string) {
	delete(b.holders[uuid], claim)
	if len(b.holders[uuid]) == 0 {
		delete(b.holders, uuid)
	}
	delete(b.claims[claim], uuid)
	if len(b.claims[claim]) == 0 {
		delete(b.claims, claim)
	}
}

// inUse reports whether some share is in use (not just waiting).
func (b *shareBook) inUse() bool {
	for _, claims := range b.holders {
		for _, inUse := range claims {
			if inUse {
				return true
			}
		}
	}
	return false
}

// holdersByCard returns, per card, the sorted claims holding a share on it.
func (b *shareBook) holdersByCard() map[string][]string {
	out := map[string][]string{}
	for uuid, claims := range b.holders {
		out[uuid] = slices.Sorted(maps.Keys(claims))
	}
	return out
}
