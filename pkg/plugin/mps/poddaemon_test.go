package mps

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/klog/v2"

	"github.com/tangram-gpu/tangram/pkg/plugin/mps/inpod"
	"github.com/tangram-gpu/tangram/pkg/plugin/mps/mpstest"
)

func basePodConfig(root string) DaemonPodConfig {
	return DaemonPodConfig{
		Prefix:          "tangram",
		Namespace:       "tangram-system",
		NodeName:        "node-1",
		NodeUID:         "node-uid-1",
		Image:           "registry.example/tangram/dra-kubelet-plugin:v1",
		ImagePullPolicy: corev1.PullIfNotPresent,
		Command:         []string{"/dra-kubelet-plugin", "mps-daemon"},
		Layout:          Layout{Root: root},
		VisibleDevices:  []string{"GPU-a", "GPU-b"},
		ControlBinary:   "nvidia-cuda-mps-control",
		// What the plugin's flag defaults to.
		PriorityClassName: "system-node-critical",
	}
}

func mountsOf(pod *corev1.Pod) map[string]string {
	hostPaths := map[string]string{}
	for _, v := range pod.Spec.Volumes {
		if v.HostPath != nil {
			hostPaths[v.Name] = v.HostPath.Path
		}
	}
	out := map[string]string{}
	for _, m := range pod.Spec.Containers[0].VolumeMounts {
		out[m.MountPath] = hostPaths[m.Name]
	}
	return out
}

