package preempt

import (
	"context"
	"fmt"
	"slices"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	corev1helpers "k8s.io/component-helpers/scheduling/corev1"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"

	"github.com/tangram-gpu/tangram/pkg/preemption"
)

var _ fwk.PodGroupPostFilterPlugin = (*Plugin)(nil)

// PodGroupPostFilter preempts for a gang (a PodGroup whose pod-group
// scheduling cycle failed; kube-scheduler runs no per-pod PostFilter for
// its members): it evicts lower-priority pods only when every unscheduled
// member's claims can then be allocated (pkg/preemption.SelectGangVictims),
// and nominates each member to its node.
func (p *Plugin) PodGroupPostFilter(ctx context.Context, _ fwk.PodGroupCycleState, pg fwk.PodGroupInfo, _ fwk.PodGroupSchedulingFunc) (*fwk.PodGroupPostFilterResult, *fwk.Status) {
	result, status, outcome := p.podGroupPostFilter(ctx, pg)
	if outcome != "" {
		preemptions.WithLabelValues(kindGang, outcome).Inc()
	}
	return result, status
}

func (p *Plugin) podGroupPostFilter(ctx context.Context, pg fwk.PodGroupInfo) (*fwk.PodGroupPostFilterResult, *fwk.Status, string) {
	gang := pg.GetNamespace() + "/" + pg.GetName()
	logger := klog.FromContext(ctx).WithValues("plugin", Name, "podGroup", gang)
	ctx = klog.NewContext(ctx, logger)
	pods := pg.GetUnscheduledPods()
	if len(pods) == 0 {
		return nil, fwk.NewStatus(fwk.Unschedulable, "the pod group has no unscheduled member"), ""
	}
	dra := p.handle.SharedDRAManager()
	if dra == nil {
		return nil, fwk.NewStatus(fwk.Unschedulable, "no DRA state"), ""
	}
	var members []preemption.Member
	uids := map[types.UID]bool{}
	for _, pod := range pods {
		claims, allocated, err := podClaims(pod, dra.ResourceClaims())
		if err != nil {
			return nil, fwk.AsStatus(err), resultError
		}
		if len(claims) == 0 || allocated {
			// Devices are not (all of) what holds this member back.
			return nil, fwk.NewStatus(fwk.Unschedulable, fmt.Sprintf("member %s/%s has no pending ResourceClaims or some allocated already", pod.Namespace, pod.Name)), ""
		}
		members = append(members, preemption.Member{Pod: pod, Claims: claims})
		uids[pod.UID] = true
	}
	state, pdbs, err := p.readStateAndBudgets(dra)
	if err != nil {
		return nil, fwk.AsStatus(err), resultError
	}
	nodeInfos, err := p.handle.SnapshotSharedLister().NodeInfos().List()
	if err != nil {
		return nil, fwk.AsStatus(fmt.Errorf("listing nodes: %w", err)), resultError
	}
	evicted := p.evictedNotSeen()
	var nodes []preemption.Node
	for _, ni := range nodeInfos {
		if ni.Node() == nil || len(state.slicesByNode[ni.Node().Name]) == 0 || !admits(logger, ni.Node(), pods) {
			continue
		}
		node := state.node(ni)
		node.Evicted = evicted
		nominated, err := p.nominated(pods[0], node.Name, dra.ResourceClaims())
		if err != nil {
			return nil, fwk.AsStatus(err), resultError
		}
		node.Nominated = slices.DeleteFunc(nominated, func(n preemption.Nominated) bool { return uids[n.Pod.UID] })
		nodes = append(nodes, node)
	}
	d, err := preemption.SelectGangVictims(ctx, nodes, members, pdbs, preemption.Limits{})
	if err != nil {
		return nil, fwk.AsStatus(err), resultError
	}
	if !d.Fits {
		logger.V(2).Info("Gang preemption cannot help", "reason", d.Reason)
		return nil, fwk.NewStatus(fwk.Unschedulable, "preemption cannot make room for every member of gang "+gang+": "+d.Reason), resultNotHelpful
	}
	logger.V(2).Info("Preempting for a gang's GPU claims", "members", len(members), "victims", klog.KObjSlice(d.Victims))
	priority := preemption.PodPriority(pods[0])
	by := fmt.Sprintf("gang %s (%d members, priority %d)", gang, len(members), priority)
	if status, result := p.evictVictims(ctx, pods[0], by, kindGang, d.Victims, d.Gangs, d.Freed); status != nil {
		return nil, status, result
	}
	result := &fwk.PodGroupPostFilterResult{NominatingInfos: map[types.NamespacedName]*fwk.NominatingInfo{}}
	for _, m := range members {
		result.NominatingInfos[types.NamespacedName{Namespace: m.Pod.Namespace, Name: m.Pod.Name}] =
			&fwk.NominatingInfo{NominatedNodeName: d.Nodes[m.Pod.UID], NominatingMode: fwk.ModeOverride}
	}
	if len(d.Victims) == 0 {
		return result, fwk.NewStatus(fwk.Success), resultWaiting
	}
	p.announceGang(gang, members, d)
	return result, fwk.NewStatus(fwk.Success), resultEvicted
}

// admits is a coarse stand-in for the filters other than DynamicResources
// for every member: the node is schedulable, matches the pods' node
// selector and required affinity and has no taint they do not tolerate.
// CPU, memory and inter-pod rules are not checked.
func admits(logger klog.Logger, node *v1.Node, pods []*v1.Pod) bool {
	if node.Spec.Unschedulable {
		return false
	}
	for _, pod := range pods {
		if ok, _ := nodeaffinity.GetRequiredNodeAffinity(pod).Match(node); !ok {
			return false
		}
		if _, untolerated := corev1helpers.FindMatchingUntoleratedTaint(logger, node.Spec.Taints, pod.Spec.Tolerations, func(t *v1.Taint) bool {
			return t.Effect == v1.TaintEffectNoSchedule || t.Effect == v1.TaintEffectNoExecute
		}, false); untolerated {
			return false
		}
	}
	return true
}

// announceGang tells each member which pods the gang evicts.
func (p *Plugin) announceGang(gang string, members []preemption.Member, d preemption.GangDecision) {
	r := p.handle.EventRecorder()
	if r == nil {
		return
	}
	// "" as the node: every victim's node is named.
	victimText := describeVictims(d.Victims, d.Gangs, d.Freed, "")
	for _, m := range members {
		r.Eventf(m.Pod, nil, v1.EventTypeNormal, "Preempting", "Preempting", "%s",
			truncate(fmt.Sprintf("Evicting %d lower-priority pod(s) so that all %d members of gang %s fit (this one on node %s): %s",
				len(d.Victims), len(members), gang, d.Nodes[m.Pod.UID], victimText)))
	}
}
