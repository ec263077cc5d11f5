package gang

import (
	"fmt"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	schedulingapi "k8s.io/api/scheduling/v1beta1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/utils/ptr"

	tangramv1 "github.com/tangram-gpu/tangram/api/tangram/v1alpha1"
	"github.com/tangram-gpu/tangram/pkg/cluster"
	"github.com/tangram-gpu/tangram/pkg/device"
)

// ValidateSpec repeats the CRD's checks for a gang that reached the
// controller without them (e.g. a CRD installed without validation), so a
// bad spec is reported in status instead of producing broken objects.
func ValidateSpec(spec *tangramv1.GpuGangSpec) error {
	var problems []string
	if spec.Members.Count < 1 {
		problems = append(problems, fmt.Sprintf("members.count is %d; it must be at least 1", spec.Members.Count))
	}
	if m := spec.Members.MinCount; m != nil && (*m < 1 || *m > spec.Members.Count) {
		problems = append(problems, fmt.Sprintf("members.minCount is %d; it must be between 1 and members.count (%d)", *m, spec.Members.Count))
	}
	gpus := spec.GPUs
	switch {
	case (gpus.Whole == nil) == (gpus.Share == nil):
		problems = append(problems, "gpus: set exactly one of whole and share")
	case gpus.Whole != nil && gpus.Whole.Count < 1:
		problems = append(problems, fmt.Sprintf("gpus.whole.count is %d; it must be at least 1", gpus.Whole.Count))
	case gpus.Share != nil && gpus.Share.Memory.Sign() <= 0:
		problems = append(problems, fmt.Sprintf("gpus.share.memory is %s; it must be positive, e.g. 20Gi", gpus.Share.Memory.String()))
	case gpus.Share != nil && gpus.Share.Compute != nil && (*gpus.Share.Compute < 0 || *gpus.Share.Compute > 100):
		problems = append(problems, fmt.Sprintf("gpus.share.compute is %d; it must be a percentage between 0 and 100", *gpus.Share.Compute))
	}
	if n := spec.PriorityClassName; n != "" {
		if errs := validation.IsDNS1123Subdomain(n); len(errs) > 0 {
			problems = append(problems, fmt.Sprintf("priorityClassName %q is not a PriorityClass name: %s", n, strings.Join(errs, "; ")))
		}
	}
	if len(problems) > 0 {
		return fmt.Errorf("invalid GpuGang spec: %s", strings.Join(problems, "; "))
	}
	return nil
}

// IsMember reports whether the pod joined the gang's PodGroup.
func IsMember(g *tangramv1.GpuGang, pod *corev1.Pod) bool {
	sg := pod.Spec.SchedulingGroup
	return pod.Namespace == g.Namespace && sg != nil && sg.PodGroupName != nil && *sg.PodGroupName == PodGroupName(g)
}

// memberClaimRef is the pod's entry in spec.resourceClaims that uses the
// gang's template, or "" when the pod does not use it.
func memberClaimRef(g *tangramv1.GpuGang, pod *corev1.Pod) string {
	for _, rc := range pod.Spec.ResourceClaims {
		if rc.ResourceClaimTemplateName != nil && *rc.ResourceClaimTemplateName == TemplateName(g) {
			return rc.Name
		}
	}
	return ""
}

// claimNameOf is the name of the claim the resourceclaim controller made
// for the pod's entry, once it exists.
func claimNameOf(pod *corev1.Pod, entry string) string {
	for _, s := range pod.Status.ResourceClaimStatuses {
		if s.Name == entry && s.ResourceClaimName != nil {
			return *s.ResourceClaimName
		}
	}
	return ""
}

// Members is what the gang's member pods show.
type Members struct {
	Statuses []tangramv1.MemberStatus
	Placed   int32
	Running  int32
	Failed   []string
	// WithoutTemplate are member pods that do not reference the gang's
	// ResourceClaimTemplate, a likely mistake.
	WithoutTemplate []string
	// pods are the member pods, in Statuses' order.
	pods []*corev1.Pod
}

// ObserveMembers summarises the member pods; claims maps claim names in the
// gang's namespace to claims.
func ObserveMembers(g *tangramv1.GpuGang, pods []*corev1.Pod, claims map[string]*resourceapi.ResourceClaim) Members {
	var m Members
	sorted := append([]*corev1.Pod(nil), pods...)
	sort.Slice(sorted, func(i, j int) bool { return cluster.NaturalLess(sorted[i].Name, sorted[j].Name) })
	for _, pod := range sorted {
		if !IsMember(g, pod) {
			continue
		}
		ms := tangramv1.MemberStatus{Pod: pod.Name, Node: pod.Spec.NodeName, PodPhase: string(pod.Status.Phase)}
		entry := memberClaimRef(g, pod)
		if entry == "" {
			m.WithoutTemplate = append(m.WithoutTemplate, pod.Name)
		} else {
			ms.Claim = claimNameOf(pod, entry)
			if c := claims[ms.Claim]; c != nil {
				// On shareable cards even a whole-card result has a share ID
				// and consumes all memory; only a share's size is worth showing.
				ms.Devices = devicesOf(c, g.Spec.GPUs.Share != nil)
			}
		}
		if ms.Node != "" {
			m.Placed++
		}
		switch pod.Status.Phase {
		case corev1.PodRunning, corev1.PodSucceeded:
			m.Running++
		case corev1.PodFailed:
			m.Failed = append(m.Failed, pod.Name)
		}
		m.Statuses = append(m.Statuses, ms)
		m.pods = append(m.pods, pod)
	}
	return m
}