func TestBuildMPSDaemonPod(t *testing.T) {
	long := strings.Repeat("n", 250)
	for _, tc := range []struct {
		name    string
		mutate  func(*DaemonPodConfig)
		wantErr string
		check   func(t *testing.T, pod *corev1.Pod)
	}{
		{
			name: "real GPUs, multi-user, driver root",
			mutate: func(c *DaemonPodConfig) {
				c.MultiUser = true
				c.DriverRoot = "/run/nvidia/driver"
				c.ImagePullSecrets = []string{"regcred"}
			},
			check: func(t *testing.T, pod *corev1.Pod) {
				c := pod.Spec.Containers[0]
				if got, want := strings.Join(c.Command, " "), "/dra-kubelet-plugin mps-daemon --mps-control-binary=nvidia-cuda-mps-control --mps-multi-user"; got != want {
					t.Errorf("command %q, want %q", got, want)
				}
				if got := mountsOf(pod)["/driver-root"]; got != "/run/nvidia/driver" {
					t.Errorf("/driver-root from %q, want the host driver root", got)
				}
				if ps := pod.Spec.ImagePullSecrets; len(ps) != 1 || ps[0].Name != "regcred" {
					t.Errorf("image pull secrets %v, want regcred", ps)
				}
				if envOf(c)["NVIDIA_DRIVER_ROOT"] != "/driver-root" {
					t.Errorf("NVIDIA_DRIVER_ROOT not set: %v", c.Env)
				}
			},
		},
		{
			name:   "simulated: no driver root, stand-in flag only",
			mutate: func(c *DaemonPodConfig) { c.Simulate = true; c.MultiUser = true },
			check: func(t *testing.T, pod *corev1.Pod) {
				c := pod.Spec.Containers[0]
				if got, want := strings.Join(c.Command, " "), "/dra-kubelet-plugin mps-daemon --simulate"; got != want {
					t.Errorf("command %q, want %q", got, want)
				}
				if _, ok := mountsOf(pod)["/driver-root"]; ok {
					t.Error("a simulated daemon must not mount a driver root")
				}
			},
		},
		{
			name: "common shape",
			check: func(t *testing.T, pod *corev1.Pod) {
				if pod.Name != "tangram-mps-node-1" || pod.Namespace != "tangram-system" {
					t.Errorf("pod %s/%s, want tangram-system/tangram-mps-node-1", pod.Namespace, pod.Name)
				}
				s := pod.Spec
				if s.NodeName != "node-1" || s.SchedulerName != "" {
					t.Errorf("nodeName %q schedulerName %q: want pinned to node-1 without a scheduler", s.NodeName, s.SchedulerName)
				}
				if len(s.Tolerations) != 1 || s.Tolerations[0].Operator != corev1.TolerationOpExists || s.Tolerations[0].Key != "" {
					t.Errorf("tolerations %v, want tolerate-all", s.Tolerations)
				}
				if s.PriorityClassName != "system-node-critical" || s.RestartPolicy != corev1.RestartPolicyAlways {
					t.Errorf("priority %q restart %q", s.PriorityClassName, s.RestartPolicy)
				}
				// The host's PIDs (the driver registers MPS clients by
				// host PID), and no other host namespace.
				if !s.HostPID || s.HostNetwork || s.HostIPC {
					t.Errorf("hostPID %v hostNetwork %v hostIPC %v, want only hostPID", s.HostPID, s.HostNetwork, s.HostIPC)
				}
				c := s.Containers[0]
				if c.SecurityContext == nil || c.SecurityContext.Privileged == nil || !*c.SecurityContext.Privileged {
					t.Error("container not privileged")
				}
				if c.Image != "registry.example/tangram/dra-kubelet-plugin:v1" || c.ImagePullPolicy != corev1.PullIfNotPresent {
					t.Errorf("image %q pull %q", c.Image, c.ImagePullPolicy)
				}
				want := map[string]string{"/r/pipe": "/r/pipe", "/r/log": "/r/log", "/dev/shm": "/r/shm"}
				got := mountsOf(pod)
				for path, host := range want {
					if got[path] != host {
						t.Errorf("mount %s from %q, want host path %q (all mounts %v)", path, got[path], host, got)
					}
				}
				env := envOf(c)
				if env["CUDA_MPS_PIPE_DIRECTORY"] != "/r/pipe" || env["CUDA_MPS_LOG_DIRECTORY"] != "/r/log" || env["CUDA_VISIBLE_DEVICES"] != "GPU-a,GPU-b" {
					t.Errorf("MPS environment %v", env)
				}
				if len(pod.OwnerReferences) != 1 || pod.OwnerReferences[0].Kind != "Node" || pod.OwnerReferences[0].Name != "node-1" ||
					pod.OwnerReferences[0].UID != "node-uid-1" || pod.OwnerReferences[0].BlockOwnerDeletion != nil {
					t.Errorf("owner references %+v, want the Node without blockOwnerDeletion", pod.OwnerReferences)
				}
				if pod.Labels[LabelComponent] != DaemonComponent || pod.Labels[LabelNode] != "node-1" {
					t.Errorf("labels %v", pod.Labels)
				}
			},
		},
		{
			name:   "long node name is cut to a valid, distinct name",
			mutate: func(c *DaemonPodConfig) { c.NodeName = long },
			check: func(t *testing.T, pod *corev1.Pod) {
				if len(pod.Name) > 253 || !strings.HasPrefix(pod.Name, "tangram-mps-nnn") {
					t.Errorf("name %q (%d characters)", pod.Name, len(pod.Name))
				}
				if other := DaemonPodName("tangram", long+"x"); other == pod.Name {
					t.Error("two long node names give the same pod name")
				}
				if v := pod.Labels[LabelNode]; len(v) > 63 {
					t.Errorf("node label %q longer than 63", v)
				}
			},
		},
		{
			name:   "no priority class",
			mutate: func(c *DaemonPodConfig) { c.PriorityClassName = "" },
			check: func(t *testing.T, pod *corev1.Pod) {
				if p := pod.Spec.PriorityClassName; p != "" {
					t.Errorf("priority class %q, want none", p)
				}
			},
		},
		{
			name:   "custom priority class",
			mutate: func(c *DaemonPodConfig) { c.PriorityClassName = "gpu-infra" },
			check: func(t *testing.T, pod *corev1.Pod) {
				if p := pod.Spec.PriorityClassName; p != "gpu-infra" {
					t.Errorf("priority class %q, want gpu-infra", p)
				}
			},
		},
		{name: "no image", mutate: func(c *DaemonPodConfig) { c.Image = "" }, wantErr: "image are required"},
		{name: "no command", mutate: func(c *DaemonPodConfig) { c.Command = nil }, wantErr: "command is required"},
		{name: "no MPS root", mutate: func(c *DaemonPodConfig) { c.Layout.Root = "" }, wantErr: "MPS root"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := basePodConfig("/r")
			if tc.mutate != nil {
				tc.mutate(&cfg)
			}
			pod, err := BuildDaemonPod(cfg)
			if checkError(t, err, tc.wantErr) {
				return
			}
			tc.check(t, pod)
		})
	}
}

