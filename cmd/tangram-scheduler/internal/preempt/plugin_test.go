package preempt

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/events"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/utils/ptr"

	"github.com/tangram-gpu/tangram/pkg/preemption"
)

func TestNewRefusesArgs(t *testing.T) {
	for _, raw := range []string{`policy: tangram`, `{"victims": 3}`} {
		t.Run(raw, func(t *testing.T) {
			_, err := New(context.Background(), &runtime.Unknown{Raw: []byte(raw)}, nil)
			if err == nil || !strings.Contains(err.Error(), "takes no args") {
				t.Errorf("New(%q) = %v, want an error saying it takes no args", raw, err)
			}
		})
	}
}

// handleWithClient is the part of the framework handle evict uses.
type handleWithClient struct {
	fwk.Handle
	client   kubernetes.Interface
	recorder *recorder
}

func (h handleWithClient) ClientSet() kubernetes.Interface { return h.client }
func (h handleWithClient) EventRecorder() events.EventRecorderLogger {
	if h.recorder == nil {
		return nil
	}
	return h.recorder
}

// recorder keeps the events' "regarding reason: note".
type recorder struct {
	events.EventRecorderLogger
	got []string
}

func (r *recorder) Eventf(regarding, _ runtime.Object, _, reason, _, note string, args ...any) {
	r.got = append(r.got, fmt.Sprintf("%s %s: %s", regarding.(metav1.Object).GetName(), reason, fmt.Sprintf(note, args...)))
}

func TestEvict(t *testing.T) {
	victim := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "low", Namespace: "default", UID: "low-uid"}}
	preemptor := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "high", Namespace: "default", UID: "high-uid"}, Spec: v1.PodSpec{Priority: ptr.To[int32](1000)}}
	claim := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: "low-gpu", Namespace: "default"}}
	for _, tc := range []struct {
		name    string
		apiErr  error
		wantErr func(error) bool
	}{
		{name: "evicted"},
		{name: "already gone", apiErr: apierrors.NewNotFound(v1.Resource("pods"), "low")},
		{name: "replaced by a pod of the same name", apiErr: apierrors.NewConflict(v1.Resource("pods"), "low", errors.New("UID precondition"))},
		{name: "refused by a PodDisruptionBudget", apiErr: apierrors.NewTooManyRequests("Cannot evict pod as it would violate the pod's disruption budget.", 0),
			wantErr: apierrors.IsTooManyRequests},
		{name: "API server error", apiErr: apierrors.NewInternalError(errors.New("boom")), wantErr: apierrors.IsInternalError},
	} {
		t.Run(tc.name, func(t *testing.T) {
			client := fake.NewClientset()
			var got *policyv1.Eviction
			client.PrependReactor("create", "pods", func(action k8stesting.Action) (bool, runtime.Object, error) {
				if action.GetSubresource() != "eviction" {
					return false, nil, nil
				}
				got = action.(k8stesting.CreateAction).GetObject().(*policyv1.Eviction)
				return true, nil, tc.apiErr
			})
			events := &recorder{}
			p := &Plugin{handle: handleWithClient{client: client, recorder: events}}
			err := p.evict(context.Background(), preemptor, victim, "node-a", []preemption.Freed{{Pod: victim, Claim: claim, Devices: []string{"gpu-3"}}})
			switch {
			case tc.wantErr == nil && err != nil:
				t.Errorf("evict: %v, want no error", err)
			case tc.wantErr != nil && (err == nil || !tc.wantErr(err)):
				t.Errorf("evict: %v, want an error of the API's kind", err)
			case tc.wantErr != nil && !strings.Contains(err.Error(), "default/low"):
				t.Errorf("evict: %q does not name the victim", err)
			}
			if remembered := slices.Contains(p.evicted.List(), "low-uid"); remembered != (tc.apiErr == nil) {
				t.Errorf("the victim is remembered as evicted: %v, want %v", remembered, tc.apiErr == nil)
			}
			wantEvents := []string(nil)
			if tc.apiErr == nil {
				wantEvents = []string{"low Preempted: Preempted by pod default/high (priority 1000) on node node-a to free GPU devices: claim default/low-gpu: gpu-3"}
			}
			if !slices.Equal(events.got, wantEvents) {
				t.Errorf("events %q, want %q", events.got, wantEvents)
			}
			if got == nil || got.Name != "low" || got.DeleteOptions == nil || got.DeleteOptions.Preconditions == nil ||
				*got.DeleteOptions.Preconditions.UID != "low-uid" {
				t.Errorf("eviction sent: %+v, want pod default/low with its UID as precondition", got)
			}
		})
	}
}

