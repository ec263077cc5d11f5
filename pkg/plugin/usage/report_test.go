package usage

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"testing"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	"github.com/tangram-gpu/tangram/pkg/gpu"
)

// events records "<kind>/<name> <reason>" for each event.
type events []string

func (e *events) Event(obj runtime.Object, _, reason, _ string) { e.add(obj, reason) }
func (e *events) Eventf(obj runtime.Object, _, reason, _ string, _ ...any) {
	e.add(obj, reason)
}
func (e *events) AnnotatedEventf(obj runtime.Object, _ map[string]string, _, reason, _ string, _ ...any) {
	e.add(obj, reason)
}
func (e *events) add(obj runtime.Object, reason string) {
	switch o := obj.(type) {
	case *corev1.Pod:
		*e = append(*e, "pod/"+o.Name+" "+reason)
	case *corev1.ObjectReference:
		*e = append(*e, o.Kind+"/"+o.Name+" "+reason)
	default:
		*e = append(*e, fmt.Sprintf("%T %s", obj, reason))
	}
}

// evictions answers each pod's eviction with its error and counts them.
type evictions struct {
	errs  map[string]error
	calls []string
}

func (e *evictions) Evict(_ context.Context, pod *corev1.Pod) error {
	e.calls = append(e.calls, pod.Name)
	return e.errs[pod.Name]
}

