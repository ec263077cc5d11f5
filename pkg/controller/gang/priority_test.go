package gang

import (
	"context"
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"

	tangramv1 "github.com/tangram-gpu/tangram/api/tangram/v1alpha1"
)

func priorityClass(name string, value int32) *schedulingv1.PriorityClass {
	return &schedulingv1.PriorityClass{ObjectMeta: metav1.ObjectMeta{Name: name}, Value: value}
}

// withPriority is a member pod as the Priority admission plugin leaves it:
// the class name and its resolved value.
func withPriority(pod *corev1.Pod, class string, value int32) *corev1.Pod {
	pod.Spec.PriorityClassName = class
	pod.Spec.Priority = ptr.To(value)
	return pod
}

func TestReconcilePriority(t *testing.T) {
	gang := func(class string) *tangramv1.GpuGang {
		g := newGang("train", 2, 1, false, "")
		g.Spec.PriorityClassName = class
		return g
	}
	tests := []struct {
		name    string
		class   string
		objects []runtime.Object
		// member pods, made for the gang
		pods func(g *tangramv1.GpuGang) []*corev1.Pod
		// wantClass/wantPriority on the PodGroup and the Workload's template.
		wantClass    string
		wantPriority *int32
		// wantCreated: whether the three objects exist after the pass.
		wantCreated bool
		// wantReady is the ObjectsReady condition's reason.
		wantReady string
		// wantMember is the MemberPriorityMatches condition's status, ""
		// for no condition; wantMemberMsg a part of its message.
		wantMember    metav1.ConditionStatus
		wantMemberMsg string
		wantDiagnosis string
	}{
		{
			name:    "no class: objects carry no priority and no priority condition",
			objects: []runtime.Object{priorityClass("high", 1000)},
			pods: func(g *tangramv1.GpuGang) []*corev1.Pod {
				return []*corev1.Pod{memberPod(g, "m-0", "", corev1.PodPending, "")}
			},
			wantCreated: true, wantReady: "Created",
		},
		{
			name:    "class set: PodGroup and Workload carry its name and value, members match",
			class:   "high",
			objects: []runtime.Object{priorityClass("high", 1000), priorityClass("low", 10)},
			pods: func(g *tangramv1.GpuGang) []*corev1.Pod {
				return []*corev1.Pod{
					withPriority(memberPod(g, "m-0", "", corev1.PodPending, ""), "high", 1000),
					withPriority(memberPod(g, "m-1", "", corev1.PodPending, ""), "high", 1000),
				}
			},
			wantClass: "high", wantPriority: ptr.To[int32](1000), wantCreated: true, wantReady: "Created",
			wantMember: metav1.ConditionTrue, wantMemberMsg: "every member pod found has the PodGroup's priority 1000 (PriorityClass high)",
		},
		{
			name:    "class set, a member without it: the condition names the pod and the fix",
			class:   "high",
			objects: []runtime.Object{priorityClass("high", 1000)},
			pods: func(g *tangramv1.GpuGang) []*corev1.Pod {
				return []*corev1.Pod{
					withPriority(memberPod(g, "m-0", "", corev1.PodPending, ""), "high", 1000),
					memberPod(g, "m-1", "", corev1.PodPending, ""),
				}
			},
			wantClass: "high", wantPriority: ptr.To[int32](1000), wantCreated: true, wantReady: "Created",
			wantMember: metav1.ConditionFalse,
			wantMemberMsg: "the scheduler refuses the group: member pod m-1 (priority 0, no priorityClassName) differs from the PodGroup's priority 1000 (PriorityClass high); " +
				"set spec.priorityClassName: high on every member pod",
		},
		{
			name:    "no class, a member with one: the condition says to remove it",
			objects: []runtime.Object{priorityClass("low", 10)},
			pods: func(g *tangramv1.GpuGang) []*corev1.Pod {
				return []*corev1.Pod{
					withPriority(memberPod(g, "m-0", "", corev1.PodPending, ""), "low", 10),
					withPriority(memberPod(g, "m-1", "", corev1.PodPending, ""), "low", 10),
				}
			},
			wantCreated: true, wantReady: "Created",
			wantMember: metav1.ConditionFalse,
			wantMemberMsg: "member pods m-0 (priority 10, priorityClassName low), m-1 (priority 10, priorityClassName low) differ from the PodGroup's priority 0 (no PriorityClass); " +
				"remove spec.priorityClassName from the member pods",
		},
		{
			name:    "missing class: nothing is created and the gang says which class and how to fix it",
			class:   "urgent",
			objects: []runtime.Object{priorityClass("high", 1000)},
			pods: func(g *tangramv1.GpuGang) []*corev1.Pod {
				return []*corev1.Pod{withPriority(memberPod(g, "m-0", "", corev1.PodPending, ""), "high", 1000)}
			},
			wantReady: "PriorityClassNotFound",
			wantDiagnosis: `PriorityClass "urgent" (spec.priorityClassName) does not exist, so the Workload, PodGroup and ResourceClaimTemplate are not created yet: ` +
				"create the PriorityClass (kubectl create priorityclass urgent --value=<priority>), or delete the GpuGang and create it again with an existing class or none (kubectl get priorityclasses)",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			g := gang(tc.class)
			objs := append([]runtime.Object(nil), tc.objects...)
			for _, p := range tc.pods(g) {
				objs = append(objs, p)
			}
			h := newHarness(t, nil, g, objs...)
			after, err := h.reconcile("train")
			if err != nil {
				t.Fatal(err)
			}
			if after != testResync {
				t.Errorf("pending gang requeued after %v, want %v", after, testResync)
			}
			if tc.wantCreated {
				// The cache saw the PodGroup only after the first pass.
				if _, err := h.reconcile("train"); err != nil {
					t.Fatal(err)
				}
			}
			ctx := context.Background()
			pg, pgErr := h.kube.SchedulingV1beta1().PodGroups(testNS).Get(ctx, "train", metav1.GetOptions{})
			wl, wlErr := h.kube.SchedulingV1beta1().Workloads(testNS).Get(ctx, "train", metav1.GetOptions{})
			_, rctErr := h.kube.ResourceV1().ResourceClaimTemplates(testNS).Get(ctx, "train-gpus", metav1.GetOptions{})
			if !tc.wantCreated {
				if c := createActions(h); len(c) > 0 {
					t.Errorf("created %v although the PriorityClass is missing", c)
				}
			} else {
				if pgErr != nil || wlErr != nil || rctErr != nil {
					t.Fatalf("objects missing: %v, %v, %v", pgErr, wlErr, rctErr)
				}
				tmpl := wl.Spec.PodGroupTemplates[0]
				for what, got := range map[string]struct {
					class    string
					priority *int32
				}{"PodGroup": {pg.Spec.PriorityClassName, pg.Spec.Priority}, "Workload template": {tmpl.PriorityClassName, tmpl.Priority}} {
					if got.class != tc.wantClass || !ptrEqual(got.priority, tc.wantPriority) {
						t.Errorf("%s priority: class %q value %v, want %q %v", what, got.class, ptrString(got.priority), tc.wantClass, ptrString(tc.wantPriority))
					}
				}
				if pg.Spec.PreemptionPolicy != nil {
					t.Errorf("PodGroup preemptionPolicy %v set; it is the admission plugin's (forbidden without PodGroupPreemptionPolicy)", *pg.Spec.PreemptionPolicy)
				}
			}
			st := h.gang("train").Status
			ready := meta.FindStatusCondition(st.Conditions, tangramv1.ConditionObjectsReady)
			if ready == nil || ready.Reason != tc.wantReady {
				t.Errorf("ObjectsReady condition %+v, want reason %s", ready, tc.wantReady)
			}
			if tc.wantDiagnosis != "" {
				if st.Phase != tangramv1.GangPending || st.Diagnosis != tc.wantDiagnosis || ready.Message != tc.wantDiagnosis || ready.Status != metav1.ConditionFalse {
					t.Errorf("phase %s diagnosis\n got: %s\nwant: %s\ncondition %+v", st.Phase, st.Diagnosis, tc.wantDiagnosis, ready)
				}
			}
			member := meta.FindStatusCondition(st.Conditions, tangramv1.ConditionMemberPriority)
			switch {
			case tc.wantMember == "" && member != nil:
				t.Errorf("unexpected %s condition %+v", tangramv1.ConditionMemberPriority, member)
			case tc.wantMember != "" && (member == nil || member.Status != tc.wantMember || !strings.Contains(member.Message, tc.wantMemberMsg)):
				t.Errorf("%s condition %+v, want %s containing %q", tangramv1.ConditionMemberPriority, member, tc.wantMember, tc.wantMemberMsg)
			}
			// The member pods are the user's: the controller never writes them.
			for _, a := range h.kube.Actions() {
				if a.GetResource().Resource == "pods" && a.GetVerb() != "list" && a.GetVerb() != "watch" {
					t.Errorf("the controller wrote a member pod: %v", a)
				}
			}
		})
	}
}

