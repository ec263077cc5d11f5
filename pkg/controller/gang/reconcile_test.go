package gang

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	schedulingapi "k8s.io/api/scheduling/v1beta1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation/field"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/utils/ptr"

	tangramv1 "github.com/tangram-gpu/tangram/api/tangram/v1alpha1"
	"github.com/tangram-gpu/tangram/pkg/cluster/fixture"
	"github.com/tangram-gpu/tangram/pkg/device"
)

func h100Cluster(t *testing.T, zones ...string) *fixture.Cluster {
	t.Helper()
	c := fixture.New()
	for i, z := range zones {
		if err := c.AddNode("node-"+string(rune('1'+i)), "dgx-h100", z, false); err != nil {
			t.Fatal(err)
		}
	}
	return c
}

func createActions(h *harness) []string {
	var out []string
	for _, a := range h.kube.Actions() {
		if a.GetVerb() == "create" {
			out = append(out, a.GetResource().Resource)
		}
	}
	return out
}

func TestReconcileCreatesOwnedObjects(t *testing.T) {
	g := newGang("train", 3, 2, true, zone)
	h := newHarness(t, h100Cluster(t, "zone-a"), g)
	after, err := h.reconcile("train")
	if err != nil {
		t.Fatal(err)
	}
	if after != testResync {
		t.Errorf("pending gang requeued after %v, want %v", after, testResync)
	}
	ctx := context.Background()
	rct, err := h.kube.ResourceV1().ResourceClaimTemplates(testNS).Get(ctx, "train-gpus", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("template: %v", err)
	}
	wl, err := h.kube.SchedulingV1beta1().Workloads(testNS).Get(ctx, "train", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("workload: %v", err)
	}
	pg, err := h.kube.SchedulingV1beta1().PodGroups(testNS).Get(ctx, "train", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("podgroup: %v", err)
	}
	for _, obj := range []metav1.Object{rct, wl, pg} {
		ref := metav1.GetControllerOf(obj)
		if ref == nil || ref.UID != testGangUID || ref.Kind != "GpuGang" || ref.APIVersion != "tangram.dev/v1alpha1" || !ptr.Deref(ref.BlockOwnerDeletion, false) {
			t.Errorf("%s: controller reference %+v, want the GpuGang blocking deletion", obj.GetName(), ref)
		}
		if obj.GetLabels()[LabelGang] != "train" {
			t.Errorf("%s: labels %v lack %s=train", obj.GetName(), obj.GetLabels(), LabelGang)
		}
	}
	// The member claim: 2 whole cards of the default class in one NVLink domain.
	req := rct.Spec.Spec.Devices.Requests[0]
	if req.Name != RequestName || req.Exactly.DeviceClassName != device.DeviceClassName || req.Exactly.Count != 2 {
		t.Errorf("template request %+v", req)
	}
	if cs := rct.Spec.Spec.Devices.Constraints; len(cs) != 1 || string(*cs[0].MatchAttribute) != "gpu.tangram.dev/nvlinkDomain" {
		t.Errorf("template constraints %+v", cs)
	}
	if rct.Spec.ObjectMeta.Labels[LabelGang] != "train" {
		t.Errorf("claims made from the template would not carry the gang label: %v", rct.Spec.ObjectMeta.Labels)
	}
	// Gang policy and topology on both scheduling objects.
	tmpl := wl.Spec.PodGroupTemplates[0]
	if tmpl.Name != PodGroupTemplateName || tmpl.SchedulingPolicy.Gang == nil || tmpl.SchedulingPolicy.Gang.MinCount != 3 {
		t.Errorf("workload template %+v", tmpl)
	}
	if wl.Spec.ControllerRef == nil || wl.Spec.ControllerRef.Kind != "GpuGang" || wl.Spec.ControllerRef.Name != "train" {
		t.Errorf("workload controllerRef %+v", wl.Spec.ControllerRef)
	}
	if pg.Spec.WorkloadRef == nil || pg.Spec.WorkloadRef.WorkloadName != "train" || pg.Spec.WorkloadRef.TemplateName != PodGroupTemplateName {
		t.Errorf("podgroup workloadRef %+v", pg.Spec.WorkloadRef)
	}
	if pg.Spec.SchedulingPolicy.Gang == nil || pg.Spec.SchedulingPolicy.Gang.MinCount != 3 {
		t.Errorf("podgroup policy %+v", pg.Spec.SchedulingPolicy)
	}
	// Preemption evicts the members together or not at all.
	if m := pg.Spec.DisruptionMode; m == nil || m.All == nil || m.Single != nil {
		t.Errorf("podgroup disruptionMode %+v, want All", m)
	}
	if m := tmpl.DisruptionMode; m == nil || m.All == nil || m.Single != nil {
		t.Errorf("workload template disruptionMode %+v, want All", m)
	}
	if !hasTopology(pg.Spec.SchedulingConstraints, zone) || !hasTopology(tmpl.SchedulingConstraints, zone) {
		t.Errorf("topology constraint missing: podgroup %+v, template %+v", pg.Spec.SchedulingConstraints, tmpl.SchedulingConstraints)
	}

	got := h.gang("train")
	if got.Status.Phase != tangramv1.GangPending || got.Status.PodGroupName != "train" || got.Status.ResourceClaimTemplateName != "train-gpus" {
		t.Errorf("status %+v", got.Status)
	}
	if !meta.IsStatusConditionTrue(got.Status.Conditions, tangramv1.ConditionObjectsReady) ||
		!meta.IsStatusConditionTrue(got.Status.Conditions, tangramv1.ConditionTopologyEnforced) {
		t.Errorf("conditions %+v", got.Status.Conditions)
	}
	// One H100 node has room for 4 members of 2 cards; no pods exist yet.
	wantDiag := "needs 3 members, each 2 whole cards in one NVLink domain, all with the same topology.kubernetes.io/zone: " +
		"zone-a has room for 3 members (1 node); only 0 of the 3 member pods the gang needs exist (" + podsHint(g) + ")"
	if got.Status.Diagnosis != wantDiag {
		t.Errorf("diagnosis\n got: %s\nwant: %s", got.Status.Diagnosis, wantDiag)
	}

	// A second pass creates nothing and writes no status: it is settled.
	h.kube.ClearActions()
	h.dyn.ClearActions()
	if _, err := h.reconcile("train"); err != nil {
		t.Fatal(err)
	}
	if c := createActions(h); len(c) > 0 {
		t.Errorf("second reconcile created %v", c)
	}
	for _, a := range h.dyn.Actions() {
		if a.GetVerb() == "update" {
			t.Errorf("second reconcile updated the gang: %v", a)
		}
	}
}

