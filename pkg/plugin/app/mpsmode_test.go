package app

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/klog/v2/ktesting"

	"github.com/tangram-gpu/tangram/pkg/device"
	"github.com/tangram-gpu/tangram/pkg/plugin/driverroot"
	"github.com/tangram-gpu/tangram/pkg/plugin/mps/daemon"
)

// TestNewSharesDaemonMode checks how --mps-daemon picks the daemon: the
// default and "process" keep the simulated child-process backend on fake
// GPUs, "pod" builds a PodDaemon and needs the API server.
func TestNewSharesDaemonMode(t *testing.T) {
	podCfg := daemon.PodSpec{
		Prefix: "tangram", Namespace: "tangram-system", PodImage: daemon.PodImage{Image: "img:dev"},
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
			opts := &wiring{
				Settings: Settings{Options: Options{MPSOptions: MPSOptions{MPSRoot: t.TempDir(), MPSDaemonMode: tc.mode}}, mpsDaemonPod: podCfg},
				Node:     Node{NodeName: testNode, GPUs: testGPUs(), FakeGPUs: true, Sharing: true},
			}
			client := fake.NewClientset()
			if !tc.offline {
				opts.KubeClient = client
			}
			allocatable := map[string]int64{}
			for _, g := range testGPUs() {
				allocatable[fmt.Sprintf("%s%d", device.DevicePrefix, g.Index)] = 1 << 30
			}
			m, err := newShares(ctx, opts, allocatable, newClaimDirs(opts))
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

func TestMPSControlBinary(t *testing.T) {
	withBinary := t.TempDir()
	bin := filepath.Join(withBinary, "usr/bin", driverroot.MPSControl)
	if err := os.MkdirAll(filepath.Dir(bin), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	empty := t.TempDir()
	for _, tt := range []struct {
		name    string
		opts    *wiring
		want    string
		wantErr []string
	}{
		{name: "under the driver root", opts: &wiring{Node: Node{NVIDIADriver: NVIDIADriver{DriverRoot: driverroot.Root{Path: withBinary}}}}, want: bin},
		{name: "missing under the driver root", opts: &wiring{Node: Node{NVIDIADriver: NVIDIADriver{DriverRoot: driverroot.Root{Path: empty}}}},
			wantErr: []string{"MPS control binary is missing", filepath.Join(empty, "usr/bin", driverroot.MPSControl), "--mps-control-binary", "--sharing=disabled"}},
		{name: "explicit path wins", opts: &wiring{Node: Node{NVIDIADriver: NVIDIADriver{DriverRoot: driverroot.Root{Path: empty}}}, Settings: Settings{Options: Options{MPSOptions: MPSOptions{MPSControlBinary: bin}}}}, want: bin},
		{name: "explicit name not in PATH", opts: &wiring{Settings: Settings{Options: Options{MPSOptions: MPSOptions{MPSControlBinary: "no-such-mps-control"}}}},
			wantErr: []string{`"no-such-mps-control" was not found`}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, err := mpsControlBinary(tt.opts)
			if len(tt.wantErr) > 0 {
				if err == nil {
					t.Fatalf("got %s, want an error", got)
				}
				for _, w := range tt.wantErr {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("error %q lacks %q", err, w)
					}
				}
				return
			}
			if err != nil || got != tt.want {
				t.Errorf("got %q, %v; want %q", got, err, tt.want)
			}
		})
	}
}