// TestReconcilePriorityClassAppears: a gang waiting for its PriorityClass
// creates its objects, with the class's value, once the class exists; once
// they exist the class is not read again.
func TestReconcilePriorityClassAppears(t *testing.T) {
	g := newGang("train", 2, 1, false, "")
	g.Spec.PriorityClassName = "high"
	h := newHarness(t, nil, g)
	if _, err := h.reconcile("train"); err != nil {
		t.Fatal(err)
	}
	if c := createActions(h); len(c) > 0 {
		t.Fatalf("created %v without the PriorityClass", c)
	}
	h.create(priorityClass("high", 5000))
	for range 2 {
		if _, err := h.reconcile("train"); err != nil {
			t.Fatal(err)
		}
	}
	pg, err := h.kube.SchedulingV1beta1().PodGroups(testNS).Get(context.Background(), "train", metav1.GetOptions{})
	if err != nil || pg.Spec.PriorityClassName != "high" || ptr.Deref(pg.Spec.Priority, 0) != 5000 {
		t.Fatalf("PodGroup %+v, %v; want class high, priority 5000", pg, err)
	}
	if c := meta.FindStatusCondition(h.gang("train").Status.Conditions, tangramv1.ConditionObjectsReady); c == nil || c.Reason != "Created" {
		t.Errorf("ObjectsReady %+v, want Created", c)
	}
	h.kube.ClearActions()
	if _, err := h.reconcile("train"); err != nil {
		t.Fatal(err)
	}
	for _, a := range h.kube.Actions() {
		if a.GetResource().Resource == "priorityclasses" {
			t.Errorf("read the PriorityClass although the PodGroup and Workload exist: %v", a)
		}
	}
}

