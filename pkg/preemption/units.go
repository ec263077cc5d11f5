package preemption

import (
	"cmp"
	"slices"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	schedulingv1beta1 "k8s.io/api/scheduling/v1beta1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// Gang is a running pod group whose members may only be disrupted
// together: a PodGroup (scheduling.k8s.io/v1beta1) whose
// spec.disruptionMode is All. kube-scheduler 1.37's workload-aware
// preemption reads the field the same way (getHighestAllAncestor in
// pkg/scheduler/framework/preemption) and treats such a group as one
// victim. Preemption here does too: it evicts all of a gang's running
// members, on every node, or none of them; the gang counts as one victim of
// the group's priority, and everything its members hold counts as freed. A
// pod of a group with disruptionMode Single (the API's default), or whose
// PodGroup is unknown, is a victim on its own, as upstream.
type Gang struct {
	// Namespace and Name are the PodGroup's.
	Namespace, Name string
	// Priority is the group's spec.priority (0 when unset, as
	// kube-scheduler's util.PodGroupPriority reads it).
	Priority int32
	// Pods are the members bound (or being bound) to nodes, on every node.
	Pods []*v1.Pod
	// Claims are the allocated claims reserved for its members, on every
	// node: what evicting the gang frees beyond the node preempted on.
	Claims []*resourceapi.ResourceClaim
}

// Key is "namespace/name".
func (g *Gang) Key() string { return g.Namespace + "/" + g.Name }

// DisruptedTogether says whether a PodGroup's members may only be disrupted
// together: spec.disruptionMode.all is set.
func DisruptedTogether(pg *schedulingv1beta1.PodGroup) bool {
	return pg != nil && pg.Spec.DisruptionMode != nil && pg.Spec.DisruptionMode.All != nil
}

// PodGroupOf is the name of the PodGroup pod belongs to; "" for none.
func PodGroupOf(pod *v1.Pod) string {
	if g := pod.Spec.SchedulingGroup; g != nil && g.PodGroupName != nil {
		return *g.PodGroupName
	}
	return ""
}

// Gangs groups pods (the cluster's pods bound or being bound to nodes) by
// their spec.schedulingGroup.podGroupName and returns the groups whose
// PodGroup, as podGroup finds it (nil: unknown), has disruptionMode All,
// sorted by key, each with the claims of claims reserved for its members.
func Gangs(pods []*v1.Pod, podGroup func(namespace, name string) *schedulingv1beta1.PodGroup, claims []*resourceapi.ResourceClaim) []*Gang {
	byKey := map[string]*Gang{}
	member := map[types.UID]*Gang{}
	for _, p := range pods {
		name := PodGroupOf(p)
		if name == "" {
			continue
		}
		key := p.Namespace + "/" + name
		g, seen := byKey[key]
		if !seen {
			pg := podGroup(p.Namespace, name)
			if DisruptedTogether(pg) {
				g = &Gang{Namespace: p.Namespace, Name: name}
				if pg.Spec.Priority != nil {
					g.Priority = *pg.Spec.Priority
				}
			}
			byKey[key] = g // nil: its members are victims one by one
		}
		if g != nil {
			g.Pods = append(g.Pods, p)
			member[p.UID] = g
		}
	}
	for _, c := range claims {
		if c.Status.Allocation == nil {
			continue
		}
		for _, ref := range c.Status.ReservedFor {
			if g := member[ref.UID]; g != nil && ref.APIGroup == "" && ref.Resource == "pods" {
				if !slices.Contains(g.Claims, c) {
					g.Claims = append(g.Claims, c)
				}
			}
		}
	}
	var out []*Gang
	for _, g := range byKey {
		if g != nil {
			out = append(out, g)
		}
	}
	slices.SortFunc(out, func(a, b *Gang) int { return cmp.Compare(a.Key(), b.Key()) })
	return out
}

// unit is one victim as preemption counts them: a pod on its own, or all
// running members of a gang.
type unit struct {
	pods []*v1.Pod
	gang *Gang // nil for a pod on its own
	// priority is the pod's, or the gang's (its spec.priority, or a
	// member's if higher: a gang is never cheaper than its most important
	// member).
	priority int32
	// start is the pod's start time, or the gang's earliest member's.
	start metav1.Time
}

func podUnit(p *v1.Pod) unit {
	return unit{pods: []*v1.Pod{p}, priority: PodPriority(p), start: startTime(p)}
}

func gangUnit(g *Gang, running []*v1.Pod) unit {
	u := unit{pods: running, gang: g, priority: g.Priority}
	for i, p := range running {
		u.priority = max(u.priority, PodPriority(p))
		if t := startTime(p); i == 0 || t.Before(&u.start) {
			u.start = t
		}
	}
	return u
}

// lessImportantFirst orders victims as the scheduler prefers to evict
// them: the lower priority first; at equal priority a pod on its own before
// a gang, and a smaller gang before a bigger one (kube-scheduler's
// MoreImportantVictim: "PodGroups are more important than individual Pods
// to preserve group integrity", then group size); then the newest first.
func lessImportantFirst(a, b unit) int {
	if c := cmp.Compare(a.priority, b.priority); c != 0 {
		return c
	}
	if ag, bg := a.gang != nil, b.gang != nil; ag != bg {
		if ag {
			return 1
		}
		return -1
	}
	if a.gang != nil {
		if c := cmp.Compare(len(a.pods), len(b.pods)); c != 0 {
			return c
		}
	}
	if c := b.start.Compare(a.start.Time); c != 0 {
		return c
	}
	return cmp.Compare(a.pods[0].UID, b.pods[0].UID)
}

// victimUnits is a decision's victims counted as units: the priority of
// each (a gang counts once), and how many are gangs.
func victimUnits(victims []*v1.Pod, gangs []*Gang) (priorities []int32, nGangs int) {
	inGang := map[types.UID]*Gang{}
	for _, g := range gangs {
		for _, p := range g.Pods {
			inGang[p.UID] = g
		}
	}
	gangPriority := map[*Gang]int32{}
	for _, v := range victims {
		g := inGang[v.UID]
		if g == nil {
			priorities = append(priorities, PodPriority(v))
			continue
		}
		if prio, seen := gangPriority[g]; seen {
			gangPriority[g] = max(prio, PodPriority(v))
		} else {
			gangPriority[g] = max(g.Priority, PodPriority(v))
		}
	}
	for _, g := range gangs {
		if prio, ok := gangPriority[g]; ok {
			priorities = append(priorities, prio)
		}
	}
	return priorities, len(gangPriority)
}