// checkError fails t unless err contains wantErr, or is nil when wantErr is
// empty. It reports whether an error was wanted: the case is then done.
func checkError(t *testing.T, err error, wantErr string) bool {
	t.Helper()
	if wantErr == "" {
		if err != nil {
			t.Fatal(err)
		}
		return false
	}
	if err == nil || !strings.Contains(err.Error(), wantErr) {
		t.Fatalf("error %v, want one containing %q", err, wantErr)
	}
	return true
}

func shortRoot(t *testing.T) string { return mpstest.ShortRoot(t) }

// fakeKubelet runs a simulated daemon for every daemon pod created through
// the fake clientset, as the kubelet would start its container, and stops
// it when the pod is deleted.
type fakeKubelet struct {
	t       *testing.T
	pipeDir string
	mu      sync.Mutex
	stop    func()
	done    chan struct{}
	starts  int
}

func (k *fakeKubelet) start() {
	k.mu.Lock()
	defer k.mu.Unlock()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	k.stop, k.done = cancel, done
	k.starts++
	go func() {
		defer close(done)
		if err := inpod.RunSimulated(ctx, k.pipeDir); err != nil {
			k.t.Errorf("simulated daemon: %v", err)
		}
	}()
}

func (k *fakeKubelet) kill() {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.stop != nil {
		k.stop()
		<-k.done
		k.stop = nil
	}
}

func newFakeCluster(t *testing.T, root string, runDaemon bool) (*fake.Clientset, *fakeKubelet) {
	client := fake.NewClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-1", UID: "node-uid-1"}})
	k := &fakeKubelet{t: t, pipeDir: Layout{Root: root}.PipeDir()}
	t.Cleanup(k.kill)
	if runDaemon {
		client.PrependReactor("create", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
			k.start()
			return false, nil, nil
		})
		client.PrependReactor("delete", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
			k.kill()
			return false, nil, nil
		})
	}
	return client, k
}

