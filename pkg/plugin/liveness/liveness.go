// Package liveness answers the kubelet plugin's liveness probes: gRPC
// health (what a Kubernetes `grpc:` probe calls) and HTTP /healthz on one
// address, from named checks that fail the probe and details that only
// report.
package liveness

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/http"
	"slices"
	"sort"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	"k8s.io/klog/v2"
	drapbv1 "k8s.io/kubelet/pkg/apis/dra/v1"
)

// Check reports nil when the part it checks works.
type Check func(ctx context.Context) error

// Server answers liveness probes over gRPC (grpc.health.v1, what a
// Kubernetes `grpc:` probe calls) and HTTP (/healthz) on the same address.
type Server struct {
	grpc_health_v1.UnimplementedHealthServer
	// Checks are run on every probe, by name.
	Checks map[string]Check
	// Timeout bounds one probe.
	Timeout time.Duration
	// Details are reported in the /healthz body, by name, without failing
	// the probe: states the plugin retries by itself (e.g. the MPS
	// daemon), where restarting the plugin would help nothing. A detail
	// returns "" when there is nothing to say.
	Details map[string]func() string
}

// details returns "name: detail" lines of the non-empty details, sorted.
func (h *Server) details() string {
	var lines []string
	for _, name := range slices.Sorted(maps.Keys(h.Details)) {
		if d := h.Details[name](); d != "" {
			lines = append(lines, name+": "+d+"\n")
		}
	}
	return strings.Join(lines, "")
}

// run runs every check and joins the failures, naming each.
func (h *Server) run(ctx context.Context) error {
	timeout := h.Timeout
	if timeout == 0 {
		timeout = 5 * time.Second
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	names := make([]string, 0, len(h.Checks))
	for name := range h.Checks {
		names = append(names, name)
	}
	sort.Strings(names)
	var errs []error
	for _, name := range names {
		if err := h.Checks[name](ctx); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", name, err))
		}
	}
	return errors.Join(errs...)
}

// Check implements grpc.health.v1: the empty service name and "dra" mean
// the whole plugin.
func (h *Server) Check(ctx context.Context, req *grpc_health_v1.HealthCheckRequest) (*grpc_health_v1.HealthCheckResponse, error) {
	if req.GetService() != "" && req.GetService() != "dra" {
		return nil, status.Errorf(codes.NotFound, "unknown service %q; use \"\" or \"dra\"", req.GetService())
	}
	if err := h.run(ctx); err != nil {
		klog.FromContext(ctx).V(2).Info("Health check failed", "err", err)
		return &grpc_health_v1.HealthCheckResponse{Status: grpc_health_v1.HealthCheckResponse_NOT_SERVING}, nil
	}
	return &grpc_health_v1.HealthCheckResponse{Status: grpc_health_v1.HealthCheckResponse_SERVING}, nil
}

// ServeHTTP answers /healthz with 200 "ok" or 503 and the failures.
func (h *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if err := h.run(r.Context()); err != nil {
		http.Error(w, err.Error()+"\n"+h.details(), http.StatusServiceUnavailable)
		return
	}
	_, _ = w.Write([]byte("ok\n" + h.details()))
}

// Serve listens on addr and serves gRPC health (HTTP/2 cleartext) and
// /healthz (HTTP/1 or 2) until ctx ends.
func (h *Server) Serve(ctx context.Context, addr string) error {
	listener, err := ListenShared(ctx, addr)
	if err != nil {
		return fmt.Errorf("listening for health probes on %s: %w", addr, err)
	}
	return h.ServeListener(ctx, listener)
}

// ServeListener is Serve on an existing listener.
func (h *Server) ServeListener(ctx context.Context, listener net.Listener) error {
	grpcServer := grpc.NewServer()
	grpc_health_v1.RegisterHealthServer(grpcServer, h)
	mux := http.NewServeMux()
	mux.Handle("/healthz", h)
	protocols := new(http.Protocols)
	protocols.SetHTTP1(true)
	protocols.SetUnencryptedHTTP2(true)
	server := &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.ProtoMajor == 2 && strings.HasPrefix(r.Header.Get("Content-Type"), "application/grpc") {
				grpcServer.ServeHTTP(w, r)
				return
			}
			mux.ServeHTTP(w, r)
		}),
		Protocols:         protocols,
		ReadHeaderTimeout: 10 * time.Second,
		BaseContext:       func(net.Listener) context.Context { return ctx },
	}
	go func() {
		<-ctx.Done()
		shutdownCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = server.Shutdown(shutdownCtx)
	}()
	klog.FromContext(ctx).Info("Serving health probes", "address", listener.Addr().String(), "grpc", "grpc.health.v1", "http", "/healthz")
	if err := server.Serve(listener); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("serving health probes: %w", err)
	}
	return nil
}

// DRASocket calls NodePrepareResources with no claims on the plugin's
// socket, which proves the gRPC server the kubelet talks to answers.
func DRASocket(socketPath string) Check {
	return func(ctx context.Context) error {
		conn, err := grpc.NewClient("unix://"+socketPath, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			return fmt.Errorf("connecting to DRA socket %s: %w", socketPath, err)
		}
		defer conn.Close()
		if _, err := drapbv1.NewDRAPluginClient(conn).NodePrepareResources(ctx, &drapbv1.NodePrepareResourcesRequest{}); err != nil {
			return fmt.Errorf("calling the DRA service on %s: %w", socketPath, err)
		}
		return nil
	}
}
