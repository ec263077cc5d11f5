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
	policyv1 "k8s.io/api/policy/v1"
	resourceapi "k8s.io/api/resource/v1"
	schedulingv1beta1 "k8s.io/api/scheduling/v1beta1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	featuregatetesting "k8s.io/component-base/featuregate/testing"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/kubernetes/pkg/features"
	"k8s.io/utils/ptr"

	"github.com/tangram-gpu/tangram/pkg/device"
	"github.com/tangram-gpu/tangram/pkg/dra"
)

// TestSchedulerKeepsRunningGangsWhole runs the real kube-scheduler 1.37
// with GenericWorkload and the tangram profile. Node a's cards 0-5 are held
// by pods on their own (low-0..low-5), cards 6 and 7 by the two members of
// a running gang "old" (a PodGroup of priority 10 with disruptionMode All;
// g-0 and g-1, the newest pods). A high-priority pod wants one whole card.
// Before, victims were chosen pod by pod: it evicted g-1 alone (the newest
// of equal priority, or the only lower one), and the gang's job broke with
// g-0 holding its card.
func TestSchedulerKeepsRunningGangsWhole(t *testing.T) {
	featuregatetesting.SetFeatureGateDuringTest(t, utilfeature.DefaultFeatureGate, features.GenericWorkload, true)
	for _, tc := range []struct {
		name string
		// alone is the priority of low-0..low-5.
		alone int32
		// protectG1 puts g-1 under a PodDisruptionBudget that allows no
		// disruption.
		protectG1   bool
		wantEvicted []string
	}{
		{"pods on their own go before a gang: the newest of them", 10, false, []string{"low-5"}},
		{"the gang is the only lower-priority victim: both members go", 2000, false, []string{"g-0", "g-1"}},
		{"a budget protecting one member protects the gang: nobody evicted", 2000, true, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := runGangVictims(t, tc.alone, tc.protectG1, tc.wantEvicted != nil)
			slices.Sort(got.evicted)
			if fmt.Sprint(got.evicted) != fmt.Sprint(tc.wantEvicted) {
				t.Errorf("evicted %v, want %v", got.evicted, tc.wantEvicted)
			}
			if want := map[bool]string{true: "a", false: ""}[tc.wantEvicted != nil]; got.boundTo != want {
				t.Errorf("the pod was bound to %q, want %q", got.boundTo, want)
			}
			for _, e := range got.events {
				if strings.HasPrefix(e, "g-") && !strings.Contains(e, "Preempted with every member of gang default/old (disruptionMode All) by pod default/high") {
					t.Errorf("victim event %q does not say the gang went together", e)
				}
			}
		})
	}
}

func runGangVictims(t *testing.T, alonePriority int32, protectG1, wantBound bool) outcome {
	_, tctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithTimeout(tctx, 30*time.Second)
	defer cancel()

	node, slice := eightCardNode(t, "a")
	harness := &dra.Node{Name: "a", Slices: []*resourceapi.ResourceSlice{slice}, Classes: device.DeviceClasses()}
	objects := []runtime.Object{node, slice, &schedulingv1beta1.PodGroup{
		ObjectMeta: metav1.ObjectMeta{Name: "old", Namespace: "default", UID: "old"},
		Spec: schedulingv1beta1.PodGroupSpec{
			Priority:         ptr.To[int32](10),
			SchedulingPolicy: schedulingv1beta1.PodGroupSchedulingPolicy{Gang: &schedulingv1beta1.GangSchedulingPolicy{MinCount: 2}},
			DisruptionMode:   &schedulingv1beta1.DisruptionMode{All: &schedulingv1beta1.AllDisruptionMode{}},
		},
	}}
	for _, c := range device.DeviceClasses() {
		objects = append(objects, c)
	}
	for i, name := range []string{"low-0", "low-1", "low-2", "low-3", "low-4", "low-5", "g-0", "g-1"} {
		claim, err := harness.Allocate(ctx, dra.Claim(name, nil, dra.WholeGPUs("gpu", 1)))
		if err != nil {
			t.Fatal(err)
		}
		pod := podWithClaim(name, name, alonePriority)
		if strings.HasPrefix(name, "g-") {
			pod.Spec.Priority = ptr.To[int32](10)
			pod.Spec.SchedulingGroup = &v1.PodSchedulingGroup{PodGroupName: ptr.To("old")}
			pod.Labels = map[string]string{"member": name}
		}
		pod.CreationTimestamp = metav1.NewTime(time.Date(2026, 1, 1, 0, i, 0, 0, time.UTC))
		pod.Spec.NodeName = "a"
		pod.Status.Phase = v1.PodRunning
		claim.Status.ReservedFor = []resourceapi.ResourceClaimConsumerReference{{Resource: "pods", Name: name, UID: pod.UID}}
		objects = append(objects, claim, pod)
	}
	if protectG1 {
		objects = append(objects, &policyv1.PodDisruptionBudget{
			ObjectMeta: metav1.ObjectMeta{Name: "g-1", Namespace: "default"},
			Spec: policyv1.PodDisruptionBudgetSpec{MinAvailable: ptr.To(intstr.FromInt32(1)),
				Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"member": "g-1"}}},
		})
	}
	pod := podWithClaim("high", "high", 1000)
	pod.Spec.SchedulerName = "tangram"
	objects = append(objects, dra.Claim("high", nil, dra.WholeGPUs("gpu", 1)), pod)

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
			go func() {
				_ = client.CoreV1().Pods("default").Delete(ctx, victim, metav1.DeleteOptions{})
				_ = client.ResourceV1().ResourceClaims("default").Delete(ctx, victim, metav1.DeleteOptions{})
			}()
			return true, nil, nil
		}
		return false, nil, nil
	})
	client.PrependReactor("patch", "pods", func(action k8stesting.Action) (bool, runtime.Object, error) {
		if action.GetSubresource() == "status" && action.(k8stesting.PatchAction).GetName() == "high" &&
			strings.Contains(string(action.(k8stesting.PatchAction).GetPatch()), `"reason":"Unschedulable"`) {
			select {
			case failed <- struct{}{}:
			default:
			}
		}
		return false, nil, nil
	})

	startTangram(t, ctx, client)

	if wantBound {
		select {
		case <-bound:
			mu.Lock()
			n := len(out.evicted)
			mu.Unlock()
			out.events = preemptionEvents(ctx, t, client, n+1)
		case <-ctx.Done():
			t.Error("the pod was not bound within 30s")
		}
	} else {
		select {
		case <-failed:
		case <-ctx.Done():
			t.Error("the pod was not reported unschedulable within 30s")
		}
	}
	mu.Lock()
	defer mu.Unlock()
	return out
}
