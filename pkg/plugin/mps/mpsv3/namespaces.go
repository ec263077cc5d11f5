package mpsv3

// The node-wide MPS v3 server and its namespaces, through the control daemon.

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"

	"k8s.io/klog/v2"

	"github.com/tangram-gpu/tangram/pkg/plugin/mps/control"
)

// Namespaces drives the node's MPS v3 server and its namespaces.
type Namespaces struct {
	// Server is the node's server name.
	Server string
	// Devices are the shareable cards the server may use.
	Devices []string
	// PipeDir is the control daemon's CUDA_MPS_PIPE_DIRECTORY. When set,
	// a namespace's pipe directory as the daemon reports it must be
	// <PipeDir>/<Server>/<namespace>, where the plugin mounts it: a wrong
	// directory would silently put the client in the uncapped default
	// namespace.
	PipeDir string
	ctl     control.Func
}

// DefaultServer is the name of the node's v3 server.
const DefaultServer = "tangram"

// NewNamespaces returns the v3 driver for the node's shared cards.
func NewNamespaces(ctl control.Func, devices []string) *Namespaces {
	return &Namespaces{Server: DefaultServer, Devices: slices.Clone(devices), ctl: ctl}
}

// WrapControl returns a copy of v whose commands go through wrap(its
// control), e.g. with the caller's deadline on each; v keeps its own.
func (v *Namespaces) WrapControl(wrap func(control.Func) control.Func) *Namespaces {
	wrapped := *v
	wrapped.ctl = wrap(v.ctl)
	return &wrapped
}

// ServerNotRunningError answers a share whose server is not listed as
// ready; the caller should retry.
type ServerNotRunningError struct {
	Server, Status string
}

func (e *ServerNotRunningError) Error() string {
	if e.Status == "" {
		return fmt.Sprintf("the node's MPS v3 server %q is not listed by the control daemon (server list), or not ready", e.Server)
	}
	return fmt.Sprintf("the node's MPS v3 server %q is %s, not Ready", e.Server, e.Status)
}

// EnsureServer creates the node's server if the control daemon does not
// list it. Servers run as UID 0 in a multi-user daemon: clients of any UID
// share it, and the namespaces separate them.
func (v *Namespaces) EnsureServer(ctx context.Context) error {
	state, err := v.serverState(ctx)
	if err != nil {
		return err
	}
	if state.Listed {
		return nil
	}
	if _, err := v.ctl(ctx, serverCreate(v.Server, 0, v.Devices)); err != nil {
		return fmt.Errorf("creating the node's MPS v3 server %q: %w", v.Server, err)
	}
	klog.FromContext(ctx).Info("Created the node's MPS v3 server", "server", v.Server, "devices", v.Devices)
	return nil
}

// CheckRunning fails with *ServerNotRunningError unless the server is
// listed as ready.
func (v *Namespaces) CheckRunning(ctx context.Context) error {
	state, err := v.serverState(ctx)
	if err != nil {
		return err
	}
	if !state.Ready() {
		return &ServerNotRunningError{Server: v.Server, Status: state.Status}
	}
	return nil
}

func (v *Namespaces) serverState(ctx context.Context) (ServerState, error) {
	out, err := v.ctl(ctx, serverList())
	if err != nil {
		return ServerState{}, fmt.Errorf("listing MPS v3 servers: %w", err)
	}
	return serverState(out, v.Server)
}

// List returns the server's namespaces by name.
func (v *Namespaces) List(ctx context.Context) (map[string]NamespaceSpec, error) {
	out, err := v.ctl(ctx, namespaceList(v.Server))
	if err != nil {
		return nil, fmt.Errorf("listing the namespaces of MPS v3 server %q: %w", v.Server, err)
	}
	return parseNamespaces(out)
}

// Ensure makes the namespace exist with spec's settings: created if
// missing, set if its settings differ as numbers (adopting one a previous
// plugin process created). A namespace whose limits already match is not
// set again: the daemon refuses to change a namespace with clients
// attached. Its pipe directory is then checked against PipeDir.
func (v *Namespaces) Ensure(ctx context.Context, spec NamespaceSpec, have map[string]NamespaceSpec) error {
	if err := ValidNamespaceName(spec.Name); err != nil {
		return err
	}
	got, exists := have[spec.Name]
	if !exists {
		if _, err := v.ctl(ctx, namespaceCreate(v.Server, spec.Name)); err != nil {
			return fmt.Errorf("creating MPS v3 namespace %s: %w", spec.Name, err)
		}
	}
	if !exists || !sameLimits(spec, got) {
		if cmd := namespaceSet(v.Server, spec); cmd != nil {
			if _, err := v.ctl(ctx, cmd); err != nil {
				return fmt.Errorf("setting the limits of MPS v3 namespace %s: %w", spec.Name, err)
			}
		}
	}
	return v.checkPipeDir(ctx, spec.Name, got.PipeDirectory)
}

