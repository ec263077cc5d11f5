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

// TestCheckProcRoot: the usage watcher starts only on the host's /proc.
func TestCheckProcRoot(t *testing.T) {
	const childNS = "pid:[4026532999]"
	tests := []struct {
		name    string
		self    string // what <root>/self points to; "" for none
		cgroup  bool   // <root>/1/cgroup exists
		ownNS   string
		wantErr string
	}{
		{name: "the host's /proc seen from a pod: self is another PID", self: "123456", cgroup: true, ownNS: childNS},
		{name: "the host's /proc seen from the host", self: strconv.Itoa(os.Getpid()), cgroup: true, ownNS: initialPIDNamespace},
		{name: "the pod's own /proc", self: strconv.Itoa(os.Getpid()), cgroup: true, ownNS: childNS, wantErr: "the /proc of the plugin's own PID namespace"},
		{name: "no process 1", self: "123456", ownNS: childNS, wantErr: "1/cgroup failed"},
		{name: "no self", cgroup: true, ownNS: childNS, wantErr: "is it a /proc?"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root := t.TempDir()
			if tt.cgroup {
				if err := os.MkdirAll(filepath.Join(root, "1"), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(filepath.Join(root, "1", "cgroup"), []byte("0::/init.scope\n"), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			if tt.self != "" {
				if err := os.Symlink(tt.self, filepath.Join(root, "self")); err != nil {
					t.Fatal(err)
				}
			}
			err := checkProcRoot(root, tt.ownNS)
			switch {
			case tt.wantErr == "" && err != nil:
				t.Errorf("unexpected error: %v", err)
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
				t.Errorf("error %v, want one with %q", err, tt.wantErr)
			case err != nil && !strings.Contains(err.Error(), "--usage-interval=0"):
				t.Errorf("error %v does not say how to do without", err)
			}
		})
	}
}

// TestRunWatchesUsage runs the plugin with the fake cards' process list
// naming this test's own process, which runs in no pod: the usage watcher
// finds it through /proc and the node gets a GPUProcessWithoutClaim event.
func TestRunWatchesUsage(t *testing.T) {
	if err := checkProcRoot("/proc", ownPIDNamespace(t)); err != nil {
		t.Fatalf("this test needs the host's /proc: %v", err)
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

func ownPIDNamespace(t *testing.T) string {
	ns, err := os.Readlink("/proc/self/ns/pid")
	if err != nil {
		t.Fatalf("reading this process's PID namespace: %v", err)
	}
	return ns
}

// TestNodePods: what runs in the plugin's pod and in its node's MPS
// daemon pod is the node's; another node's daemon pod is not.
func TestNodePods(t *testing.T) {
	daemonPod := func(node, uid string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "tangram-mps", Name: daemon.PodName("tangram", node), UID: types.UID(uid)},
			Spec: corev1.PodSpec{NodeName: node}}
	}
	client := fake.NewClientset(daemonPod(testNode, "uid-daemon"), daemonPod("other-node", "uid-other"))
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
		{mode: MPSDaemonPod, want: map[string]bool{"uid-plugin": true, "uid-daemon": true}},
		{mode: MPSDaemonProcess, want: map[string]bool{"uid-plugin": true}},
	} {
		w := &wiring{Settings: Settings{Options: Options{PodUID: "uid-plugin", MPSOptions: MPSOptions{MPSDaemonMode: tc.mode}},
			mpsDaemonPod: daemon.PodSpec{Namespace: "tangram-mps", Prefix: "tangram"}}, Node: Node{NodeName: testNode}}
		if got := w.nodePods(pods); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("--mps-daemon=%s: node's pods %v, want %v", tc.mode, got, tc.want)
		}
	}
}
