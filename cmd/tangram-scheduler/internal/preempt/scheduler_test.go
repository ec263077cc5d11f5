package preempt

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/events"
	"k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/testutil"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/kubernetes/pkg/scheduler"
	"k8s.io/kubernetes/pkg/scheduler/apis/config"
	"k8s.io/kubernetes/pkg/scheduler/apis/config/latest"
	frameworkruntime "k8s.io/kubernetes/pkg/scheduler/framework/runtime"
	"k8s.io/kubernetes/pkg/scheduler/profile"
	"k8s.io/utils/ptr"

	"github.com/tangram-gpu/tangram/pkg/device"
	"github.com/tangram-gpu/tangram/pkg/dra"
	"github.com/tangram-gpu/tangram/pkg/gpu"
	"github.com/tangram-gpu/tangram/pkg/resourceslices"
)

// TestSchedulerPreemptsForGPUs runs the real kube-scheduler 1.37 (default
// plugins, the real DRA plugin and allocator) against a fake API server.
// Node a's eight cards are each held by a low-priority pod; low-7 is the
// newest and low-3 has the lowest priority. A high-priority pod asks for a
// whole card or a 40 GiB share. The stock profile leaves it unschedulable
// without evicting anyone; the tangram profile (DefaultPreemption, then
// TangramPreemption) evicts exactly low-3 through the Eviction API and
// nominates node a, and once the victim and its claim are gone (what the
// kubelet and the resourceclaim controller do) binds the pod to a.
func TestSchedulerPreemptsForGPUs(t *testing.T) {
	whole := dra.WholeGPUs("gpu", 1)
	share := dra.SharedGPU("gpu", resource.MustParse("40Gi"), resource.Quantity{})
	for _, tc := range []struct {
		name          string
		schedulerName string
		request       resourceapi.DeviceRequest
		wantEvicted   []string
		wantBound     bool
	}{
		{"stock scheduler, whole card", "default-scheduler", whole, nil, false},
		{"stock scheduler, 40Gi share", "default-scheduler", share, nil, false},
		{"tangram, whole card", "tangram", whole, []string{"low-3"}, true},
		{"tangram, 40Gi share", "tangram", share, []string{"low-3"}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			evictedBefore := counter(t, victims.WithLabelValues(kindPod, reasonWholeCard))
			preemptionsBefore := counter(t, preemptions.WithLabelValues(kindPod, resultEvicted))
			got := runPreemption(t, tc.schedulerName, tc.request)
			if fmt.Sprint(got.evicted) != fmt.Sprint(tc.wantEvicted) {
				t.Errorf("evicted %v, want %v", got.evicted, tc.wantEvicted)
			}
			if tc.wantBound && got.boundTo != "a" {
				t.Errorf("the pod was bound to %q, want a", got.boundTo)
			}
			if !tc.wantBound && got.boundTo != "" {
				t.Errorf("the pod was bound to %q, want it left pending", got.boundTo)
			}
			if tc.wantBound && got.nominated != "a" {
				t.Errorf("the pod was nominated to %q, want a", got.nominated)
			}
			if d := counter(t, victims.WithLabelValues(kindPod, reasonWholeCard)) - evictedBefore; d != float64(len(tc.wantEvicted)) {
				t.Errorf("tangram_scheduler_preemption_victims_total{kind=pod,reason=whole_card} grew by %v, want %d", d, len(tc.wantEvicted))
			}
			wantPreemptions := 0.0
			if len(tc.wantEvicted) > 0 {
				wantPreemptions = 1
			}
			if d := counter(t, preemptions.WithLabelValues(kindPod, resultEvicted)) - preemptionsBefore; d != wantPreemptions {
				t.Errorf("tangram_scheduler_preemptions_total{kind=pod,result=evicted} grew by %v, want %v", d, wantPreemptions)
			}
			var wantEvents []string
			if tc.wantBound {
				wantEvents = []string{
					"high Preempting: Evicting 1 lower-priority pod(s) on node a for claim(s) default/high: default/low-3 (priority 5, claim default/low-3: gpu-3)",
					"low-3 Preempted: Preempted by pod default/high (priority 1000) on node a to free GPU devices: claim default/low-3: gpu-3",
				}
			}
			if !slices.Equal(got.events, wantEvents) {
				t.Errorf("events:\n%s\nwant:\n%s", strings.Join(got.events, "\n"), strings.Join(wantEvents, "\n"))
			}
		})
	}
}