func newTestPodDaemon(t *testing.T, client *fake.Clientset, root string) *PodDaemon {
	t.Helper()
	cfg := basePodConfig(root)
	cfg.NodeUID = "" // read from the Node
	cfg.Simulate = true
	d, err := NewPodDaemon(PodDaemonConfig{Client: client, Pod: cfg, StartTimeout: 3 * time.Second, StopTimeout: 300 * time.Millisecond, PollInterval: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// newPodDaemonOnFakeCluster returns a fake cluster, its fake kubelet (which
// runs a daemon for each pod created if runDaemon) and a PodDaemon on it.
func newPodDaemonOnFakeCluster(t *testing.T, runDaemon bool) (*fake.Clientset, *fakeKubelet, *PodDaemon) {
	t.Helper()
	root := shortRoot(t)
	client, kubelet := newFakeCluster(t, root, runDaemon)
	return client, kubelet, newTestPodDaemon(t, client, root)
}

func verbs(actions []k8stesting.Action) []string {
	var out []string
	for _, a := range actions {
		out = append(out, a.GetVerb()+" "+a.GetResource().Resource)
	}
	return out
}

// noAPICalls runs call, which must succeed without calling the API: what
// names it in the failure.
func noAPICalls(t *testing.T, client *fake.Clientset, what string, call func() error) {
	t.Helper()
	client.ClearActions()
	if err := call(); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	if a := verbs(client.Actions()); len(a) != 0 {
		t.Errorf("%s called the API: %v", what, a)
	}
}

func TestPodDaemonLifecycle(t *testing.T) {
	ctx := context.Background()
	client, kubelet, d := newPodDaemonOnFakeCluster(t, true)
	root := d.cfg.Pod.Layout.Root

	if err := d.Ensure(ctx); err != nil {
		t.Fatal(err)
	}
	pod, err := client.CoreV1().Pods("tangram-system").Get(ctx, "tangram-mps-node-1", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the daemon pod was not created: %v", err)
	}
	if pod.OwnerReferences[0].UID != "node-uid-1" {
		t.Errorf("owner %+v, want the Node's UID read from the API", pod.OwnerReferences)
	}
	for _, dir := range []string{"shm", "log"} {
		fi, err := os.Stat(filepath.Join(root, dir))
		if err != nil || fi.Mode()&os.ModeSticky == 0 || fi.Mode().Perm() != 0o777 {
			t.Errorf("%s: %v %v, want a sticky world-writable directory made by the plugin", dir, fi.Mode(), err)
		}
	}

	// A second share: the daemon answers, so no API call is made.
	noAPICalls(t, client, "a second Ensure", func() error { return d.Ensure(ctx) })

	// The plugin restarts: a new PodDaemon adopts the running pod.
	d.Close()
	d2 := newTestPodDaemon(t, client, root)
	client.ClearActions()
	if err := d2.Ensure(ctx); err != nil {
		t.Fatal(err)
	}
	if a := verbs(client.Actions()); len(a) != 1 || a[0] != "get pods" {
		t.Errorf("adopting made API calls %v, want one get", a)
	}
	if kubelet.starts != 1 {
		t.Errorf("daemon started %d times, want 1 (adopted, not recreated)", kubelet.starts)
	}

	// No share left: the pod is deleted; a second Stop asks nothing.
	if err := d2.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := client.CoreV1().Pods("tangram-system").Get(ctx, "tangram-mps-node-1", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("pod still there after Stop: %v", err)
	}
	noAPICalls(t, client, "Stop of a stopped daemon", func() error { return d2.Stop(ctx) })

	// The next share creates a new pod.
	if err := d2.Ensure(ctx); err != nil {
		t.Fatal(err)
	}
	if kubelet.starts != 2 {
		t.Errorf("daemon started %d times, want 2", kubelet.starts)
	}
}

func TestPodDaemonStopWithoutPod(t *testing.T) {
	_, _, d := newPodDaemonOnFakeCluster(t, true)
	if err := d.Stop(context.Background()); err != nil {
		t.Fatalf("Stop without a pod: %v", err)
	}
}

// While waiting for the daemon, a pod that cannot start without someone's
// help (failed, rejected by the kubelet, an image that cannot be pulled, a
// missing secret) ends the wait at once with its status; a pod that may
// still start is waited for until the start timeout.
func TestPodDaemonStartFailures(t *testing.T) {
	waiting := func(reason, message string) corev1.PodStatus {
		return corev1.PodStatus{Phase: corev1.PodPending, ContainerStatuses: []corev1.ContainerStatus{{
			Name:  mpsDaemonContainer,
			State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: reason, Message: message}},
		}}}
	}
	for _, tc := range []struct {
		name     string
		status   corev1.PodStatus
		wantFast bool
		wantErr  []string
	}{
		{name: "image pull back-off", status: waiting("ImagePullBackOff", "not found"), wantFast: true,
			wantErr: []string{"cannot start", "container mps-control-daemon: ImagePullBackOff", "phase Pending", "not found"}},
		{name: "image pull error", status: waiting("ErrImagePull", "unauthorized"), wantFast: true,
			wantErr: []string{"ErrImagePull", "unauthorized"}},
		{name: "missing secret or config map", status: waiting("CreateContainerConfigError", `secret "x" not found`), wantFast: true,
			wantErr: []string{"CreateContainerConfigError"}},
		{name: "invalid image name", status: waiting("InvalidImageName", "bad"), wantFast: true,
			wantErr: []string{"InvalidImageName"}},
		{
			name:     "rejected by the kubelet at admission",
			status:   corev1.PodStatus{Phase: corev1.PodFailed, Reason: "OutOfcpu", Message: "Node didn't have enough resource: cpu"},
			wantFast: true,
			wantErr:  []string{"phase Failed: OutOfcpu", "Node didn't have enough resource: cpu"},
		},
		{name: "failed without a reason", status: corev1.PodStatus{Phase: corev1.PodFailed}, wantFast: true,
			wantErr: []string{"cannot start (phase Failed)"}},
		{name: "container still being created: wait", status: waiting("ContainerCreating", ""),
			wantErr: []string{"did not answer", "phase Pending", "ContainerCreating", "control"}},
		{name: "crash loop: wait, it may start on a later attempt", status: waiting("CrashLoopBackOff", "back-off 10s"),
			wantErr: []string{"did not answer", "CrashLoopBackOff"}},
		{name: "not yet seen by the kubelet: wait", status: corev1.PodStatus{},
			wantErr: []string{"did not answer"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			client, _, d := newPodDaemonOnFakeCluster(t, false) // no daemon ever answers
			client.PrependReactor("create", "pods", func(action k8stesting.Action) (bool, runtime.Object, error) {
				pod := action.(k8stesting.CreateAction).GetObject().(*corev1.Pod)
				pod.Status = *tc.status.DeepCopy()
				return false, nil, nil
			})
			limit := 300 * time.Millisecond
			if tc.wantFast {
				limit = 30 * time.Second
			}
			d.cfg.StartTimeout = limit
			start := time.Now()
			err := d.Ensure(ctx)
			took := time.Since(start)
			if err == nil {
				t.Fatal("Ensure succeeded without a daemon")
			}
			for _, want := range append(tc.wantErr, "tangram-system/tangram-mps-node-1") {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not mention %q", err, want)
				}
			}
			if tc.wantFast && took > 5*time.Second {
				t.Errorf("gave up after %s, want at once (limit %s)", took, limit)
			}
			if !tc.wantFast && took < limit {
				t.Errorf("gave up after %s, before the limit %s, on a pod that may still start", took, limit)
			}
		})
	}
}

