package mps

// MPS v3: a namespace and a /dev/shm per claim, made at Acquire, deleted
// at Release and put right by the worker after a daemon restart.

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"slices"

	"k8s.io/klog/v2"

	"github.com/tangram-gpu/tangram/pkg/plugin/mps/mpsv3"
)

// prepareNamespace creates the claim's /dev/shm and v3 namespace. It is
// idempotent: a namespace left by an earlier attempt is adopted and set.
func (m *Manager) prepareNamespace(ctx context.Context, claim string, shares []Share) error {
	if err := m.dirs.Create(ctx, claim); err != nil {
		return err
	}
	if err := m.v3.CheckRunning(ctx); err != nil {
		m.mu.Lock()
		m.sup.verify = true
		m.kickWorker()
		m.mu.Unlock()
		return &DaemonNotReadyError{Claim: claim, Cause: err}
	}
	have, err := m.v3.List(ctx)
	if err != nil {
		return err
	}
	spec := namespaceFor(claim, shares)
	if err := m.v3.Ensure(ctx, spec, have); err != nil {
		return err
	}
	// The container runtime bind-mounts the namespace's socket directory
	// when the container is created; the daemon makes it, but whether
	// before its first client is not documented, so make sure it exists.
	if err := os.MkdirAll(NamespacePipeDir(m.layout, m.v3.Server, claim), 0o755); err != nil {
		return fmt.Errorf("creating the pipe directory of MPS v3 namespace %s: %w", spec.Name, err)
	}
	klog.FromContext(ctx).V(2).Info("MPS v3 namespace ready", "claim", claim, "namespace", spec.Name,
		"activeThreadPercentage", spec.ActiveThreadPercentage, "pinnedMemoryLimit", spec.PinnedMemoryLimit)
	return nil
}

// dropNamespace deletes the claim's namespace (if the daemon lists it) and
// its /dev/shm. A daemon that does not answer has no namespaces to delete:
// the worker's next sync removes what a restarted one still lists.
func (m *Manager) dropNamespace(ctx context.Context, claim string) error {
	m.mu.Lock()
	_, held := m.book.claims[claim]
	ready := m.sup.ready
	m.mu.Unlock()
	if held && ready {
		have, err := m.v3.List(ctx)
		if err == nil {
			err = m.v3.Delete(ctx, mpsv3.NamespaceName(claim), have)
		}
		if err != nil {
			return err
		}
	}
	if err := os.RemoveAll(NamespacePipeDir(m.layout, m.v3.Server, claim)); err != nil {
		return fmt.Errorf("removing the pipe directory of MPS v3 namespace %s: %w", mpsv3.NamespaceName(claim), err)
	}
	return m.dirs.Remove(ctx, claim)
}

// syncNamespaces creates the node's server if missing and makes its
// namespaces of ours those of the claims holding shares; before Reconcile
// (start-up replay still running) nothing is deleted. Each namespace is
// changed under its claim's lock, never all at once, and one that a call
// changed since the list was read is left as that call made it.
func (m *Manager) syncNamespaces(ctx context.Context) error {
	if err := m.v3.EnsureServer(ctx); err != nil {
		return err
	}
	if err := m.v3.CheckRunning(ctx); err != nil {
		return err
	}
	since := m.ns.mark()
	defer m.ns.forget(since)
	have, err := m.v3.List(ctx)
	if err != nil {
		return err
	}
	m.mu.Lock()
	settled := m.book.settled
	names := map[string]bool{}
	for claim := range m.book.claims {
		names[mpsv3.NamespaceName(claim)] = true
	}
	m.mu.Unlock()
	for name := range have {
		if settled && mpsv3.OwnNamespace(name) {
			names[name] = true
		}
	}
	var errs []error
	for _, name := range slices.Sorted(maps.Keys(names)) {
		if err := m.syncNamespace(ctx, name, have, since, settled); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("syncing the MPS v3 namespaces with the prepared claims: %w", err)
	}
	return nil
}

// syncNamespace brings one namespace to what the accounting wants, under
// its claim's lock: it exists with its claim's limits while the claim
// holds shares, and (once settled) is deleted otherwise.
func (m *Manager) syncNamespace(ctx context.Context, name string, have map[string]mpsv3.NamespaceSpec, since uint64, settled bool) error {
	unlock, err := m.ns.lock(ctx, name)
	if err != nil {
		return err
	}
	defer unlock(false)
	if m.ns.touchedSince(name, since) {
		// A prepare or release changed it after the list was read.
		return nil
	}
	spec, wanted := m.wantedNamespace(name)
	switch {
	case wanted:
		return m.v3.Ensure(ctx, spec, have)
	case settled:
		if _, listed := have[name]; !listed {
			return nil
		}
		klog.FromContext(ctx).Info("Deleting MPS v3 namespace no prepared claim owns", "namespace", name)
		return m.v3.Delete(ctx, name, have)
	}
	return nil
}

// wantedNamespace is the namespace a claim holding shares wants under
// name; false when no such claim does.
func (m *Manager) wantedNamespace(name string) (mpsv3.NamespaceSpec, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for claim := range m.book.claims {
		if mpsv3.NamespaceName(claim) == name {
			return namespaceFor(claim, m.book.shares[claim]), true
		}
	}
	return mpsv3.NamespaceSpec{}, false
}