type outcome struct {
	evicted   []string
	nominated string
	boundTo   string
	// events are the preemption events, "regarding reason: note", sorted.
	events []string
}

func counter(t *testing.T, c metrics.CounterMetric) float64 {
	t.Helper()
	v, err := testutil.GetCounterMetricValue(c)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// preemptionEvents waits until the events of the victims (Preempted) and
// the preemptor (Preempting) have reached the API server, want of them,
// and returns them as "regarding reason: note", sorted.
func preemptionEvents(ctx context.Context, t *testing.T, client *fake.Clientset, want int) []string {
	for {
		list, err := client.EventsV1().Events("default").List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, e := range list.Items {
			if e.Reason == "Preempted" || e.Reason == "Preempting" {
				got = append(got, fmt.Sprintf("%s %s: %s", e.Regarding.Name, e.Reason, e.Note))
			}
		}
		slices.Sort(got)
		if len(got) >= want {
			return got
		}
		select {
		case <-ctx.Done():
			return got
		case <-time.After(20 * time.Millisecond):
		}
	}
}

func runPreemption(t *testing.T, schedulerName string, request resourceapi.DeviceRequest) outcome {
	_, tctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithTimeout(tctx, 30*time.Second)
	defer cancel()

	node, slice := eightCardNode(t, "a")
	harness := &dra.Node{Name: "a", Slices: []*resourceapi.ResourceSlice{slice}, Classes: device.DeviceClasses()}
	objects := []runtime.Object{node, slice}
	for _, c := range device.DeviceClasses() {
		objects = append(objects, c)
	}
	for i := range 8 {
		name := fmt.Sprintf("low-%d", i)
		claim, err := harness.Allocate(ctx, dra.Claim(name, nil, dra.WholeGPUs("gpu", 1)))
		if err != nil {
			t.Fatal(err)
		}
		pod := podWithClaim(name, name, 10)
		if i == 3 {
			pod.Spec.Priority = ptr.To[int32](5)
		}
		pod.CreationTimestamp = metav1.NewTime(time.Date(2026, 1, 1, 0, i, 0, 0, time.UTC))
		pod.Spec.NodeName = "a"
		pod.Status.Phase = v1.PodRunning
		claim.Status.ReservedFor = []resourceapi.ResourceClaimConsumerReference{{Resource: "pods", Name: name, UID: pod.UID}}
		objects = append(objects, claim, pod)
	}
	incoming := dra.Claim("high", nil, request)
	pod := podWithClaim("high", "high", 1000)
	pod.Spec.SchedulerName = schedulerName
	objects = append(objects, incoming, pod)

	client := fake.NewClientset(objects...)
	var mu sync.Mutex
	var out outcome
	bound := make(chan struct{})
	failed := make(chan struct{}, 1)
	client.PrependReactor("create", "pods", func(action k8stesting.Action) (bool, runtime.Object, error) {
		switch action.GetSubresource() {
		case "binding":
			b := action.(k8stesting.CreateAction).GetObject().(*v1.Binding)
			mu.Lock()
			if out.boundTo == "" {
				out.boundTo = b.Target.Name
				close(bound)
			}
			mu.Unlock()
			return true, b, nil
		case "eviction":
			victim := action.(k8stesting.CreateAction).GetObject().(metav1.Object).GetName()
			mu.Lock()
			out.evicted = append(out.evicted, victim)
			mu.Unlock()
			// The kubelet stops the pod; the resourceclaim controller
			// then frees its claim.
			go func() {
				_ = client.CoreV1().Pods("default").Delete(ctx, victim, metav1.DeleteOptions{})
				_ = client.ResourceV1().ResourceClaims("default").Delete(ctx, victim, metav1.DeleteOptions{})
			}()
			return true, nil, nil
		}
		return false, nil, nil
	})
	// The scheduler records its verdict in the pod's status: a nominated
	// node after preemption, PodScheduled=False when it gave up.
	client.PrependReactor("patch", "pods", func(action k8stesting.Action) (bool, runtime.Object, error) {
		if action.GetSubresource() != "status" {
			return false, nil, nil
		}
		patch := string(action.(k8stesting.PatchAction).GetPatch())
		mu.Lock()
		if out.nominated == "" && strings.Contains(patch, `"nominatedNodeName":"a"`) {
			out.nominated = "a"
		}
		mu.Unlock()
		if strings.Contains(patch, `"reason":"Unschedulable"`) {
			select {
			case failed <- struct{}{}:
			default:
			}
		}
		return false, nil, nil
	})

	startTangram(t, ctx, client)

	if schedulerName == "tangram" {
		select {
		case <-bound:
			out.events = preemptionEvents(ctx, t, client, 2)
		case <-ctx.Done():
			t.Error("the pod was not bound within 30s")
		}
	} else {
		// PostFilter runs before the scheduler records the failure, so
		// anything it evicted is recorded by now.
		select {
		case <-failed:
		case <-ctx.Done():
			t.Error("the stock scheduler did not report the pod unschedulable within 30s")
		}
	}
	mu.Lock()
	defer mu.Unlock()
	return out
}

// TestSchedulerPreemptsUnderContention runs the real kube-scheduler with
// the tangram profile when several high-priority pods want node a's cards,
// all eight held by low-priority pods (low-3 has the lowest priority, then
// the newest first). Evicted pods stay terminating for a while (the kubelet
// stopping them) before they and their claims are gone. Every preemptor
// must end up bound, and no more pods may be evicted than the preemptors
// need together: a pod whose expected devices went to another preemptor
// preempts again, and devices of a terminating victim are counted for one
// preemptor only.
func TestSchedulerPreemptsUnderContention(t *testing.T) {
	whole := dra.WholeGPUs("gpu", 1)
	share := func(gi string) resourceapi.DeviceRequest {
		return dra.SharedGPU("gpu", resource.MustParse(gi), resource.Quantity{})
	}
	type wave = []incoming
	for _, tc := range []struct {
		name  string
		waves []wave
		// holdVictims keeps every victim terminating until the last wave
		// has been nominated.
		holdVictims bool
		wantEvicted int
	}{
		{"a whole card and a 40Gi share at once", []wave{{{"whole", whole, 1000}, {"share", share("40Gi"), 1000}}}, false, 2},
		{"two whole cards at once", []wave{{{"first", whole, 1000}, {"second", whole, 1000}}}, false, 2},
		{"two 40Gi shares fit one freed card", []wave{{{"first", share("40Gi"), 1000}, {"second", share("40Gi"), 1000}}}, true, 1},
		{"a 40Gi and a 60Gi share need two cards", []wave{{{"small", share("40Gi"), 1000}, {"large", share("60Gi"), 1000}}}, false, 2},
		{"a higher-priority pod arrives while a lower one is nominated",
			[]wave{{{"first", whole, 1000}}, {{"urgent", whole, 2000}}}, true, 2},
		{"a higher-priority share arrives while a whole card is nominated",
			[]wave{{{"first", whole, 1000}}, {{"urgent", share("60Gi"), 2000}}}, true, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := runContention(t, tc.waves, tc.holdVictims)
			if len(got.evicted) != tc.wantEvicted {
				t.Errorf("evicted %v, want %d pods", got.evicted, tc.wantEvicted)
			}
			for _, w := range tc.waves {
				for _, in := range w {
					if got.bound[in.name] != "a" {
						t.Errorf("pod %s was bound to %q, want a", in.name, got.bound[in.name])
					}
				}
			}
			if slices.ContainsFunc(got.evicted, func(v string) bool { return got.evictedTwice[v] }) {
				t.Errorf("a victim was evicted twice: %v", got.evicted)
			}
		})
	}
}