func TestReporter(t *testing.T) {
	recs := records()
	share := recs["a"]
	overUse := func(pods ...string) Use {
		return Use{ClaimUID: "a", Namespace: share.Namespace, Name: share.Name, Device: share.Devices[0], PIDs: []int{10}, Pods: pods, UsedBytes: 5 * gib, UsedKnown: true, AllowedBytes: 4 * gib, Over: true}
	}
	whole := recs["w"]
	wholeUse := Use{ClaimUID: "w", Namespace: whole.Namespace, Name: whole.Name, Device: whole.Devices[0], PIDs: []int{30}, Pods: []string{"uid-w"}, UsedBytes: 90 * gib, UsedKnown: true}
	stray := func(pid int, pod string) Stray {
		return Stray{Process: gpu.Process{Card: "GPU-2", GPUInstance: gpu.NoGPUInstance, PID: pid, UsedBytes: gib}, Pod: pod}
	}
	// As the API server refuses an eviction a budget does not allow now.
	pdb := &apierrors.StatusError{ErrStatus: metav1.Status{Status: metav1.StatusFailure, Code: 429, Reason: metav1.StatusReasonTooManyRequests,
		Message: "Cannot evict pod as it would violate the pod's disruption budget.",
		Details: &metav1.StatusDetails{Causes: []metav1.StatusCause{{Type: policyv1.DisruptionBudgetCause, Message: "The disruption budget keep needs 1 healthy pods and has 1 currently"}}}}}
	throttled := apierrors.NewTooManyRequests("the server has received too many requests and has asked us to try again later", 1)
	gone := apierrors.NewNotFound(schema.GroupResource{Resource: "pods"}, "p2")
	tests := []struct {
		name        string
		action      Action
		unaccounted Action
		evictErrs   map[string]error
		rounds      []Report
		wantEvents  events
		wantEvicts  []string
	}{
		{name: "a share over its memory: told once on each pod while it stays over, again when it comes back",
			action:     ActionReport,
			rounds:     []Report{{Uses: []Use{overUse("uid-1", "uid-2"), wholeUse}}, {Uses: []Use{overUse("uid-1", "uid-2")}}, {}, {Uses: []Use{overUse("uid-1")}}},
			wantEvents: events{"pod/p1 GPUShareExceeded", "pod/p2 GPUShareExceeded", "pod/p1 GPUShareExceeded"}},
		{name: "a share over its memory whose pods are not known: told on the node",
			action:     ActionReport,
			rounds:     []Report{{Uses: []Use{overUse("uid-unknown")}}},
			wantEvents: events{"Node/n1 GPUShareExceeded"}},
		{name: "processes no claim accounts for: on their pod, on the node outside any pod or for an unknown pod, once while they run",
			action:     ActionReport,
			rounds:     []Report{{Strays: []Stray{stray(60, "uid-1"), stray(61, ""), stray(62, "uid-unknown")}}, {Strays: []Stray{stray(60, "uid-1"), stray(61, "")}}, {Strays: []Stray{stray(63, "uid-1")}}},
			wantEvents: events{"pod/p1 GPUProcessWithoutClaim", "Node/n1 GPUProcessWithoutClaim", "Node/n1 GPUProcessWithoutClaim", "pod/p1 GPUProcessWithoutClaim"}},
		{name: "evict: each pod of the share once, not again before the informer sees it going; a pod already going left alone",
			action:     ActionEvict,
			rounds:     []Report{{Uses: []Use{overUse("uid-1", "uid-going")}}, {Uses: []Use{overUse("uid-1", "uid-going")}}},
			wantEvents: events{"pod/p1 GPUShareExceeded", "pod/going GPUShareExceeded", "pod/p1 GPUUsageEvicted"},
			wantEvicts: []string{"p1"}},
		{name: "evict: a round that left the card out (NVML could not list it) does not make the pod evicted again",
			action:     ActionEvict,
			rounds:     []Report{{Uses: []Use{overUse("uid-1")}}, {}, {Uses: []Use{overUse("uid-1")}}},
			wantEvents: events{"pod/p1 GPUShareExceeded", "pod/p1 GPUUsageEvicted", "pod/p1 GPUShareExceeded"},
			wantEvicts: []string{"p1"}},
		{name: "evict blocked by a PodDisruptionBudget: told once, tried every round; a pod gone is not told",
			action:     ActionEvict,
			evictErrs:  map[string]error{"p1": pdb, "p2": gone},
			rounds:     []Report{{Uses: []Use{overUse("uid-1", "uid-2")}}, {Uses: []Use{overUse("uid-1", "uid-2")}}},
			wantEvents: events{"pod/p1 GPUShareExceeded", "pod/p2 GPUShareExceeded", "pod/p1 GPUUsageEvictionBlocked"},
			wantEvicts: []string{"p1", "p2", "p1", "p2"}},
		{name: "evict throttled (429 without a budget's cause): no budget told, tried again",
			action:     ActionEvict,
			evictErrs:  map[string]error{"p1": throttled},
			rounds:     []Report{{Uses: []Use{overUse("uid-1")}}, {Uses: []Use{overUse("uid-1")}}},
			wantEvents: events{"pod/p1 GPUShareExceeded"},
			wantEvicts: []string{"p1", "p1"}},
		{name: "a pod that starts using a share already over is told too",
			action:     ActionReport,
			rounds:     []Report{{Uses: []Use{overUse("uid-1")}}, {Uses: []Use{overUse("uid-1", "uid-2")}}},
			wantEvents: events{"pod/p1 GPUShareExceeded", "pod/p2 GPUShareExceeded"}},
		{name: "unaccounted evict: a pod running a process on a card it holds nothing of is evicted; a process outside any pod only told",
			unaccounted: ActionEvict,
			rounds:      []Report{{Strays: []Stray{stray(60, "uid-1"), stray(61, "")}}},
			wantEvents:  events{"pod/p1 GPUProcessWithoutClaim", "pod/p1 GPUUsageEvicted", "Node/n1 GPUProcessWithoutClaim"},
			wantEvicts:  []string{"p1"}},
		{name: "evict failing otherwise: logged and tried again, no event",
			action:     ActionEvict,
			evictErrs:  map[string]error{"p1": errors.New("connection refused")},
			rounds:     []Report{{Uses: []Use{overUse("uid-1")}}, {Uses: []Use{overUse("uid-1")}}},
			wantEvents: events{"pod/p1 GPUShareExceeded"},
			wantEvicts: []string{"p1", "p1"}},
		{name: "report never evicts; a whole card using much is no share over its size",
			action:     ActionReport,
			rounds:     []Report{{Uses: []Use{overUse("uid-1"), wholeUse}}},
			wantEvents: events{"pod/p1 GPUShareExceeded"}},
	}
	pods := map[string]*corev1.Pod{}
	for _, name := range []string{"p1", "p2", "going", "w"} {
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: name, UID: types.UID("uid-" + name[len(name)-1:])}}
		if name == "going" {
			pod.UID, pod.DeletionTimestamp = "uid-going", &metav1.Time{}
		}
		if name == "w" {
			pod.UID = "uid-w"
		}
		pods[string(pod.UID)] = pod
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got events
			ev := &evictions{errs: tt.evictErrs}
			r := &Reporter{Recorder: &got, Node: "n1", OverShare: tt.action, Unaccounted: tt.unaccounted, Evictor: ev,
				Pod: func(uid string) (*corev1.Pod, bool) { p, ok := pods[uid]; return p, ok }}
			for _, round := range tt.rounds {
				r.Publish(context.Background(), round)
			}
			if !reflect.DeepEqual(got, tt.wantEvents) {
				t.Errorf("events %q, want %q", got, tt.wantEvents)
			}
			if !reflect.DeepEqual(ev.calls, tt.wantEvicts) {
				t.Errorf("evictions %q, want %q", ev.calls, tt.wantEvicts)
			}
		})
	}
}

func TestParseAction(t *testing.T) {
	for in, ok := range map[string]bool{"report": true, "evict": true, "": true, "kill": false, "Evict": false} {
		if _, err := ParseAction("usage-over-share", in); (err == nil) != ok {
			t.Errorf("ParseAction(%q): %v, want ok %t", in, err, ok)
		}
	}
}