func TestValidateSpecPriorityClassName(t *testing.T) {
	for _, tc := range []struct {
		class   string
		wantErr string
	}{
		{class: ""},
		{class: "high-priority"},
		{class: "team.high"},
		{class: "High", wantErr: `priorityClassName "High" is not a PriorityClass name`},
		{class: "a_b", wantErr: `priorityClassName "a_b" is not a PriorityClass name`},
	} {
		t.Run(tc.class, func(t *testing.T) {
			g := newGang("g", 1, 1, false, "")
			g.Spec.PriorityClassName = tc.class
			err := ValidateSpec(&g.Spec)
			switch {
			case tc.wantErr == "" && err != nil:
				t.Errorf("ValidateSpec: %v", err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Errorf("ValidateSpec = %v, want %q", err, tc.wantErr)
			}
		})
	}
}

// TestDesiredPodGroupPriority is the controller's output the scheduler
// reads: spec.priority is what tangram-scheduler's gang preemption
// compares victims against (nil counts as 0, which preempts nobody).
func TestDesiredPodGroupPriority(t *testing.T) {
	g := newGang("g", 2, 1, false, "")
	for _, tc := range []struct {
		prio         Priority
		wantClass    string
		wantPriority *int32
	}{
		{prio: Priority{}},
		{prio: Priority{ClassName: "high", Value: 1000}, wantClass: "high", wantPriority: ptr.To[int32](1000)},
		{prio: Priority{ClassName: "zero", Value: 0}, wantClass: "zero", wantPriority: ptr.To[int32](0)},
	} {
		t.Run(tc.prio.ClassName, func(t *testing.T) {
			pg := DesiredPodGroup(g, false, tc.prio)
			wl := DesiredWorkload(g, false, tc.prio)
			for _, spec := range []struct {
				class    string
				priority *int32
			}{{pg.Spec.PriorityClassName, pg.Spec.Priority}, {wl.Spec.PodGroupTemplates[0].PriorityClassName, wl.Spec.PodGroupTemplates[0].Priority}} {
				if spec.class != tc.wantClass || !ptrEqual(spec.priority, tc.wantPriority) {
					t.Errorf("class %q priority %s, want %q %s", spec.class, ptrString(spec.priority), tc.wantClass, ptrString(tc.wantPriority))
				}
			}
		})
	}
}

func ptrEqual(a, b *int32) bool {
	return (a == nil) == (b == nil) && (a == nil || *a == *b)
}

func ptrString(p *int32) string {
	if p == nil {
		return "nil"
	}
	return fmt.Sprint(*p)
}