type incoming struct {
	name     string
	request  resourceapi.DeviceRequest
	priority int32
}

type contention struct {
	evicted      []string
	evictedTwice map[string]bool
	bound        map[string]string
}

// runContention creates the waves of pods one after the other, each once
// the previous wave's pods are all nominated or bound, and waits until
// every pod is bound (at most 30s).
func runContention(t *testing.T, waves [][]incoming, holdVictims bool) contention {
	_, tctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithTimeout(tctx, 30*time.Second)
	defer cancel()

	objects := lowPriorityNode(t, ctx)
	client := fake.NewClientset(objects...)
	var mu sync.Mutex
	out := contention{evictedTwice: map[string]bool{}, bound: map[string]string{}}
	placed := map[string]bool{} // nominated or bound
	changed := make(chan struct{}, 100)
	notify := func() {
		select {
		case changed <- struct{}{}:
		default:
		}
	}
	release := make(chan struct{})
	if !holdVictims {
		close(release)
	}
	client.PrependReactor("create", "pods", func(action k8stesting.Action) (bool, runtime.Object, error) {
		switch action.GetSubresource() {
		case "binding":
			b := action.(k8stesting.CreateAction).GetObject().(*v1.Binding)
			mu.Lock()
			out.bound[b.Name] = b.Target.Name
			placed[b.Name] = true
			mu.Unlock()
			notify()
			return true, b, nil
		case "eviction":
			victim := action.(k8stesting.CreateAction).GetObject().(metav1.Object).GetName()
			mu.Lock()
			if slices.Contains(out.evicted, victim) {
				out.evictedTwice[victim] = true
			} else {
				out.evicted = append(out.evicted, victim)
			}
			mu.Unlock()
			// The pod turns terminating at once; the kubelet stops it
			// later (once released), then the resourceclaim controller
			// frees its claim.
			// (Through the tracker: the client's lock is held here.)
			podsResource := v1.SchemeGroupVersion.WithResource("pods")
			obj, err := client.Tracker().Get(podsResource, "default", victim)
			if err != nil {
				return true, nil, err
			}
			pod := obj.(*v1.Pod).DeepCopy()
			pod.DeletionTimestamp = ptr.To(metav1.Now())
			if err := client.Tracker().Update(podsResource, pod, "default"); err != nil {
				return true, nil, err
			}
			go func() {
				select {
				case <-release:
				case <-ctx.Done():
					return
				}
				time.Sleep(100 * time.Millisecond)
				_ = client.CoreV1().Pods("default").Delete(ctx, victim, metav1.DeleteOptions{})
				_ = client.ResourceV1().ResourceClaims("default").Delete(ctx, victim, metav1.DeleteOptions{})
			}()
			return true, nil, nil
		}
		return false, nil, nil
	})
	client.PrependReactor("patch", "pods", func(action k8stesting.Action) (bool, runtime.Object, error) {
		if action.GetSubresource() != "status" {
			return false, nil, nil
		}
		patch := string(action.(k8stesting.PatchAction).GetPatch())
		if strings.Contains(patch, `"nominatedNodeName":"a"`) {
			mu.Lock()
			placed[action.(k8stesting.PatchAction).GetName()] = true
			mu.Unlock()
			notify()
		}
		return false, nil, nil
	})
	startTangram(t, ctx, client)

	waitFor := func(what string, names []string) bool {
		for {
			mu.Lock()
			done := !slices.ContainsFunc(names, func(n string) bool { return !placed[n] })
			mu.Unlock()
			if done {
				return true
			}
			select {
			case <-changed:
			case <-ctx.Done():
				t.Errorf("%s: not every pod of %v was nominated or bound within 30s", what, names)
				return false
			}
		}
	}
	var all []string
	for i, w := range waves {
		var names []string
		for _, in := range w {
			c := dra.Claim(in.name, nil, in.request)
			pod := podWithClaim(in.name, in.name, in.priority)
			pod.Spec.SchedulerName = "tangram"
			if _, err := client.ResourceV1().ResourceClaims("default").Create(ctx, c, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			if _, err := client.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			names = append(names, in.name)
		}
		all = append(all, names...)
		if !waitFor(fmt.Sprintf("wave %d", i), names) {
			break
		}
	}
	if holdVictims {
		close(release)
	}
	for {
		mu.Lock()
		done := !slices.ContainsFunc(all, func(n string) bool { return out.bound[n] == "" })
		mu.Unlock()
		if done {
			break
		}
		select {
		case <-changed:
		case <-ctx.Done():
			t.Errorf("not every pod of %v was bound within 30s", all)
			mu.Lock()
			defer mu.Unlock()
			return out
		}
	}
	mu.Lock()
	defer mu.Unlock()
	return out
}

// lowPriorityNode is node a with its eight cards each held by a running
// low-priority pod (priority 10; low-3 has 5; low-7 is the newest).
func lowPriorityNode(t *testing.T, ctx context.Context) []runtime.Object {
	t.Helper()
	node, slice := eightCardNode(t, "a")
	harness := &dra.Node{Name: "a", Slices: []*resourceapi.ResourceSlice{slice}, Classes: device.DeviceClasses()}
	objects := []runtime.Object{node, slice}
	for _, c := range device.DeviceClasses() {
		objects = append(objects, c)
	}
	for i := range 8 {
		name := fmt.Sprintf("low-%d", i)
		claim, err := harness.Allocate(ctx, dra.Claim(name, nil, dra.WholeGPUs("gpu", 1)))
		if err != nil {
			t.Fatal(err)
		}
		pod := podWithClaim(name, name, 10)
		if i == 3 {
			pod.Spec.Priority = ptr.To[int32](5)
		}
		pod.CreationTimestamp = metav1.NewTime(time.Date(2026, 1, 1, 0, i, 0, 0, time.UTC))
		pod.Spec.NodeName = "a"
		pod.Status.Phase = v1.PodRunning
		claim.Status.ReservedFor = []resourceapi.ResourceClaimConsumerReference{{Resource: "pods", Name: name, UID: pod.UID}}
		objects = append(objects, claim, pod)
	}
	return objects
}

// startTangram runs kube-scheduler with the stock profile and the tangram
// profile as the chart configures it (TangramPreemption after
// DefaultPreemption, and as the pod-group post-filter) until ctx ends; the
// events go to the client.
func startTangram(t *testing.T, ctx context.Context, client *fake.Clientset) {
	t.Helper()
	cfg, err := latest.Default()
	if err != nil {
		t.Fatal(err)
	}
	tangram := cfg.Profiles[0].DeepCopy()
	tangram.SchedulerName = "tangram"
	tangram.Plugins.PostFilter.Enabled = append(tangram.Plugins.PostFilter.Enabled, config.Plugin{Name: Name})
	tangram.Plugins.PodGroupPostFilter.Enabled = append(tangram.Plugins.PodGroupPostFilter.Enabled, config.Plugin{Name: Name})
	informers := scheduler.NewInformerFactory(client, 0, nil)
	broadcaster := events.NewBroadcaster(&events.EventSinkImpl{Interface: client.EventsV1()})
	broadcaster.StartRecordingToSink(ctx.Done())
	t.Cleanup(broadcaster.Shutdown)
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
}

// eightCardNode is a node with eight shareable 80 GiB H100s.
func eightCardNode(t *testing.T, name string) (*v1.Node, *resourceapi.ResourceSlice) {
	t.Helper()
	var gpus []gpu.GPU
	for i := range 8 {
		gpus = append(gpus, gpu.GPU{Index: i, Minor: i, UUID: fmt.Sprintf("GPU-%s-%d", name, i), ProductName: "H100", MemoryBytes: 80 << 30})
	}
	devices, err := resourceslices.Devices(gpus, resourceslices.Options{NodeName: name, Sharing: true})
	if err != nil {
		t.Fatal(err)
	}
	node := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID(name)}, Status: v1.NodeStatus{Allocatable: v1.ResourceList{
		v1.ResourceCPU: resource.MustParse("64"), v1.ResourceMemory: resource.MustParse("512Gi"), v1.ResourcePods: resource.MustParse("110"),
	}}}
	slice := &resourceapi.ResourceSlice{ObjectMeta: metav1.ObjectMeta{Name: name + "-gpu", UID: types.UID(name + "-gpu")}, Spec: resourceapi.ResourceSliceSpec{
		Driver: "gpu.tangram.dev", NodeName: ptr.To(name), Devices: devices,
		Pool: resourceapi.ResourcePool{Name: name, ResourceSliceCount: 1},
	}}
	return node, slice
}

func podWithClaim(name, claim string, priority int32) *v1.Pod {
	return &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", UID: types.UID(name)},
		Spec: v1.PodSpec{
			Priority:       ptr.To(priority),
			Containers:     []v1.Container{{Name: "c", Resources: v1.ResourceRequirements{Requests: v1.ResourceList{v1.ResourceCPU: resource.MustParse("1"), v1.ResourceMemory: resource.MustParse("1Gi")}}}},
			ResourceClaims: []v1.PodResourceClaim{{Name: "gpu", ResourceClaimName: ptr.To(claim)}},
		},
	}
}