func TestReconcileShareGang(t *testing.T) {
	g := newGang("infer", 2, 1, false, "")
	g.Spec.GPUs = tangramv1.MemberGPUs{Share: &tangramv1.GPUShare{Memory: mustQuantity("20Gi"), Compute: ptr.To[int32](40)}}
	g.Spec.Members.MinCount = ptr.To[int32](1)
	h := newHarness(t, nil, g)
	if _, err := h.reconcile("infer"); err != nil {
		t.Fatal(err)
	}
	rct, err := h.kube.ResourceV1().ResourceClaimTemplates(testNS).Get(context.Background(), "infer-gpus", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	req := rct.Spec.Spec.Devices.Requests[0].Exactly
	mem, comp := req.Capacity.Requests[device.CapacityMemory], req.Capacity.Requests[device.CapacityCompute]
	if req.DeviceClassName != device.SharedDeviceClassName || req.Count != 1 || mem.String() != "20Gi" || comp.Value() != 40 {
		t.Errorf("share request %+v", req)
	}
	if len(rct.Spec.Spec.Devices.Constraints) != 0 {
		t.Errorf("a share has no NVLink constraint: %+v", rct.Spec.Spec.Devices.Constraints)
	}
	pg, _ := h.kube.SchedulingV1beta1().PodGroups(testNS).Get(context.Background(), "infer", metav1.GetOptions{})
	if pg.Spec.SchedulingPolicy.Gang.MinCount != 1 || pg.Spec.SchedulingConstraints != nil {
		t.Errorf("podgroup %+v", pg.Spec)
	}
	got := h.gang("infer")
	if meta.FindStatusCondition(got.Status.Conditions, tangramv1.ConditionTopologyEnforced) != nil {
		t.Errorf("a gang without topology key has a topology condition: %+v", got.Status.Conditions)
	}
	// No node at all: the diagnosis says so.
	if !strings.Contains(got.Status.Diagnosis, "no node has room for even one member") {
		t.Errorf("diagnosis %q", got.Status.Diagnosis)
	}
}

func TestReconcileMemberPhases(t *testing.T) {
	tests := []struct {
		name        string
		pods        []*corev1.Pod
		phase       tangramv1.GangPhase
		placed      int32
		running     int32
		diagnosis   string
		wantMembers []tangramv1.MemberStatus
	}{
		{
			name: "all running with devices",
			pods: []*corev1.Pod{
				memberPod(newGang("g", 2, 2, true, ""), "m-0", "node-1", corev1.PodRunning, "m-0-gpus"),
				memberPod(newGang("g", 2, 2, true, ""), "m-1", "node-1", corev1.PodRunning, "m-1-gpus"),
			},
			phase: tangramv1.GangRunning, placed: 2, running: 2,
			wantMembers: []tangramv1.MemberStatus{
				{Pod: "m-0", Node: "node-1", PodPhase: "Running", Claim: "m-0-gpus", Devices: []string{"node-1/gpu-0", "node-1/gpu-1"}},
				{Pod: "m-1", Node: "node-1", PodPhase: "Running", Claim: "m-1-gpus", Devices: []string{"node-1/gpu-2", "node-1/gpu-3"}},
			},
		},
		{
			name: "bound but not running yet",
			pods: []*corev1.Pod{
				memberPod(newGang("g", 2, 2, true, ""), "m-0", "node-1", corev1.PodPending, "m-0-gpus"),
				memberPod(newGang("g", 2, 2, true, ""), "m-1", "node-1", corev1.PodRunning, "m-1-gpus"),
			},
			phase: tangramv1.GangScheduled, placed: 2, running: 1,
		},
		{
			name: "one member placed, one pending: pending with diagnosis of the rest",
			pods: []*corev1.Pod{
				memberPod(newGang("g", 2, 2, true, ""), "m-0", "node-1", corev1.PodRunning, "m-0-gpus"),
				memberPod(newGang("g", 2, 2, true, ""), "m-1", "", corev1.PodPending, ""),
			},
			phase: tangramv1.GangPending, placed: 1, running: 1,
			// m-1-gpus is allocated in the cluster too, so 2 of the 4 pairs are taken.
			diagnosis: "1 of 2 members placed; needs 1 member, each 2 whole cards in one NVLink domain: the cluster has room for 1 member (1 node); " +
				"there is room now, so the scheduler has not retried yet or something besides GPUs (CPU, memory, taints, node selectors) rules nodes out",
		},
		{
			name: "a failed member fails the gang",
			pods: []*corev1.Pod{
				memberPod(newGang("g", 2, 2, true, ""), "m-0", "node-1", corev1.PodFailed, "m-0-gpus"),
				memberPod(newGang("g", 2, 2, true, ""), "m-1", "node-1", corev1.PodRunning, "m-1-gpus"),
			},
			phase: tangramv1.GangFailed, placed: 2, running: 1, diagnosis: "member pod failed: m-0",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			g := newGang("g", 2, 2, true, "")
			cluster := h100Cluster(t, "")
			cluster.Snap.Claims = append(cluster.Snap.Claims,
				allocatedClaim("m-0-gpus", "node-1", "gpu-0", "gpu-1"), allocatedClaim("m-1-gpus", "node-1", "gpu-2", "gpu-3"))
			var objs []runtime.Object
			for _, p := range tc.pods {
				objs = append(objs, p)
			}
			// A pod of another group is not a member.
			other := memberPod(newGang("other", 1, 1, false, ""), "stranger", "node-1", corev1.PodRunning, "")
			objs = append(objs, other)
			h := newHarness(t, cluster, g, objs...)
			if _, err := h.reconcile("g"); err != nil {
				t.Fatal(err)
			}
			st := h.gang("g").Status
			if st.Phase != tc.phase || st.Placed != tc.placed || st.Running != tc.running {
				t.Errorf("phase %s placed %d running %d, want %s %d %d", st.Phase, st.Placed, st.Running, tc.phase, tc.placed, tc.running)
			}
			if st.Diagnosis != tc.diagnosis {
				t.Errorf("diagnosis\n got: %q\nwant: %q", st.Diagnosis, tc.diagnosis)
			}
			if tc.wantMembers != nil {
				if len(st.Members) != len(tc.wantMembers) {
					t.Fatalf("members %+v", st.Members)
				}
				for i := range tc.wantMembers {
					if !equalMember(st.Members[i], tc.wantMembers[i]) {
						t.Errorf("member %d\n got: %+v\nwant: %+v", i, st.Members[i], tc.wantMembers[i])
					}
				}
			}
		})
	}
}

