package plugin

import (
	"context"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health/grpc_health_v1"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/klog/v2/ktesting"
	drapbv1 "k8s.io/kubelet/pkg/apis/dra/v1"

	"github.com/tangram-gpu/tangram/pkg/device"
	"github.com/tangram-gpu/tangram/pkg/plugin/liveness"
	"github.com/tangram-gpu/tangram/pkg/plugin/prepared"
)

// TestKubeletGRPC runs the real kubeletplugin gRPC server on a temp socket
// and talks to it as the kubelet does, then probes the health endpoints.
func TestKubeletGRPC(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	h := newHarness(t)
	claim := claimWith("uid-1", shareResult("gpu", "gpu-2", "s1", "8Gi", "25"))
	client := fake.NewClientset(claim)

	// Unix socket paths are limited to ~108 bytes; keep them short.
	sockDir, err := os.MkdirTemp("", "tg")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(sockDir)
	for _, dir := range []string{"reg", "plugin"} {
		if err := os.Mkdir(filepath.Join(sockDir, dir), 0o750); err != nil {
			t.Fatal(err)
		}
	}
	helper, err := kubeletplugin.Start(ctx, h.driver,
		kubeletplugin.DriverName(device.DriverName),
		kubeletplugin.KubeClient(client),
		kubeletplugin.NodeName(testNode),
		kubeletplugin.RegistrarDirectoryPath(filepath.Join(sockDir, "reg")),
		kubeletplugin.PluginDataDirectoryPath(filepath.Join(sockDir, "plugin")),
	)
	if err != nil {
		t.Fatal(err)
	}
	defer helper.Stop()
	socket := filepath.Join(sockDir, "plugin", "dra.sock")

	conn, err := grpc.NewClient("unix://"+socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	dra := drapbv1.NewDRAPluginClient(conn)
	ref := &drapbv1.Claim{Namespace: claim.Namespace, Name: claim.Name, Uid: string(claim.UID)}
	resp, err := dra.NodePrepareResources(ctx, &drapbv1.NodePrepareResourcesRequest{Claims: []*drapbv1.Claim{ref}})
	if err != nil {
		t.Fatal(err)
	}
	got := resp.Claims[string(claim.UID)]
	if got == nil || got.Error != "" || len(got.Devices) != 1 {
		t.Fatalf("prepare response %v", resp)
	}
	dev := got.Devices[0]
	wantID := prepared.CDIDeviceID(prepared.CDIDeviceName("uid-1", "gpu-2", "s1"))
	if dev.PoolName != testNode || dev.DeviceName != "gpu-2" || dev.GetShareId() != "s1" ||
		len(dev.CdiDeviceIds) != 1 || dev.CdiDeviceIds[0] != wantID {
		t.Errorf("device %v, want pool %s device gpu-2 share s1 CDI ID %s", dev, testNode, wantID)
	}
	if _, err := os.Stat(h.specs.Store.Path("uid-1")); err != nil {
		t.Errorf("spec not written: %v", err)
	}

	// Health over gRPC and HTTP on one port.
	health := &liveness.Server{Checks: map[string]liveness.Check{"dra-socket": liveness.DRASocket(socket)}}
	listener, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = health.ServeListener(ctx, listener) }()
	addr := listener.Addr().String()
	probe := func() (grpc_health_v1.HealthCheckResponse_ServingStatus, int) {
		hc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		defer hc.Close()
		r, err := grpc_health_v1.NewHealthClient(hc).Check(ctx, &grpc_health_v1.HealthCheckRequest{})
		if err != nil {
			t.Fatal(err)
		}
		httpResp, err := http.Get("http://" + addr + "/healthz")
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, httpResp.Body)
		httpResp.Body.Close()
		return r.Status, httpResp.StatusCode
	}
	if status, code := probe(); status != grpc_health_v1.HealthCheckResponse_SERVING || code != http.StatusOK {
		t.Errorf("healthy plugin: gRPC %s HTTP %d, want SERVING 200", status, code)
	}

	unresp, err := dra.NodeUnprepareResources(ctx, &drapbv1.NodeUnprepareResourcesRequest{Claims: []*drapbv1.Claim{ref}})
	if err != nil {
		t.Fatal(err)
	}
	if e := unresp.Claims[string(claim.UID)].GetError(); e != "" {
		t.Errorf("unprepare error %q", e)
	}
	h.assertConsistent()

	helper.Stop()
	if status, code := probe(); status != grpc_health_v1.HealthCheckResponse_NOT_SERVING || code != http.StatusServiceUnavailable {
		t.Errorf("stopped plugin: gRPC %s HTTP %d, want NOT_SERVING 503", status, code)
	}
}
