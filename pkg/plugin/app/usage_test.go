package app

import (
	"context"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/dynamic-resource-allocation/resourceslice"
	"k8s.io/klog/v2/ktesting"

	"github.com/tangram-gpu/tangram/pkg/gpu"
	"github.com/tangram-gpu/tangram/pkg/gpu/fakegpu"
	"github.com/tangram-gpu/tangram/pkg/plugin/mps/daemon"
	"github.com/tangram-gpu/tangram/pkg/plugin/usage"
	"github.com/tangram-gpu/tangram/pkg/resourceslices"
)

// TestCheckPIDNamespace: the usage watcher starts only in the host's PID
// namespace, reading its own /proc.
func TestCheckPIDNamespace(t *testing.T) {
	const self = 4242
	hostInit, plugin, otherPod := "0::/init.scope\n", "0::/kubepods.slice/kubepods-pod0a1b2c3d_0000_4000_8000_000000000001.slice/cri-containerd-1.scope\n",
		"0::/kubepods.slice/kubepods-pod0a1b2c3d_0000_4000_8000_000000000002.slice/cri-containerd-2.scope\n"
	tests := []struct {
		name        string
		selfLink    string // what <root>/self points to; "" for none
		selfPID     int
		first, mine string // the cgroups of processes 1 and selfPID; "" for none
		wantErr     string
	}{
		{name: "hostPID: process 1 is the host's init", selfLink: "4242", selfPID: self, first: hostInit, mine: plugin},
		{name: "hostPID in a nested host (kind): process 1 in another pod, or none", selfLink: "4242", selfPID: self, first: otherPod, mine: plugin},
		{name: "the pod's own PID namespace, the plugin process 1", selfLink: "1", selfPID: 1, first: plugin, mine: plugin, wantErr: "process 1 of its PID namespace"},
		{name: "the pod's own PID namespace, process 1 a sibling (shared process namespace)", selfLink: "4242", selfPID: self, first: plugin, mine: plugin, wantErr: "runs in the plugin's own pod"},
		{name: "another namespace's /proc (the host's mounted without hostPID)", selfLink: "98765", selfPID: self, first: hostInit, mine: plugin, wantErr: "not the /proc of the plugin's PID namespace"},
		{name: "not a /proc", selfPID: self, wantErr: "is it a /proc?"},
		{name: "no process 1", selfLink: "4242", selfPID: self, mine: plugin, wantErr: "the cgroup of process 1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root := t.TempDir()
			for pid, cgroup := range map[int]string{1: tt.first, tt.selfPID: tt.mine} {
				if cgroup == "" {
					continue
				}
				dir := filepath.Join(root, strconv.Itoa(pid))
				if err := os.MkdirAll(dir, 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(filepath.Join(dir, "cgroup"), []byte(cgroup), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			if tt.selfLink != "" {
				if err := os.Symlink(tt.selfLink, filepath.Join(root, "self")); err != nil {
					t.Fatal(err)
				}
			}
			err := checkPIDNamespace(root, tt.selfPID)
			switch {
			case tt.wantErr == "" && err != nil:
				t.Errorf("unexpected error: %v", err)
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
				t.Errorf("error %v, want one with %q", err, tt.wantErr)
			}
		})
	}
}

// TestRunWatchesUsage runs the plugin with the fake cards' process list
// naming this test's own process, which runs in no pod: the usage watcher
// finds it through /proc and the node gets a GPUProcessWithoutClaim event.
func TestRunWatchesUsage(t *testing.T) {
	if err := checkPIDNamespace("/proc", os.Getpid()); err != nil {
		t.Fatalf("this test runs where the plugin would watch usage: %v", err)
	}
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	client := fake.NewClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: testNode}})
	dir := t.TempDir()
	sockDir := kubeletDirs(t)
	processes := filepath.Join(dir, "processes.json")
	card := testGPUs()[0].UUID
	if err := fakegpu.WriteProcesses(processes, []gpu.Process{{Card: card, GPUInstance: gpu.NoGPUInstance, PID: os.Getpid(), UsedBytes: 3 << 30}}); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		done <- parseAndRun(ctx, Options{
			CDIRoot: filepath.Join(dir, "cdi"), RegistrarDir: filepath.Join(sockDir, "reg"), PluginDir: filepath.Join(sockDir, "plugin"),
			StateDir: filepath.Join(dir, "state"), Publish: true,
			MPSOptions:   MPSOptions{MPSRoot: filepath.Join(dir, "mps"), MPSShmSize: "0", MPSDaemonMode: MPSDaemonProcess},
			UsageOptions: UsageOptions{UsageInterval: 20 * time.Millisecond, UsageProcRoot: "/proc"},
		}, Node{
			NodeName: testNode, GPUs: testGPUs(), FakeGPUs: true,
			Resources: func(map[string]string) (*resourceslice.DriverResources, error) {
				return resourceslices.DriverResources(testGPUs(), resourceslices.Options{NodeName: testNode})
			},
			KubeClient: client,
			Processes:  fakegpu.ProcessesFile{Path: processes},
		})
	}()
	deadline := time.Now().Add(30 * time.Second)
	for {
		events, err := client.CoreV1().Events("").List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		var found *corev1.Event
		for i, ev := range events.Items {
			if ev.Reason == "GPUProcessWithoutClaim" {
				found = &events.Items[i]
			}
		}
		if found != nil {
			if found.InvolvedObject.Kind != "Node" || found.InvolvedObject.Name != testNode || found.Type != corev1.EventTypeWarning ||
				!strings.Contains(found.Message, "process "+strconv.Itoa(os.Getpid())+" outside any pod uses GPU "+card+" (3.0GiB)") {
				t.Errorf("event %s %s on %s/%s: %q", found.Type, found.Reason, found.InvolvedObject.Kind, found.InvolvedObject.Name, found.Message)
			}
			break
		}
		select {
		case err := <-done:
			t.Fatalf("Run returned: %v", err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("no GPUProcessWithoutClaim event on the node after 30s")
		}
		time.Sleep(20 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run after cancellation: %v", err)
	}
}

// TestNodePods: what runs in the node's plugin pods (the old one beside the
// new during a rolling update) and in its MPS daemon pod is the node's;
// another node's daemon pod or another component's pod is not.
func TestNodePods(t *testing.T) {
	daemonPod := func(node, uid string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "tangram-mps", Name: daemon.PodName("tangram", node), UID: types.UID(uid)},
			Spec: corev1.PodSpec{NodeName: node}}
	}
	plugin := func(name, uid, component string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "tangram-system", Name: name, UID: types.UID(uid), Labels: map[string]string{componentLabel: component}},
			Spec: corev1.PodSpec{NodeName: testNode}}
	}
	// A rolling update: the old plugin pod beside the new one; the
	// controller is no plugin.
	client := fake.NewClientset(daemonPod(testNode, "uid-daemon"), daemonPod("other-node", "uid-other"),
		plugin("plugin-new", "uid-plugin", "kubelet-plugin"), plugin("plugin-old", "uid-plugin-old", "kubelet-plugin"), plugin("controller", "uid-controller", "controller"))
	pods, err := usage.NewNodePods(client, testNode)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pods.Start(ctx)
	deadline := time.Now().Add(30 * time.Second)
	for _, err := pods.Claims(ctx); err != nil; _, err = pods.Claims(ctx) {
		if time.Now().After(deadline) {
			t.Fatal("the pod informer did not sync")
		}
		time.Sleep(10 * time.Millisecond)
	}
	for _, tc := range []struct {
		mode string
		want map[string]bool
	}{
		{mode: MPSDaemonPod, want: map[string]bool{"uid-plugin": true, "uid-plugin-old": true, "uid-daemon": true}},
		{mode: MPSDaemonProcess, want: map[string]bool{"uid-plugin": true, "uid-plugin-old": true}},
	} {
		w := &wiring{Settings: Settings{Options: Options{PodUID: "uid-plugin", MPSOptions: MPSOptions{MPSDaemonMode: tc.mode}},
			mpsDaemonPod: daemon.PodSpec{Namespace: "tangram-mps", Prefix: "tangram"}}, Node: Node{NodeName: testNode}}
		if got := w.nodePods(pods); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("--mps-daemon=%s: node's pods %v, want %v", tc.mode, got, tc.want)
		}
	}
}