func equalMember(a, b tangramv1.MemberStatus) bool {
	return a.Pod == b.Pod && a.Node == b.Node && a.PodPhase == b.PodPhase && a.Claim == b.Claim &&
		strings.Join(a.Devices, ",") == strings.Join(b.Devices, ",")
}

func TestReconcileFailures(t *testing.T) {
	t.Run("object with the gang's name owned by someone else", func(t *testing.T) {
		g := newGang("train", 2, 1, false, "")
		foreign := &schedulingapi.PodGroup{ObjectMeta: metav1.ObjectMeta{Namespace: testNS, Name: "train"}}
		h := newHarness(t, nil, g, foreign)
		if _, err := h.reconcile("train"); err != nil {
			t.Fatal(err)
		}
		st := h.gang("train").Status
		c := meta.FindStatusCondition(st.Conditions, tangramv1.ConditionObjectsReady)
		if st.Phase != tangramv1.GangFailed || c == nil || c.Reason != "NameConflict" ||
			c.Message != "PodGroup team/train exists and is not owned by this GpuGang; delete or rename it, or rename the GpuGang" {
			t.Errorf("status %+v", st)
		}
		pg, _ := h.kube.SchedulingV1beta1().PodGroups(testNS).Get(context.Background(), "train", metav1.GetOptions{})
		if len(pg.OwnerReferences) != 0 || pg.Spec.SchedulingPolicy.Gang != nil {
			t.Errorf("the foreign PodGroup was changed: %+v", pg)
		}
	})
	t.Run("invalid spec creates nothing", func(t *testing.T) {
		g := newGang("bad", 2, 1, false, "")
		g.Spec.Members.MinCount = ptr.To[int32](5)
		g.Spec.GPUs.Share = &tangramv1.GPUShare{Memory: mustQuantity("1Gi")}
		h := newHarness(t, nil, g)
		if _, err := h.reconcile("bad"); err != nil {
			t.Fatal(err)
		}
		if c := createActions(h); len(c) > 0 {
			t.Errorf("created %v for an invalid gang", c)
		}
		st := h.gang("bad").Status
		want := "invalid GpuGang spec: members.minCount is 5; it must be between 1 and members.count (2); gpus: set exactly one of whole and share"
		if st.Phase != tangramv1.GangFailed || st.Diagnosis != want {
			t.Errorf("phase %s diagnosis %q, want Failed %q", st.Phase, st.Diagnosis, want)
		}
	})
	t.Run("create error is returned for a retry and recorded", func(t *testing.T) {
		g := newGang("train", 2, 1, false, "")
		h := newHarness(t, nil, g)
		h.kube.PrependReactor("create", "workloads", func(k8stesting.Action) (bool, runtime.Object, error) {
			return true, nil, apierrors.NewForbidden(schedulingapi.Resource("workloads"), "train", nil)
		})
		_, err := h.reconcile("train")
		if err == nil || !strings.Contains(err.Error(), "creating Workload team/train") {
			t.Fatalf("err = %v", err)
		}
		c := meta.FindStatusCondition(h.gang("train").Status.Conditions, tangramv1.ConditionObjectsReady)
		if c == nil || c.Status != metav1.ConditionFalse || c.Reason != "CreateFailed" {
			t.Errorf("condition %+v", c)
		}
	})
	t.Run("deleted gang is a no-op", func(t *testing.T) {
		h := newHarness(t, nil, nil)
		if _, err := h.reconcile("gone"); err != nil {
			t.Fatal(err)
		}
		for _, a := range h.kube.Actions() {
			if a.GetVerb() != "list" {
				t.Errorf("action for a missing gang: %v", a)
			}
		}
	})
}