// A gang member never preempts on its own (the gang might still not fit),
// nor does a pod whose preemptionPolicy is Never; neither counts as a
// preemption attempt.
func TestPostFilterRefusesGangMembersAndNever(t *testing.T) {
	member := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "train-0", Namespace: "ml"},
		Spec: v1.PodSpec{SchedulingGroup: &v1.PodSchedulingGroup{PodGroupName: ptr.To("train")}}}
	never := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "polite", Namespace: "ml"},
		Spec: v1.PodSpec{PreemptionPolicy: ptr.To(v1.PreemptNever)}}
	for _, tc := range []struct {
		pod  *v1.Pod
		want string
	}{
		{member, "member of PodGroup train"},
		{never, "preemptionPolicy is Never"},
	} {
		t.Run(tc.pod.Name, func(t *testing.T) {
			p := &Plugin{} // no handle: it must not get that far
			result, status, outcome := p.postFilter(context.Background(), nil, tc.pod, nil)
			if result != nil || status.Code() != fwk.Unschedulable || !strings.Contains(status.Message(), tc.want) || outcome != "" {
				t.Errorf("postFilter = %v, %v, %q; want no result, Unschedulable saying %q, no outcome", result, status, outcome, tc.want)
			}
		})
	}
}

// TestPodClaimsBeforeTheTemplateClaimExists: a pod whose claim comes from
// a ResourceClaimTemplate and has not been created yet has no pending
// claim to preempt for, which is no error. Before, podClaims returned
// resourceclaim's ErrClaimNotFound and PostFilter an Error status, so every
// new pod of a claim template (all of scheduler_perf's DRA pods) went to
// the scheduler's error back-off on its first attempt.
func TestPodClaimsBeforeTheTemplateClaimExists(t *testing.T) {
	for _, tc := range []struct {
		name    string
		pod     *v1.Pod
		wantErr bool
	}{
		{"template, claim not created", &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns"},
			Spec: v1.PodSpec{ResourceClaims: []v1.PodResourceClaim{{Name: "gpu", ResourceClaimTemplateName: ptr.To("t")}}}}, false},
		{"neither name nor template", &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns"},
			Spec: v1.PodSpec{ResourceClaims: []v1.PodResourceClaim{{Name: "gpu"}}}}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pending, allocated, err := podClaims(tc.pod, nil)
			if (err != nil) != tc.wantErr || len(pending) != 0 || allocated {
				t.Errorf("podClaims = %v, %v, %v; want no claims and error %v", pending, allocated, err, tc.wantErr)
			}
		})
	}
}

// TestEvictVictimsChecksEveryBudgetFirst: the victims' PodDisruptionBudgets
// are read from the API server and checked for all victims together before
// the first eviction; one refused victim means none is evicted. Before,
// the victims were evicted one after the other and the API server's
// refusal of c (its budget allows no disruption) left a and b evicted for
// nothing.
func TestEvictVictimsChecksEveryBudgetFirst(t *testing.T) {
	db := map[string]string{"app": "db"}
	running := func(name string, labels map[string]string) *v1.Pod {
		return &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", UID: types.UID(name), Labels: labels},
			Spec:   v1.PodSpec{NodeName: "node-a"},
			Status: v1.PodStatus{Phase: v1.PodRunning, Conditions: []v1.PodCondition{{Type: v1.PodReady, Status: v1.ConditionTrue}}}}
	}
	budget := func(allowed int32) *policyv1.PodDisruptionBudget {
		return &policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Name: "db", Namespace: "default"},
			Spec:   policyv1.PodDisruptionBudgetSpec{Selector: &metav1.LabelSelector{MatchLabels: db}},
			Status: policyv1.PodDisruptionBudgetStatus{DisruptionsAllowed: allowed}}
	}
	preemptor := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "high", Namespace: "default", UID: "high"}, Spec: v1.PodSpec{Priority: ptr.To[int32](1000)}}
	victimPods := []*v1.Pod{running("a", nil), running("b", nil), running("c", db)}
	for _, tc := range []struct {
		name        string
		budget      *policyv1.PodDisruptionBudget
		wantEvicted []string
		wantResult  string
	}{
		{"the budget allows c to go: all three evicted", budget(1), []string{"a", "b", "c"}, ""},
		{"the budget refuses c: none evicted", budget(0), nil, resultRefused},
	} {
		t.Run(tc.name, func(t *testing.T) {
			client := fake.NewClientset(tc.budget)
			var evicted []string
			client.PrependReactor("create", "pods", func(action k8stesting.Action) (bool, runtime.Object, error) {
				if action.GetSubresource() != "eviction" {
					return false, nil, nil
				}
				name := action.(k8stesting.CreateAction).GetObject().(*policyv1.Eviction).Name
				if name == "c" && tc.budget.Status.DisruptionsAllowed == 0 {
					// What the API server answers.
					return true, nil, apierrors.NewTooManyRequests("Cannot evict pod as it would violate the pod's disruption budget.", 0)
				}
				evicted = append(evicted, name)
				return true, nil, nil
			})
			p := &Plugin{handle: handleWithClient{client: client}}
			status, result := p.evictVictims(context.Background(), preemptor, describePreemptor(preemptor), kindPod, victimPods, nil, nil)
			if !slices.Equal(evicted, tc.wantEvicted) || result != tc.wantResult {
				t.Errorf("evicted %v, result %q (status %v); want %v, %q", evicted, result, status, tc.wantEvicted, tc.wantResult)
			}
			if tc.wantResult != "" && (status.Code() != fwk.Unschedulable || !strings.Contains(status.Message(), "PodDisruptionBudget default/db refuses evicting default/c")) {
				t.Errorf("status %v, want Unschedulable naming the budget and the victim", status)
			}
			if tc.wantResult == "" && status != nil {
				t.Errorf("status %v, want none", status)
			}
		})
	}
}