func TestPodDaemonStopTimeout(t *testing.T) {
	ctx := context.Background()
	client, _, d := newPodDaemonOnFakeCluster(t, true)
	if err := d.Ensure(ctx); err != nil {
		t.Fatal(err)
	}
	// A pod that a finalizer (or a dead kubelet) keeps: delete is accepted
	// but the pod stays.
	client.PrependReactor("delete", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, nil
	})
	err := d.Stop(ctx)
	if err == nil || !strings.Contains(err.Error(), "tangram-mps-node-1 still exists") {
		t.Fatalf("Stop: %v, want a timeout naming the pod", err)
	}
	// Not marked absent: the next Stop tries again.
	client.ClearActions()
	_ = d.Stop(ctx)
	if a := verbs(client.Actions()); len(a) == 0 || a[0] != "delete pods" {
		t.Errorf("retried Stop made %v, want a delete", a)
	}
}

func TestRunSimulatedControlDaemon(t *testing.T) {
	root := shortRoot(t)
	layout := Layout{Root: root}
	if err := os.MkdirAll(layout.PipeDir(), 0o755); err != nil {
		t.Fatal(err)
	}
	// A socket left by a previous container must not stop a new one.
	stale, err := net.Listen("unix", layout.ControlSocket())
	if err != nil {
		t.Fatal(err)
	}
	stale.(*net.UnixListener).SetUnlinkOnClose(false)
	stale.Close()
	if _, err := net.Dial("unix", layout.ControlSocket()); err == nil {
		t.Fatal("a stale socket answers")
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- inpod.RunSimulated(ctx, layout.PipeDir()) }()
	deadline := time.Now().Add(5 * time.Second)
	for {
		conn, err := net.Dial("unix", layout.ControlSocket())
		if err == nil {
			conn.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the simulated daemon does not answer: %v", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(layout.ControlSocket()); !os.IsNotExist(err) {
		t.Errorf("control socket left behind after stop: %v", err)
	}
}

func TestRunControlDaemon(t *testing.T) {
	for _, tc := range []struct {
		name     string
		binary   string
		cancel   bool
		wantErr  string
		wantQuit bool
	}{
		{name: "pod deleted: quit sent, clean exit", binary: fakeBinary, cancel: true, wantQuit: true},
		{name: "daemon cannot start: the container fails", binary: failingBinary, wantErr: "exited"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := shortRoot(t)
			layout := Layout{Root: root}
			if err := layout.create(); err != nil {
				t.Fatal(err)
			}
			t.Setenv("CUDA_MPS_PIPE_DIRECTORY", layout.PipeDir())
			t.Setenv("CUDA_VISIBLE_DEVICES", "GPU-a")
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			done := make(chan error, 1)
			go func() {
				done <- inpod.Run(ctx, inpod.Config{Binary: tc.binary, MultiUser: true, QuitTimeout: 5 * time.Second})
			}()
			if tc.cancel {
				pidFile := filepath.Join(layout.PipeDir(), "fake.pid")
				for i := 0; ; i++ {
					if _, err := os.Stat(pidFile); err == nil {
						break
					}
					if i > 500 {
						t.Fatal("the daemon did not start")
					}
					time.Sleep(10 * time.Millisecond)
				}
				cancel()
			}
			var err error
			select {
			case err = <-done:
			case <-time.After(10 * time.Second):
				t.Fatal("RunControlDaemon did not return")
			}
			if checkError(t, err, tc.wantErr) {
				return
			}
			log := strings.Join(fakeLog(t, root), " ")
			if !strings.Contains(log, "start GPU-a -M") {
				t.Errorf("fake log %q: want a start with -M and the pod's CUDA_VISIBLE_DEVICES", log)
			}
			if tc.wantQuit != strings.Contains(log, "quit") {
				t.Errorf("fake log %q: quit sent = %v, want %v", log, !tc.wantQuit, tc.wantQuit)
			}
		})
	}
}

