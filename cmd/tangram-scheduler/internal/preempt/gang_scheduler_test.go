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
	schedulingv1beta1 "k8s.io/api/scheduling/v1beta1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	featuregatetesting "k8s.io/component-base/featuregate/testing"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/kubernetes/pkg/features"
	"k8s.io/utils/ptr"

	tangramv1 "github.com/tangram-gpu/tangram/api/tangram/v1alpha1"
	"github.com/tangram-gpu/tangram/pkg/controller/gang"
	"github.com/tangram-gpu/tangram/pkg/device"
	"github.com/tangram-gpu/tangram/pkg/dra"
	"github.com/tangram-gpu/tangram/pkg/gpu/fakegpu"
	"github.com/tangram-gpu/tangram/pkg/resourceslices"
)

// TestSchedulerPreemptsForGangs runs the real kube-scheduler 1.37 with
// workload-aware scheduling (GenericWorkload) and the tangram profile
// (TangramPreemption also in podGroupPostFilter). Node a is a
// pcie-a100-pairs node (NVLink pairs 0-1, 2-3, 4-5, 6-7), each card held by
// a low-priority pod; low-0 and low-1 have the lowest priority. A PodGroup
// of high priority whose members each ask for two NVLinked cards evicts
// exactly the pods of whole NVLink pairs and all members bind; a gang that
// could not fit even with every lower-priority pod gone evicts nobody. The
// PodGroup is written by hand, or made by the dra-controller for a GpuGang
// with spec.priorityClassName (gang.DesiredWorkload and DesiredPodGroup,
// with the Workload it refers to).
func TestSchedulerPreemptsForGangs(t *testing.T) {
	featuregatetesting.SetFeatureGateDuringTest(t, utilfeature.DefaultFeatureGate, features.GenericWorkload, true)
	for _, tc := range []struct {
		name        string
		members     int
		priorities  []int32 // of low-0..low-7
		wantEvicted []string
		podGroup    func(members int) []runtime.Object
	}{
		{"two members, two NVLink pairs", 2, []int32{5, 5, 10, 10, 10, 10, 10, 10}, []string{"low-0", "low-1", "low-6", "low-7"}, handWrittenPodGroup},
		{"three members, two pairs of lower priority: nobody evicted", 3, []int32{5, 5, 10, 10, 2000, 2000, 2000, 2000}, nil, handWrittenPodGroup},
		{"GpuGang with a PriorityClass: its PodGroup is preempted for", 2, []int32{5, 5, 10, 10, 10, 10, 10, 10}, []string{"low-0", "low-1", "low-6", "low-7"}, gpuGangPodGroup},
	} {
		t.Run(tc.name, func(t *testing.T) {
			victimsBefore := counter(t, victims.WithLabelValues(kindGang, reasonWholeCard))
			notHelpfulBefore := counter(t, preemptions.WithLabelValues(kindGang, resultNotHelpful))
			got := runGang(t, tc.members, tc.priorities, tc.wantEvicted != nil, tc.podGroup(tc.members))
			if d := counter(t, victims.WithLabelValues(kindGang, reasonWholeCard)) - victimsBefore; d != float64(len(tc.wantEvicted)) {
				t.Errorf("tangram_scheduler_preemption_victims_total{kind=gang,reason=whole_card} grew by %v, want %d", d, len(tc.wantEvicted))
			}
			if d := counter(t, preemptions.WithLabelValues(kindGang, resultNotHelpful)) - notHelpfulBefore; (d > 0) != (tc.wantEvicted == nil) {
				t.Errorf("tangram_scheduler_preemptions_total{kind=gang,result=not_helpful} grew by %v; want growth only for the gang that cannot fit", d)
			}
			slices.Sort(got.evicted)
			if fmt.Sprint(got.evicted) != fmt.Sprint(tc.wantEvicted) {
				t.Errorf("evicted %v, want %v", got.evicted, tc.wantEvicted)
			}
			for i := range tc.members {
				name := fmt.Sprintf("train-%d", i)
				if want := map[bool]string{true: "a", false: ""}[tc.wantEvicted != nil]; got.bound[name] != want {
					t.Errorf("member %s bound to %q, want %q", name, got.bound[name], want)
				}
			}
		})
	}
}

// handWrittenPodGroup is a PodGroup "train" of priority 1000.
func handWrittenPodGroup(members int) []runtime.Object {
	return []runtime.Object{&schedulingv1beta1.PodGroup{
		ObjectMeta: metav1.ObjectMeta{Name: "train", Namespace: "default", UID: "train"},
		Spec: schedulingv1beta1.PodGroupSpec{Priority: ptr.To[int32](1000), SchedulingPolicy: schedulingv1beta1.PodGroupSchedulingPolicy{
			Gang: &schedulingv1beta1.GangSchedulingPolicy{MinCount: int32(members)},
		}},
	}}
}

// gpuGangPodGroup is what the dra-controller creates for a GpuGang "train"
// of 2-card NVLinked members with spec.priorityClassName "high" (a
// PriorityClass of value 1000): the Workload and the PodGroup.
func gpuGangPodGroup(members int) []runtime.Object {
	g := &tangramv1.GpuGang{
		ObjectMeta: metav1.ObjectMeta{Name: "train", Namespace: "default", UID: "gang-train"},
		Spec: tangramv1.GpuGangSpec{
			Members:           tangramv1.GangMembers{Count: int32(members)},
			GPUs:              tangramv1.MemberGPUs{Whole: &tangramv1.WholeGPUs{Count: 2, SameNVLinkDomain: true}},
			PriorityClassName: "high",
		},
	}
	prio := gang.Priority{ClassName: "high", Value: 1000}
	pg := gang.DesiredPodGroup(g, false, prio)
	pg.UID = "train"
	return []runtime.Object{gang.DesiredWorkload(g, false, prio), pg}
}

