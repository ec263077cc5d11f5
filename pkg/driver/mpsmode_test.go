package driver

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/klog/v2/ktesting"

	"github.com/tangram-gpu/tangram/pkg/names"
	"github.com/tangram-gpu/tangram/pkg/sharing"
)

// TestNewSharesDaemonMode checks how --mps-daemon picks the daemon: the
// default and "process" keep the simulated child-process backend on fake
// GPUs, "pod" builds a PodDaemon and needs the API server.
func TestNewSharesDaemonMode(t *testing.T) {
	podCfg := sharing.MPSDaemonPodConfig{
		Prefix: "tangram", Namespace: "tangram-system", Image: "img:dev",
		Command: []string{"/dra-kubelet-plugin", "mps-daemon"},
	}
	for _, tc := range []struct {
		name    string
		mode    string
		offline bool
		wantErr string
		// wantPod: the daemon is managed through the API server.
		wantPod bool
	}{
		{name: "default"},
		{name: "process", mode: MPSDaemonProcess},
		{name: "pod", mode: MPSDaemonPod, wantPod: true},
		{name: "pod offline", mode: MPSDaemonPod, offline: true, wantErr: "needs the API server"},
		{name: "unknown", mode: "daemonset", wantErr: `unknown MPS daemon mode "daemonset"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			opts := PluginOptions{
				NodeName: testNode, GPUs: testGPUs(), FakeGPUs: true, Sharing: true,
				MPSRoot: t.TempDir(), MPSDaemonMode: tc.mode, MPSDaemonPod: podCfg,
			}
			client := fake.NewClientset()
			if !tc.offline {
				opts.KubeClient = client
			}
			allocatable := map[string]int64{}
			for _, g := range testGPUs() {
				allocatable[fmt.Sprintf("%s%d", names.DevicePrefix, g.Index)] = 1 << 30
			}
			m, err := newShares(ctx, opts, allocatable)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || m == nil {
				t.Fatalf("newShares: %v (manager %v)", err, m)
			}
			// With no share, start-up reconciliation stops the daemon: in
			// pod mode that deletes the daemon pod through the API.
			defer m.Close()
			if err := m.Reconcile(ctx); err != nil {
				t.Fatal(err)
			}
			// It does so in the background.
			waitCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			if err := m.WaitIdle(waitCtx); err != nil {
				t.Fatal(err)
			}
			var deleted []string
			for _, a := range client.Actions() {
				if d, ok := a.(k8stesting.DeleteAction); ok && a.GetResource().Resource == "pods" {
					deleted = append(deleted, d.GetNamespace()+"/"+d.GetName())
				}
			}
			want := []string(nil)
			if tc.wantPod {
				want = []string{"tangram-system/tangram-mps-" + testNode}
			}
			if !slices.Equal(deleted, want) {
				t.Errorf("pods deleted at reconcile: %v, want %v", deleted, want)
			}
		})
	}
}