func TestPipeDirFromEnv(t *testing.T) {
	for _, tc := range []struct {
		value string
		ok    bool
	}{{"/run/tangram/mps/pipe", true}, {"", false}, {"relative/pipe", false}} {
		t.Setenv("CUDA_MPS_PIPE_DIRECTORY", tc.value)
		if _, err := inpod.PipeDirFromEnv(); (err == nil) != tc.ok {
			t.Errorf("%q: error %v, want ok=%v", tc.value, err, tc.ok)
		}
	}
}

// A Stop records that no pod exists; a later Ensure that creates a pod and
// then fails (the daemon never answers, or the kubelet's deadline passes)
// must not leave that record behind, or the next Stop would skip the delete
// and the pod would run with no share to serve.
func TestPodDaemonStopAfterFailedEnsureDeletesPod(t *testing.T) {
	ctx := context.Background()
	client, _, d := newPodDaemonOnFakeCluster(t, false) // no kubelet: nothing ever answers
	d.cfg.StartTimeout = 50 * time.Millisecond
	if err := d.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if err := d.Ensure(ctx); err == nil {
		t.Fatal("Ensure succeeded without a daemon")
	}
	if _, err := client.CoreV1().Pods("tangram-system").Get(ctx, d.Name(), metav1.GetOptions{}); err != nil {
		t.Fatalf("the failed Ensure created no pod: %v", err)
	}
	if err := d.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := client.CoreV1().Pods("tangram-system").Get(ctx, d.Name(), metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("pod left running after the last share's Stop: %v", err)
	}
}

// logBuffer collects what the code under test logs through its context.
type logBuffer struct {
	mu  sync.Mutex
	buf strings.Builder
}

func (b *logBuffer) context() context.Context {
	return klog.NewContext(context.Background(), funcr.New(func(prefix, args string) {
		b.mu.Lock()
		defer b.mu.Unlock()
		b.buf.WriteString(prefix + " " + args + "\n")
	}, funcr.Options{}))
}

