package daemon

import (
	"context"
	"reflect"
	"strings"
	"sync"
	"testing"

	"github.com/go-logr/logr/funcr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/klog/v2"
)

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
	old, err := BuildPod(d.cfg.Pod)
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
				if want, _ := BuildPod(d.cfg.Pod); !reflect.DeepEqual(pod.Spec, want.Spec) || pod.Status.Phase != "" {
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