// devicesOf lists our driver's devices allocated to the claim: "pool/gpu-3",
// or with withShare "pool/gpu-3 (20 GiB, 40% compute)".
func devicesOf(c *resourceapi.ResourceClaim, withShare bool) []string {
	if c.Status.Allocation == nil {
		return nil
	}
	var out []string
	for _, r := range c.Status.Allocation.Devices.Results {
		if r.Driver != device.DriverName {
			continue
		}
		s := r.Pool + "/" + r.Device
		if withShare && r.ShareID != nil {
			var parts []string
			if q, ok := r.ConsumedCapacity[device.CapacityMemory]; ok {
				parts = append(parts, cluster.FormatBytes(q.Value()))
			}
			if q, ok := r.ConsumedCapacity[device.CapacityCompute]; ok && q.Sign() > 0 {
				parts = append(parts, fmt.Sprintf("%d%% compute", q.Value()))
			}
			if len(parts) > 0 {
				s += " (" + strings.Join(parts, ", ") + ")"
			}
		}
		out = append(out, s)
	}
	return out
}

// Phase follows the members: any failed member fails the gang; otherwise
// the gang is Running once minCount members run (or completed), Scheduled
// once minCount are bound to nodes, Pending before.
func Phase(g *tangramv1.GpuGang, m Members) tangramv1.GangPhase {
	minCount := g.Spec.MinMembers()
	switch {
	case len(m.Failed) > 0:
		return tangramv1.GangFailed
	case m.Running >= minCount:
		return tangramv1.GangRunning
	case m.Placed >= minCount:
		return tangramv1.GangScheduled
	}
	return tangramv1.GangPending
}

// podsHint says what member pods must set, for messages.
func podsHint(g *tangramv1.GpuGang) string {
	return fmt.Sprintf("member pods set spec.schedulingGroup.podGroupName: %s and a spec.resourceClaims entry with resourceClaimTemplateName: %s",
		PodGroupName(g), TemplateName(g))
}

// memberCountProblem explains too few member pods or pods without the
// template; "" when there is nothing to say.
func memberCountProblem(g *tangramv1.GpuGang, m Members) string {
	var parts []string
	minCount := g.Spec.MinMembers()
	if n := int32(len(m.Statuses)); n < minCount {
		parts = append(parts, fmt.Sprintf("only %d of the %d member pods the gang needs exist (%s)", n, minCount, podsHint(g)))
	}
	if len(m.WithoutTemplate) > 0 {
		parts = append(parts, fmt.Sprintf("member %s %s %s not use ResourceClaimTemplate %s, so %s no GPUs from the gang",
			plural(len(m.WithoutTemplate), "pod", "pods"), strings.Join(m.WithoutTemplate, ", "),
			plural(len(m.WithoutTemplate), "does", "do"), TemplateName(g), plural(len(m.WithoutTemplate), "it gets", "they get")))
	}
	return strings.Join(parts, "; ")
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// setPriorityCondition compares the member pods' priority with the
// PodGroup's, which is what the scheduler does before it schedules the
// group ("all pods in a single pod group should have the same priority as
// the pod group's priority"; a nil priority counts as 0 on both sides).
// The condition is False when a member differs, True when the gang names a
// PriorityClass and every member matches, and absent otherwise (no
// PodGroup yet, or no class and no mismatch), so a gang without a class
// keeps the status it had.
func setPriorityCondition(status *tangramv1.GpuGangStatus, g *tangramv1.GpuGang, pg *schedulingapi.PodGroup, pods []*corev1.Pod) {
	if pg == nil {
		meta.RemoveStatusCondition(&status.Conditions, tangramv1.ConditionMemberPriority)
		return
	}
	want := ptr.Deref(pg.Spec.Priority, 0)
	var differ []string
	for _, pod := range pods {
		if got := ptr.Deref(pod.Spec.Priority, 0); got != want {
			class := pod.Spec.PriorityClassName
			if class == "" {
				class = "no priorityClassName"
			} else {
				class = "priorityClassName " + class
			}
			differ = append(differ, fmt.Sprintf("%s (priority %d, %s)", pod.Name, got, class))
		}
	}
	groupClass := "no PriorityClass"
	if pg.Spec.PriorityClassName != "" {
		groupClass = "PriorityClass " + pg.Spec.PriorityClassName
	}
	switch {
	case len(differ) > 0:
		fix := "remove spec.priorityClassName from the member pods"
		if pg.Spec.PriorityClassName != "" {
			fix = "set spec.priorityClassName: " + pg.Spec.PriorityClassName + " on every member pod"
		}
		meta.SetStatusCondition(&status.Conditions, metav1.Condition{Type: tangramv1.ConditionMemberPriority,
			Status: metav1.ConditionFalse, Reason: "PriorityDiffers", ObservedGeneration: g.Generation,
			Message: fmt.Sprintf("the scheduler refuses the group: member %s %s from the PodGroup's priority %d (%s); %s (pods cannot change it: recreate them)",
				plural(len(differ), "pod", "pods"), strings.Join(differ, ", ")+" "+plural(len(differ), "differs", "differ"), want, groupClass, fix)})
	case g.Spec.PriorityClassName != "":
		meta.SetStatusCondition(&status.Conditions, metav1.Condition{Type: tangramv1.ConditionMemberPriority,
			Status: metav1.ConditionTrue, Reason: "PriorityMatches", ObservedGeneration: g.Generation,
			Message: fmt.Sprintf("every member pod found has the PodGroup's priority %d (%s)", want, groupClass)})
	default:
		meta.RemoveStatusCondition(&status.Conditions, tangramv1.ConditionMemberPriority)
	}
}