func runGang(t *testing.T, members int, priorities []int32, wantBound bool, podGroup []runtime.Object) contention {
	_, tctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithTimeout(tctx, 30*time.Second)
	defer cancel()

	profileSpec, err := fakegpu.BuiltinProfile("pcie-a100-pairs")
	if err != nil {
		t.Fatal(err)
	}
	gpus, err := fakegpu.NewFakeSource("a", profileSpec).GPUs(ctx)
	if err != nil {
		t.Fatal(err)
	}
	devices, err := resourceslices.Devices(gpus, resourceslices.Options{NodeName: "a"})
	if err != nil {
		t.Fatal(err)
	}
	node, _ := eightCardNode(t, "a")
	slice := &resourceapi.ResourceSlice{ObjectMeta: metav1.ObjectMeta{Name: "a-gpu", UID: "a-gpu"}, Spec: resourceapi.ResourceSliceSpec{
		Driver: "gpu.tangram.dev", NodeName: ptr.To("a"), Devices: devices,
		Pool: resourceapi.ResourcePool{Name: "a", ResourceSliceCount: 1},
	}}
	harness := &dra.Node{Name: "a", Slices: []*resourceapi.ResourceSlice{slice}, Classes: device.DeviceClasses()}
	objects := []runtime.Object{node, slice}
	for _, c := range device.DeviceClasses() {
		objects = append(objects, c)
	}
	for i, prio := range priorities {
		name := fmt.Sprintf("low-%d", i)
		onCard := fmt.Sprintf(`device.attributes["gpu.tangram.dev"].index == %d`, i)
		claim, err := harness.Allocate(ctx, dra.Claim(name, nil, dra.WholeGPUs("gpu", 1, onCard)))
		if err != nil {
			t.Fatal(err)
		}
		pod := podWithClaim(name, name, prio)
		pod.CreationTimestamp = metav1.NewTime(time.Date(2026, 1, 1, 0, i, 0, 0, time.UTC))
		pod.Spec.NodeName = "a"
		pod.Status.Phase = v1.PodRunning
		claim.Status.ReservedFor = []resourceapi.ResourceClaimConsumerReference{{Resource: "pods", Name: name, UID: pod.UID}}
		objects = append(objects, claim, pod)
	}
	objects = append(objects, podGroup...)
	nvlinked := []resourceapi.DeviceConstraint{dra.MatchAttribute(device.AttrNVLinkDomain, "gpus")}
	var names []string
	for i := range members {
		name := fmt.Sprintf("train-%d", i)
		names = append(names, name)
		pod := podWithClaim(name, name, 1000)
		pod.Spec.SchedulerName = "tangram"
		pod.Spec.SchedulingGroup = &v1.PodSchedulingGroup{PodGroupName: ptr.To("train")}
		objects = append(objects, dra.Claim(name, nvlinked, dra.WholeGPUs("gpus", 2)), pod)
	}

	client := fake.NewClientset(objects...)
	var mu sync.Mutex
	out := contention{evictedTwice: map[string]bool{}, bound: map[string]string{}}
	failed := map[string]bool{}
	changed := make(chan struct{}, 100)
	notify := func() {
		select {
		case changed <- struct{}{}:
		default:
		}
	}
	client.PrependReactor("create", "pods", func(action k8stesting.Action) (bool, runtime.Object, error) {
		switch action.GetSubresource() {
		case "binding":
			b := action.(k8stesting.CreateAction).GetObject().(*v1.Binding)
			mu.Lock()
			out.bound[b.Name] = b.Target.Name
			mu.Unlock()
			notify()
			return true, b, nil
		case "eviction":
			victim := action.(k8stesting.CreateAction).GetObject().(metav1.Object).GetName()
			mu.Lock()
			out.evicted = append(out.evicted, victim)
			mu.Unlock()
			go func() {
				_ = client.CoreV1().Pods("default").Delete(ctx, victim, metav1.DeleteOptions{})
				_ = client.ResourceV1().ResourceClaims("default").Delete(ctx, victim, metav1.DeleteOptions{})
			}()
			return true, nil, nil
		}
		return false, nil, nil
	})
	client.PrependReactor("patch", "pods", func(action k8stesting.Action) (bool, runtime.Object, error) {
		if action.GetSubresource() == "status" && strings.Contains(string(action.(k8stesting.PatchAction).GetPatch()), `"reason":"Unschedulable"`) {
			mu.Lock()
			failed[action.(k8stesting.PatchAction).GetName()] = true
			mu.Unlock()
			notify()
		}
		return false, nil, nil
	})

	startTangram(t, ctx, client)

	for {
		mu.Lock()
		done := !slices.ContainsFunc(names, func(n string) bool {
			if wantBound {
				return out.bound[n] == ""
			}
			return !failed[n]
		})
		mu.Unlock()
		if done {
			break
		}
		select {
		case <-changed:
		case <-ctx.Done():
			t.Errorf("members %v: not all bound (or reported unschedulable) within 30s", names)
			mu.Lock()
			defer mu.Unlock()
			return out
		}
	}
	mu.Lock()
	defer mu.Unlock()
	return out
}