// ListedPipeDir asks the daemon where clients reach the namespace, with
// the documented field spelling first and the other after it.
func (v *Namespaces) ListedPipeDir(ctx context.Context, name string) (string, error) {
	var errs []error
	for _, field := range pipeDirectoryFields {
		out, err := v.ctl(ctx, namespaceGet(v.Server, name, field))
		if err != nil {
			errs = append(errs, err)
			if isTimeout(err) {
				break // the daemon does not answer: another spelling would not help
			}
			continue
		}
		if dir := strings.TrimSpace(out); dir != "" {
			return dir, nil
		}
		errs = append(errs, fmt.Errorf("namespace get %s %s %s answered nothing", name, v.Server, field))
	}
	return "", fmt.Errorf("asking for the pipe directory of MPS v3 namespace %s: %w", name, errors.Join(errs...))
}

// isTimeout reports a command that got no answer within its deadline.
func isTimeout(err error) bool {
	var timeout *control.TimeoutError
	return errors.As(err, &timeout) || errors.Is(err, context.DeadlineExceeded)
}

// checkPipeDir compares the namespace's pipe directory, as listed (listed)
// or else asked for, with the one the plugin mounts.
func (v *Namespaces) checkPipeDir(ctx context.Context, name, listed string) error {
	if v.PipeDir == "" {
		return nil
	}
	got := listed
	if got == "" {
		var err error
		if got, err = v.ListedPipeDir(ctx, name); err != nil {
			return err
		}
	}
	want := filepath.Join(v.PipeDir, v.Server, name)
	if filepath.Clean(got) != want {
		return fmt.Errorf("the MPS control daemon puts namespace %s's clients at %s, not %s where the plugin mounts it: a client there would land in the default namespace, without limits", name, got, want)
	}
	return nil
}

// Delete removes the namespace; one that is not listed is gone already.
// The daemon refuses to delete a namespace with clients attached: they
// are terminated first (`client terminate <pid>`), and if one is still
// attached (or terminate is refused), the delete is forced. The first
// command that gets no answer ends it: a hung daemon would hold the caller
// for a deadline per client, and the worker deletes what is left once the
// daemon answers again.
func (v *Namespaces) Delete(ctx context.Context, name string, have map[string]NamespaceSpec) error {
	if _, ok := have[name]; !ok {
		return nil
	}
	logger := klog.FromContext(ctx)
	out, err := v.ctl(ctx, clientList(v.Server))
	if isTimeout(err) {
		return fmt.Errorf("deleting MPS v3 namespace %s: listing its clients: %w", name, err)
	}
	var pids []int
	if err == nil {
		pids, err = parseClientPIDs(out, v.Server, name)
	}
	if err != nil {
		logger.Error(err, "Listing the clients of MPS v3 namespace failed; deleting it with --force", "namespace", name)
	}
	for _, pid := range pids {
		logger.Info("Terminating an MPS client left in a namespace being deleted", "namespace", name, "pid", pid)
		if _, err := v.ctl(ctx, clientTerminate(pid)); err != nil {
			if isTimeout(err) {
				return fmt.Errorf("deleting MPS v3 namespace %s: terminating client %d: %w", name, pid, err)
			}
			logger.Error(err, "Terminating an MPS client failed; the delete will be forced", "namespace", name, "pid", pid)
		}
	}
	_, err = v.ctl(ctx, namespaceDelete(v.Server, name, false))
	if err == nil {
		return nil
	}
	if isTimeout(err) {
		return fmt.Errorf("deleting MPS v3 namespace %s: %w", name, err)
	}
	if _, errForced := v.ctl(ctx, namespaceDelete(v.Server, name, true)); errForced != nil {
		return fmt.Errorf("deleting MPS v3 namespace %s: %w", name, errors.Join(err, errForced))
	}
	logger.Info("Deleted MPS v3 namespace with --force", "namespace", name, "plainDeleteErr", err)
	return nil
}