func (b *logBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// createOldPod creates the pod d would create, changed by mutate, under the
// UID old-uid, as an earlier plugin (or another node's) would have: the
// fake kubelet starts its daemon.
func createOldPod(ctx context.Context, t *testing.T, client *fake.Clientset, d *PodDaemon, mutate func(*corev1.Pod)) *corev1.Pod {
	t.Helper()
	old, err := BuildDaemonPod(d.cfg.Pod)
	if err != nil {
		t.Fatal(err)
	}
	old.UID = "old-uid"
	if mutate != nil {
		mutate(old)
	}
	if _, err := client.CoreV1().Pods(old.Namespace).Create(ctx, old, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	return old
}

// A pod of the daemon's name found at Ensure is adopted when it can serve
// this node's control socket. One that cannot (failed, or bound to another
// node) is replaced. One whose spec differs from ours is adopted while
// shares may use it (replacing it would kill their MPS server), with a
// warning naming both values; when the Manager says no share uses it, it is
// replaced.
func TestPodDaemonExistingPod(t *testing.T) {
	olderImage := func(p *corev1.Pod) { p.Spec.Containers[0].Image = "registry.example/tangram/dra-kubelet-plugin:v0" }
	for _, tc := range []struct {
		name string
		// mutate sets up the existing pod, a running copy of ours unless
		// changed; daemonGone says its daemon does not answer here.
		mutate     func(*corev1.Pod)
		daemonGone bool
		// unused calls EnsureUnused: the Manager knows no share uses the daemon.
		unused      bool
		wantReplace bool
		wantWarning bool
		// wantLog must all appear in the log; wantNoLog must not.
		wantLog   []string
		wantNoLog []string
	}{
		{
			name: "failed (evicted), shares may run: replaced",
			mutate: func(p *corev1.Pod) {
				p.Status.Phase, p.Status.Reason = corev1.PodFailed, "Evicted"
			},
			daemonGone:  true,
			wantReplace: true,
			wantLog:     []string{`"phase"="Failed"`},
		},
		{
			name:        "bound to another node, shares may run: replaced",
			mutate:      func(p *corev1.Pod) { p.Spec.NodeName = "node-2" },
			daemonGone:  true,
			wantReplace: true,
			wantLog:     []string{`"podNode"="node-2"`},
		},
		{
			name:        "older image, shares may run: adopted with a warning",
			mutate:      olderImage,
			wantWarning: true,
			wantLog:     []string{`"imagePod"="registry.example/tangram/dra-kubelet-plugin:v0"`, `"imagePlugin"="registry.example/tangram/dra-kubelet-plugin:v1"`},
			wantNoLog:   []string{"visibleDevicesPod", "multiUserPod"},
		},
		{
			name:        "other cards, shares may run: adopted with a warning",
			mutate:      func(p *corev1.Pod) { setEnv(&p.Spec.Containers[0], "CUDA_VISIBLE_DEVICES", "GPU-a") },
			wantWarning: true,
			wantLog:     []string{`"visibleDevicesPod"="GPU-a"`, `"visibleDevicesPlugin"="GPU-a,GPU-b"`},
		},
		{
			name:        "older image, no share: replaced",
			mutate:      olderImage,
			unused:      true,
			wantReplace: true,
			wantLog:     []string{"Replacing the MPS daemon pod: its spec differs", `"imagePod"="registry.example/tangram/dra-kubelet-plugin:v0"`},
		},
		{
			name: "multi-user flag differs, no share: replaced",
			mutate: func(p *corev1.Pod) {
				p.Spec.Containers[0].Command = append(p.Spec.Containers[0].Command, "--mps-multi-user")
			},
			unused:      true,
			wantReplace: true,
			wantLog:     []string{`"multiUserPod"="true"`, `"multiUserPlugin"="false"`},
		},
		{
			name:    "same spec, no share: adopted, no warning",
			unused:  true,
			wantLog: []string{"Adopting the MPS daemon pod already running"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var logs logBuffer
			ctx := logs.context()
			client, kubelet, d := newPodDaemonOnFakeCluster(t, true)
			old := createOldPod(ctx, t, client, d, func(p *corev1.Pod) {
				p.Status.Phase = corev1.PodRunning
				if tc.mutate != nil {
					tc.mutate(p)
				}
			})
			if tc.daemonGone {
				kubelet.kill()
			}
			ensure := d.Ensure
			if tc.unused {
				ensure = d.EnsureUnused
			}
			if err := ensure(ctx); err != nil {
				t.Fatal(err)
			}
			pod, err := client.CoreV1().Pods(old.Namespace).Get(ctx, old.Name, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			replaced := pod.UID != "old-uid"
			if replaced != tc.wantReplace {
				t.Errorf("pod replaced = %v (uid %s), want %v", replaced, pod.UID, tc.wantReplace)
			}
			wantStarts := 1
			if tc.wantReplace {
				wantStarts = 2
				if want, _ := BuildDaemonPod(d.cfg.Pod); !reflect.DeepEqual(pod.Spec, want.Spec) || pod.Status.Phase != "" {
					t.Errorf("replacement spec %+v phase %q, want a new pod of spec %+v", pod.Spec, pod.Status.Phase, want.Spec)
				}
			}
			if kubelet.starts != wantStarts {
				t.Errorf("daemon started %d times, want %d", kubelet.starts, wantStarts)
			}
			log := logs.String()
			if got := strings.Contains(log, "Replacing the MPS daemon pod"); got != tc.wantReplace {
				t.Errorf("log says replacing = %v, want %v:\n%s", got, tc.wantReplace, log)
			}
			if got := strings.Contains(log, "Warning: adopting"); got != tc.wantWarning {
				t.Errorf("log warns of adopting = %v, want %v:\n%s", got, tc.wantWarning, log)
			}
			for _, want := range tc.wantLog {
				if !strings.Contains(log, want) {
					t.Errorf("log does not contain %q:\n%s", want, log)
				}
			}
			for _, unwanted := range tc.wantNoLog {
				if strings.Contains(log, unwanted) {
					t.Errorf("log contains %q:\n%s", unwanted, log)
				}
			}
		})
	}
}

// An adopted pod that differs stays known while shares use it; once the
// Manager says none does, the next Ensure replaces it without waiting for
// the daemon to stop answering.
func TestPodDaemonReplacesAdoptedDifferingPodWhenUnused(t *testing.T) {
	ctx := context.Background()
	client, kubelet, d := newPodDaemonOnFakeCluster(t, true)
	old := createOldPod(ctx, t, client, d, func(p *corev1.Pod) {
		p.Spec.Containers[0].Image = "registry.example/tangram/dra-kubelet-plugin:v0"
	})
	if err := d.Ensure(ctx); err != nil {
		t.Fatal(err)
	}
	noAPICalls(t, client, "Ensure of an adopted daemon in use", func() error { return d.Ensure(ctx) })
	if err := d.EnsureUnused(ctx); err != nil {
		t.Fatal(err)
	}
	pod, err := client.CoreV1().Pods(old.Namespace).Get(ctx, old.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if pod.UID == "old-uid" || pod.Spec.Containers[0].Image != d.cfg.Pod.Image || kubelet.starts != 2 {
		t.Errorf("pod uid %s image %s starts %d, want a new pod of our image", pod.UID, pod.Spec.Containers[0].Image, kubelet.starts)
	}
}

func setEnv(c *corev1.Container, name, value string) {
	for i := range c.Env {
		if c.Env[i].Name == name {
			c.Env[i].Value = value
		}
	}
}

// A daemon pod an older plugin created outside the host's PID namespace
// (its clients' memory limits unenforced) is replaced once unused.
func TestPodDaemonReplacesAdoptedPodWithoutHostPIDWhenUnused(t *testing.T) {
	ctx := context.Background()
	client, kubelet, d := newPodDaemonOnFakeCluster(t, true)
	old := createOldPod(ctx, t, client, d, func(p *corev1.Pod) { p.Spec.HostPID = false })
	if err := d.EnsureUnused(ctx); err != nil {
		t.Fatal(err)
	}
	pod, err := client.CoreV1().Pods(old.Namespace).Get(ctx, old.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if pod.UID == "old-uid" || !pod.Spec.HostPID || kubelet.starts != 2 {
		t.Errorf("pod uid %s hostPID %v starts %d, want a new pod in the host's PID namespace", pod.UID, pod.Spec.HostPID, kubelet.starts)
	}
}