func TestReconcileTopologyUnsupported(t *testing.T) {
	g := newGang("train", 2, 1, false, zone)
	h := newHarness(t, h100Cluster(t, "zone-a"), g)
	// An API server without TopologyAwareWorkloadScheduling forbids the field.
	reject := func(a k8stesting.Action) (bool, runtime.Object, error) {
		obj := a.(k8stesting.CreateAction).GetObject()
		var constrained bool
		switch o := obj.(type) {
		case *schedulingapi.PodGroup:
			constrained = o.Spec.SchedulingConstraints != nil
		case *schedulingapi.Workload:
			constrained = o.Spec.PodGroupTemplates[0].SchedulingConstraints != nil
		}
		if !constrained {
			return false, nil, nil
		}
		return true, nil, apierrors.NewInvalid(schedulingapi.SchemeGroupVersion.WithKind("PodGroup").GroupKind(), "train", field.ErrorList{
			field.Forbidden(field.NewPath("spec", "schedulingConstraints"), "disabled by feature-gate TopologyAwareWorkloadScheduling")})
	}
	h.kube.PrependReactor("create", "podgroups", reject)
	h.kube.PrependReactor("create", "workloads", reject)
	if _, err := h.reconcile("train"); err != nil {
		t.Fatal(err)
	}
	pg, err := h.kube.SchedulingV1beta1().PodGroups(testNS).Get(context.Background(), "train", metav1.GetOptions{})
	if err != nil || pg.Spec.SchedulingConstraints != nil || pg.Spec.SchedulingPolicy.Gang.MinCount != 2 {
		t.Fatalf("podgroup %+v, %v", pg, err)
	}
	c := meta.FindStatusCondition(h.gang("train").Status.Conditions, tangramv1.ConditionTopologyEnforced)
	if c == nil || c.Status != metav1.ConditionFalse || c.Reason != "NotSupportedByCluster" || !strings.Contains(c.Message, "nodeSelector on "+zone) {
		t.Errorf("topology condition %+v", c)
	}
}

