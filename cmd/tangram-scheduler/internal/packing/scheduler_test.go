package packing

import (
	"context"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/events"
	"k8s.io/kubernetes/pkg/scheduler"
	"k8s.io/kubernetes/pkg/scheduler/apis/config"
	"k8s.io/kubernetes/pkg/scheduler/apis/config/latest"
	frameworkruntime "k8s.io/kubernetes/pkg/scheduler/framework/runtime"
	"k8s.io/kubernetes/pkg/scheduler/profile"

	"github.com/tangram-gpu/tangram/pkg/device"
	"github.com/tangram-gpu/tangram/pkg/dra"
)

// TestSchedulerEndToEnd runs the real kube-scheduler 1.37 (default plugins,
// the real DRA plugin and allocator) against a fake API server with two
// profiles: the stock default-scheduler and "tangram" with TangramPacking.
// Node a already runs a pod holding half of gpu-0 and 16 of its 32 CPUs;
// node b is empty. A pod with a half-card claim is bound to b by the stock
// profile (it spreads by CPU) and to a by the tangram profile (it completes
// the used card and keeps b's cards whole).
func TestSchedulerEndToEnd(t *testing.T) {
	for _, tc := range []struct {
		schedulerName string
		wantNode      string
	}{
		{"default-scheduler", "b"},
		{"tangram", "a"},
	} {
		t.Run(tc.schedulerName, func(t *testing.T) {
			if got := scheduleIncoming(t, tc.schedulerName); got != tc.wantNode {
				t.Errorf("%s bound the pod to node %q, want %q", tc.schedulerName, got, tc.wantNode)
			}
		})
	}
}

func scheduleIncoming(t *testing.T, schedulerName string) string {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	nodeA, sliceA := gpuNode(t, "a")
	nodeB, sliceB := gpuNode(t, "b")
	harness := &dra.Node{Name: "a", Slices: []*resourceapi.ResourceSlice{sliceA}, Classes: device.DeviceClasses()}
	running, err := harness.Allocate(ctx, dra.Claim("running", nil, dra.SharedGPU("gpu", resource.MustParse("8Gi"), resource.MustParse("50"))))
	if err != nil {
		t.Fatal(err)
	}
	runningPod := podWithClaim("running", "16", "running")
	runningPod.Spec.NodeName = "a"
	runningPod.Status.Phase = v1.PodRunning
	running.Status.ReservedFor = []resourceapi.ResourceClaimConsumerReference{{Resource: "pods", Name: runningPod.Name, UID: runningPod.UID}}
	incoming := dra.Claim("incoming", nil, dra.SharedGPU("gpu", resource.MustParse("8Gi"), resource.MustParse("50")))
	pod := podWithClaim("incoming", "2", "incoming")
	pod.Spec.SchedulerName = schedulerName

	objects := []runtime.Object{nodeA, nodeB, sliceA, sliceB, running, incoming, runningPod, pod}
	for _, c := range device.DeviceClasses() {
		objects = append(objects, c)
	}
	client := fake.NewClientset(objects...)
	bound := make(chan string, 1)
	client.PrependReactor("create", "pods", func(action k8stesting.Action) (bool, runtime.Object, error) {
		if action.GetSubresource() != "binding" {
			return false, nil, nil
		}
		b := action.(k8stesting.CreateAction).GetObject().(*v1.Binding)
		select {
		case bound <- b.Target.Name:
		default:
		}
		return true, b, nil
	})

	cfg, err := latest.Default()
	if err != nil {
		t.Fatal(err)
	}
	tangram := cfg.Profiles[0].DeepCopy()
	tangram.SchedulerName = "tangram"
	tangram.Plugins.PreScore.Enabled = append(tangram.Plugins.PreScore.Enabled, config.Plugin{Name: Name})
	tangram.Plugins.Reserve.Enabled = append(tangram.Plugins.Reserve.Enabled, config.Plugin{Name: Name})
	tangram.Plugins.Score.Enabled = append(tangram.Plugins.Score.Enabled, config.Plugin{Name: Name, Weight: 5})
	tangram.PluginConfig = append(tangram.PluginConfig, config.PluginConfig{Name: Name, Args: &runtime.Unknown{Raw: []byte(`{"policy":"tangram"}`)}})

	informers := scheduler.NewInformerFactory(client, 0, nil)
	broadcaster := events.NewBroadcaster(&events.EventSinkImpl{Interface: client.EventsV1()})
	defer broadcaster.Shutdown()
	sched, err := scheduler.New(ctx, client, informers, nil, profile.NewRecorderFactory(broadcaster),
		scheduler.WithProfiles(cfg.Profiles[0], *tangram),
		scheduler.WithFrameworkOutOfTreeRegistry(frameworkruntime.Registry{Name: New}))
	if err != nil {
		t.Fatalf("creating the scheduler: %v", err)
	}
	informers.Start(ctx.Done())
	informers.WaitForCacheSync(ctx.Done())
	if err := sched.WaitForHandlersSync(ctx); err != nil {
		t.Fatal(err)
	}
	go sched.Run(ctx)
	select {
	case node := <-bound:
		return node
	case <-ctx.Done():
		t.Fatal("the pod was not bound within 30s")
		return ""
	}
}
