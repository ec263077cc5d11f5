package daemon

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/tangram-gpu/tangram/pkg/plugin/mps/inpod"
	"github.com/tangram-gpu/tangram/pkg/plugin/mps/mpstest"
)

// checkError fails t unless err contains wantErr, or is nil when wantErr is
// empty. It reports whether an error was wanted: the case is then done.

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
	root := mpstest.ShortRoot(t)
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