func TestMemberClaimForPodWithoutTemplate(t *testing.T) {
	g := newGang("g", 2, 1, false, "")
	p := memberPod(g, "m-0", "", corev1.PodPending, "")
	p.Spec.ResourceClaims = nil
	m := ObserveMembers(g, []*corev1.Pod{p}, map[string]*resourceapi.ResourceClaim{})
	want := "only 1 of the 2 member pods the gang needs exist (" + podsHint(g) + "); member pod m-0 does not use ResourceClaimTemplate g-gpus, so it gets no GPUs from the gang"
	if got := memberCountProblem(g, m); got != want {
		t.Errorf("got  %s\nwant %s", got, want)
	}
}

func TestDevicesOf(t *testing.T) {
	share := allocatedClaim("s", "node-1", "gpu-3")
	r := &share.Status.Allocation.Devices.Results[0]
	r.ShareID = ptr.To(types.UID("share-1"))
	r.ConsumedCapacity = map[resourceapi.QualifiedName]resource.Quantity{
		device.CapacityMemory: mustQuantity("20Gi"), device.CapacityCompute: mustQuantity("40"),
	}
	other := allocatedClaim("o", "node-1", "gpu-0")
	other.Status.Allocation.Devices.Results[0].Driver = "other.example.com"
	tests := []struct {
		name      string
		claim     *resourceapi.ResourceClaim
		withShare bool
		want      string
	}{
		{"share shown for a share gang", share, true, "node-1/gpu-3 (20 GiB, 40% compute)"},
		{"whole gang on a shareable card", share, false, "node-1/gpu-3"},
		{"other drivers are left out", other, true, ""},
		{"unallocated", &resourceapi.ResourceClaim{}, true, ""},
	}
	for _, tc := range tests {
		if got := strings.Join(devicesOf(tc.claim, tc.withShare), ","); got != tc.want {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
}
