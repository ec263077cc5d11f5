// Package preempt is Tangram's kube-scheduler PostFilter plugin: priority
// preemption for pods whose ResourceClaims cannot be allocated. The stock
// DefaultPreemption cannot help such pods in Kubernetes 1.37 (its DRA filter
// does not see pods removed in its simulation); this plugin simulates
// removing lower-priority pods' claims and runs the real allocator
// (pkg/preemption), then nominates the node and evicts the victims through
// the Eviction API, so PodDisruptionBudgets are enforced by the API server
// as well; it checks every victim's budget, for all of them together,
// before the first eviction, and evicts none if one would be refused. A
// running gang (a PodGroup of disruptionMode All) is one victim, evicted
// whole or not at all. The preemptor binds once the resourceclaim controller has
// deallocated the victims' claims. Devices being freed are counted once:
// pods already nominated to a node keep first claim on them (see
// pkg/preemption). As a PodGroupPostFilter it preempts for a whole gang
// (gang.go). Each preemption leaves events on the preemptor and the victims
// naming the claims and devices, and counts in two metrics (metrics.go).
package preempt

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	v1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	resourceapi "k8s.io/api/resource/v1"
	schedulingv1beta1 "k8s.io/api/scheduling/v1beta1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	policylisters "k8s.io/client-go/listers/policy/v1"
	"k8s.io/dynamic-resource-allocation/resourceclaim"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"
	"sigs.k8s.io/yaml"

	"github.com/tangram-gpu/tangram/pkg/preemption"
)

// Name is the plugin name in KubeSchedulerConfiguration.
const Name = "TangramPreemption"

// draPlugin is the name of the stock DRA filter whose rejections this
// plugin can resolve.
const draPlugin = "DynamicResources"

// Plugin implements PostFilter.
type Plugin struct {
	handle fwk.Handle
	pdbs   policylisters.PodDisruptionBudgetLister

	// evicted are the pods this plugin evicted that the scheduler's
	// snapshot may still show running (its informer lags the Eviction
	// API): they count as terminating, so no other preemptor evicts or
	// displaces them again.
	evicted preemption.EvictedPods
}

var _ fwk.PostFilterPlugin = (*Plugin)(nil)

// New is the plugin factory registered with the scheduler. It takes no
// arguments.
func New(_ context.Context, obj runtime.Object, h fwk.Handle) (fwk.Plugin, error) {
	if u, ok := obj.(*runtime.Unknown); ok && u != nil && len(u.Raw) > 0 {
		var none struct{}
		if err := yaml.UnmarshalStrict(u.Raw, &none); err != nil {
			return nil, fmt.Errorf("%s takes no args (remove its pluginConfig entry): %w", Name, err)
		}
	}
	register()
	return &Plugin{handle: h, pdbs: h.SharedInformerFactory().Policy().V1().PodDisruptionBudgets().Lister()}, nil
}

func (*Plugin) Name() string { return Name }

// PostFilter looks for a node where evicting lower-priority pods lets the
// pod's claims be allocated, nominates the best one and evicts its victims.
func (p *Plugin) PostFilter(ctx context.Context, state fwk.CycleState, pod *v1.Pod, statuses fwk.NodeToStatusReader) (*fwk.PostFilterResult, *fwk.Status) {
	result, status, outcome := p.postFilter(ctx, state, pod, statuses)
	if outcome != "" {
		preemptions.WithLabelValues(kindPod, outcome).Inc()
	}
	return result, status
}

// postFilter is PostFilter; outcome is the metric's result label, empty
// when the pod was no preemptor at all (no pending claims, policy Never,
// rejected for other reasons than its claims).
func (p *Plugin) postFilter(ctx context.Context, _ fwk.CycleState, pod *v1.Pod, statuses fwk.NodeToStatusReader) (*fwk.PostFilterResult, *fwk.Status, string) {
	logger := klog.FromContext(ctx).WithValues("plugin", Name, "pod", klog.KObj(pod))
	ctx = klog.NewContext(ctx, logger)
	if !preemption.MayPreempt(pod) {
		return nil, fwk.NewStatus(fwk.Unschedulable, "the pod's preemptionPolicy is Never"), ""
	}
	if g := pod.Spec.SchedulingGroup; g != nil && g.PodGroupName != nil {
		// A gang member alone must not evict anyone: the gang may still
		// not fit. Gangs preempt as a whole in the pod-group cycle
		// (PodGroupPostFilter), which needs GenericWorkload on.
		return nil, fwk.NewStatus(fwk.Unschedulable, fmt.Sprintf("the pod is a member of PodGroup %s: GPU preemption for gangs runs for the whole group (tangram-scheduler needs --feature-gates=GenericWorkload=true)", *g.PodGroupName)), ""
	}
	dra := p.handle.SharedDRAManager()
	if dra == nil {
		return nil, fwk.NewStatus(fwk.Unschedulable, "no DRA state"), ""
	}
	claims, allocated, err := podClaims(pod, dra.ResourceClaims())
	if err != nil {
		return nil, fwk.AsStatus(err), resultError
	}
	if len(claims) == 0 {
		return nil, fwk.NewStatus(fwk.Unschedulable, "the pod has no pending ResourceClaims"), ""
	}
	if allocated {
		// An allocated claim ties the pod to its node; evicting for the
		// rest is left to a later version.
		return nil, fwk.NewStatus(fwk.Unschedulable, "some of the pod's ResourceClaims are allocated already"), ""
	}
	// The DRA filter rejects a node whose devices are taken as
	// UnschedulableAndUnresolvable, since the stock preemption cannot free
	// devices; both codes are looked at.
	var nodeInfos []fwk.NodeInfo
	for _, code := range []fwk.Code{fwk.Unschedulable, fwk.UnschedulableAndUnresolvable} {
		nis, err := statuses.NodesForStatusCode(p.handle.SnapshotSharedLister().NodeInfos(), code)
		if err != nil {
			return nil, fwk.AsStatus(fmt.Errorf("listing the nodes that rejected the pod: %w", err)), resultError
		}
		nodeInfos = append(nodeInfos, nis...)
	}
	// Only nodes whose first failing filter was DRA's: another filter's
	// verdict (CPU, affinity, taints) is not something freeing devices fixes.
	nodeInfos = slices.DeleteFunc(nodeInfos, func(ni fwk.NodeInfo) bool {
		return ni.Node() == nil || statuses.Get(ni.Node().Name).Plugin() != draPlugin
	})
	if len(nodeInfos) == 0 {
		return nil, fwk.NewStatus(fwk.Unschedulable, "no node rejected the pod only for its ResourceClaims"), ""
	}
	state, pdbs, err := p.readStateAndBudgets(dra)
	if err != nil {
		return nil, fwk.AsStatus(err), resultError
	}
	evicted := p.evictedNotSeen()
	var best *preemption.NodeChoice
	var reasons []string
	for _, ni := range nodeInfos {
		node := state.node(ni)
		node.Evicted = evicted
		if node.Nominated, err = p.nominated(pod, node.Name, dra.ResourceClaims()); err != nil {
			return nil, fwk.AsStatus(err), resultError
		}
		d, err := preemption.SelectVictims(ctx, node, pod, claims, pdbs, preemption.Limits{})
		if err != nil {
			return nil, fwk.AsStatus(err), resultError
		}
		if !d.Fits {
			logger.V(5).Info("Preemption cannot help on node", "node", node.Name, "reason", d.Reason)
			reasons = append(reasons, d.Reason)
			continue
		}
		c := &preemption.NodeChoice{Node: node.Name, Decision: d}
		if best == nil || c.Better(best) {
			best = c
		}
	}
	if best == nil {
		return nil, fwk.NewStatus(fwk.Unschedulable, "preemption cannot make room for the pod's claims: "+summarize(reasons)), resultNotHelpful
	}
	d := best.Decision
	logger.V(2).Info("Preempting for GPU claims", "node", best.Node, "victims", klog.KObjSlice(d.Victims),
		"nominatedFirst", d.Reserved, "displacedNominated", d.Displaced)
	if status, result := p.evictVictims(ctx, pod, describePreemptor(pod), kindPod, d.Victims, d.Gangs, d.Freed); status != nil {
		return nil, status, result
	}
	outcome := resultWaiting
	if len(d.Victims) > 0 {
		outcome = resultEvicted
		p.announce(pod, best.Node, claims, d)
	}
	return &fwk.PostFilterResult{NominatingInfo: &fwk.NominatingInfo{NominatedNodeName: best.Node, NominatingMode: fwk.ModeOverride}},
		fwk.NewStatus(fwk.Success), outcome
}

// summarize lists the distinct reasons, for the pod's event.
func summarize(reasons []string) string {
	slices.Sort(reasons)
	reasons = slices.Compact(reasons)
	return strings.Join(reasons, "; ")
}

// evict asks the API server to evict victim, so its PodDisruptionBudgets
// are checked once more; a victim already gone is fine. The victim's event
// names the preemptor, the node and the claims and devices it frees.
func (p *Plugin) evict(ctx context.Context, preemptor, victim *v1.Pod, node string, freed []preemption.Freed) error {
	return p.evictFor(ctx, preemptor, describePreemptor(preemptor), victim, node, nil, freed)
}

// describePreemptor names a pod preempting for itself, for the events.
func describePreemptor(preemptor *v1.Pod) string {
	return fmt.Sprintf("pod %s/%s (priority %d)", preemptor.Namespace, preemptor.Name, preemption.PodPriority(preemptor))
}

// evictVictims evicts the victims of one decision, each on its node, and
// counts them under kind (a pod or a gang). Before it evicts any, it reads
// the victims' PodDisruptionBudgets from the API server and checks that the
// Eviction API would let all of them go together
// (pkg/preemption.EvictAll): when one would be refused, none is evicted. A
// nil status: all evicted. gangs are the decision's gangs, named in their
// members' events.
func (p *Plugin) evictVictims(ctx context.Context, preemptor *v1.Pod, by, kind string, victimPods []*v1.Pod, gangs []*preemption.Gang, freed []preemption.Freed) (*fwk.Status, string) {
	if len(victimPods) == 0 {
		return nil, ""
	}
	pdbs, err := p.liveBudgets(ctx, victimPods)
	if err != nil {
		return fwk.AsStatus(err), resultError
	}
	gangOf := map[types.UID]*preemption.Gang{}
	for _, g := range gangs {
		for _, m := range g.Pods {
			gangOf[m.UID] = g
		}
	}
	err = preemption.EvictAll(ctx, victimPods, pdbs, func(ctx context.Context, victim *v1.Pod) error {
		if err := p.evictFor(ctx, preemptor, by, victim, victim.Spec.NodeName, gangOf[victim.UID], freedBy(freed, victim)); err != nil {
			return err
		}
		victims.WithLabelValues(kind, evictionReason(freedBy(freed, victim))).Inc()
		return nil
	})
	var refused *preemption.EvictionRefused
	switch {
	case err == nil:
		return nil, ""
	case errors.As(err, &refused):
		klog.FromContext(ctx).V(2).Info("Not preempting: a PodDisruptionBudget would refuse a victim", "budget", refused.Budget, "victims", refused.Victims, "reason", refused.Reason)
		return fwk.NewStatus(fwk.Unschedulable, "no victim evicted: "+err.Error()), resultRefused
	case apierrors.IsTooManyRequests(err):
		// A PodDisruptionBudget changed between the check and the
		// eviction: not an error, the pod is retried with the budget in
		// view.
		return fwk.NewStatus(fwk.Unschedulable, err.Error()), resultRefused
	}
	return fwk.AsStatus(err), resultError
}

// liveBudgets reads the PodDisruptionBudgets of the victims' namespaces
// from the API server, not the informer: what the Eviction API will check.
func (p *Plugin) liveBudgets(ctx context.Context, victimPods []*v1.Pod) ([]*policyv1.PodDisruptionBudget, error) {
	var out []*policyv1.PodDisruptionBudget
	seen := map[string]bool{}
	for _, v := range victimPods {
		if seen[v.Namespace] {
			continue
		}
		seen[v.Namespace] = true
		list, err := p.handle.ClientSet().PolicyV1().PodDisruptionBudgets(v.Namespace).List(ctx, metav1.ListOptions{})
		if err != nil {
			return nil, fmt.Errorf("reading the PodDisruptionBudgets of namespace %s before evicting: %w", v.Namespace, err)
		}
		for i := range list.Items {
			out = append(out, &list.Items[i])
		}
	}
	return out, nil
}

// evictFor is evict with the preemptor described by by ("pod ns/name
// (priority N)" or a gang); gang is the victim's when it is evicted with
// its gang.
func (p *Plugin) evictFor(ctx context.Context, preemptor *v1.Pod, by string, victim *v1.Pod, node string, gang *preemption.Gang, freed []preemption.Freed) error {
	eviction := &policyv1.Eviction{
		ObjectMeta:    metav1.ObjectMeta{Name: victim.Name, Namespace: victim.Namespace},
		DeleteOptions: &metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &victim.UID}},
	}
	err := p.handle.ClientSet().PolicyV1().Evictions(victim.Namespace).Evict(ctx, eviction)
	if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("evicting pod %s/%s to make room for %s/%s on node %s: %w", victim.Namespace, victim.Name, preemptor.Namespace, preemptor.Name, node, err)
	}
	p.evicted.Add(victim.UID)
	if r := p.handle.EventRecorder(); r != nil {
		together := ""
		if gang != nil {
			together = fmt.Sprintf(" with every member of gang %s (disruptionMode All)", gang.Key())
		}
		r.Eventf(victim, preemptor, v1.EventTypeNormal, "Preempted", "Preempting", "%s",
			truncate(fmt.Sprintf("Preempted%s by %s on node %s to free GPU devices: %s", together, by, node, describeFreed(freed))))
	}
	return nil
}

// announce tells the preemptor which pods it evicts, for which of its
// claims and which devices they free.
func (p *Plugin) announce(preemptor *v1.Pod, node string, claims []*resourceapi.ResourceClaim, d preemption.Decision) {
	r := p.handle.EventRecorder()
	if r == nil {
		return
	}
	var names []string
	for _, c := range claims {
		names = append(names, c.Namespace+"/"+c.Name)
	}
	r.Eventf(preemptor, nil, v1.EventTypeNormal, "Preempting", "Preempting", "%s",
		truncate(fmt.Sprintf("Evicting %d lower-priority pod(s) on node %s for claim(s) %s: %s",
			len(d.Victims), node, strings.Join(names, ", "), describeVictims(d.Victims, d.Gangs, d.Freed, node))))
}

// describeVictims is "ns/name (priority N, claim …)" for each victim; a
// victim on another node than node says where, a gang member which gang.
func describeVictims(victimPods []*v1.Pod, gangs []*preemption.Gang, freed []preemption.Freed, node string) string {
	gangOf := map[types.UID]string{}
	for _, g := range gangs {
		for _, m := range g.Pods {
			gangOf[m.UID] = g.Key()
		}
	}
	var parts []string
	for _, v := range victimPods {
		where := ""
		if v.Spec.NodeName != node {
			where = " on " + v.Spec.NodeName
		}
		of := ""
		if g, ok := gangOf[v.UID]; ok {
			of = ", gang " + g
		}
		parts = append(parts, fmt.Sprintf("%s/%s%s (priority %d%s, %s)", v.Namespace, v.Name, where, preemption.PodPriority(v), of, describeFreed(freedBy(freed, v))))
	}
	return strings.Join(parts, "; ")
}

// freedBy is what evicting victim frees.
func freedBy(freed []preemption.Freed, victim *v1.Pod) []preemption.Freed {
	var out []preemption.Freed
	for _, f := range freed {
		if f.Pod.UID == victim.UID {
			out = append(out, f)
		}
	}
	return out
}

// describeFreed is "claim ns/name: gpu-3, …" for each freed claim.
func describeFreed(freed []preemption.Freed) string {
	if len(freed) == 0 {
		return "no claim of its own (it shares its claims with other victims)"
	}
	var parts []string
	for _, f := range freed {
		parts = append(parts, fmt.Sprintf("claim %s/%s: %s", f.Claim.Namespace, f.Claim.Name, strings.Join(f.Devices, ", ")))
	}
	return strings.Join(parts, "; ")
}

// evictionReason is the victims metric's reason: whole_card when one of
// the freed claims holds a whole card, share otherwise.
func evictionReason(freed []preemption.Freed) string {
	for _, f := range freed {
		if f.Whole {
			return reasonWholeCard
		}
	}
	return reasonShare
}

// truncate keeps an event note within the API's 1 kB.
func truncate(note string) string {
	const limit = 1024
	if len(note) <= limit {
		return note
	}
	return note[:limit-3] + "..."
}

// evictedNotSeen returns the pods this plugin evicted that the snapshot
// still shows without a deletion timestamp, and forgets the others.
func (p *Plugin) evictedNotSeen() map[types.UID]bool {
	evicted := p.evicted.List()
	if len(evicted) == 0 {
		return nil
	}
	all := make(map[types.UID]bool, len(evicted))
	for _, uid := range evicted {
		all[uid] = true
	}
	nodes, err := p.handle.SnapshotSharedLister().NodeInfos().List()
	if err != nil {
		return all
	}
	seen := map[types.UID]bool{}
	for _, ni := range nodes {
		for _, pi := range ni.GetPods() {
			if pod := pi.GetPod(); all[pod.UID] && pod.DeletionTimestamp == nil {
				seen[pod.UID] = true
			}
		}
	}
	var gone []types.UID
	for _, uid := range evicted {
		if !seen[uid] {
			gone = append(gone, uid)
		}
	}
	p.evicted.Forget(gone)
	return seen
}

// clusterState is the DRA state read once per PostFilter call.
type clusterState struct {
	slicesByNode map[string][]*resourceapi.ResourceSlice
	classes      []*resourceapi.DeviceClass
	claims       []*resourceapi.ResourceClaim
	// gangs are the running pod groups of disruptionMode All: victims
	// only as a whole.
	gangs []*preemption.Gang
}

// readStateAndBudgets reads what choosing victims needs: the devices and
// who holds them, and the PodDisruptionBudgets.
func (p *Plugin) readStateAndBudgets(dra fwk.SharedDRAManager) (*clusterState, []*policyv1.PodDisruptionBudget, error) {
	state, err := p.readState(dra)
	if err != nil {
		return nil, nil, err
	}
	if state.gangs, err = p.runningGangs(state.claims); err != nil {
		return nil, nil, err
	}
	pdbs, err := p.pdbs.List(labels.Everything())
	if err != nil {
		return nil, nil, fmt.Errorf("listing PodDisruptionBudgets: %w", err)
	}
	return state, pdbs, nil
}

func (p *Plugin) readState(dra fwk.SharedDRAManager) (*clusterState, error) {
	all, err := dra.ResourceSlices().ListWithDeviceTaintRules()
	if err != nil {
		return nil, fmt.Errorf("listing ResourceSlices: %w", err)
	}
	classes, err := dra.DeviceClasses().List()
	if err != nil {
		return nil, fmt.Errorf("listing DeviceClasses: %w", err)
	}
	claims, err := dra.ResourceClaims().List()
	if err != nil {
		return nil, fmt.Errorf("listing ResourceClaims: %w", err)
	}
	s := &clusterState{slicesByNode: map[string][]*resourceapi.ResourceSlice{}, classes: classes}
	for _, sl := range all {
		if sl.Spec.NodeName != nil {
			s.slicesByNode[*sl.Spec.NodeName] = append(s.slicesByNode[*sl.Spec.NodeName], sl)
		}
	}
	for _, c := range claims {
		if c.Status.Allocation == nil {
			// A claim the DRA plugin allocated for a pod in its binding
			// cycle holds its devices already, though the API server has
			// not been told yet.
			pending := dra.ResourceClaims().GetPendingAllocation(c.UID)
			if pending == nil {
				continue
			}
			c = c.DeepCopy()
			c.Status.Allocation = pending
		}
		s.claims = append(s.claims, c)
	}
	return s, nil
}

// runningGangs finds the pod groups of disruptionMode All among the pods
// bound to (or being bound to) nodes in the scheduler's snapshot, with the
// claims of claims their members hold. The PodGroups come from the
// snapshot too; without GenericWorkload there are none, and a pod whose
// PodGroup is unknown is a victim on its own (as in kube-scheduler's own
// preemption).
func (p *Plugin) runningGangs(claims []*resourceapi.ResourceClaim) ([]*preemption.Gang, error) {
	snapshot := p.handle.SnapshotSharedLister()
	nodeInfos, err := snapshot.NodeInfos().List()
	if err != nil {
		return nil, fmt.Errorf("listing nodes: %w", err)
	}
	var pods []*v1.Pod
	for _, ni := range nodeInfos {
		for _, pi := range ni.GetPods() {
			if pod := pi.GetPod(); preemption.PodGroupOf(pod) != "" {
				pods = append(pods, pod)
			}
		}
	}
	if len(pods) == 0 {
		return nil, nil
	}
	podGroups := snapshot.PodGroups()
	return preemption.Gangs(pods, func(namespace, name string) *schedulingv1beta1.PodGroup {
		pg, err := podGroups.Get(namespace, name)
		if err != nil {
			return nil
		}
		return pg
	}, claims), nil
}

// nominated lists the other pods nominated to node, with their pending
// claims; pkg/preemption counts those of at least pod's priority first.
func (p *Plugin) nominated(pod *v1.Pod, node string, claims fwk.ResourceClaimTracker) ([]preemption.Nominated, error) {
	var out []preemption.Nominated
	for _, pi := range p.handle.NominatedPodsForNode(node) {
		other := pi.GetPod()
		if other.UID == pod.UID {
			continue
		}
		pending, _, err := podClaims(other, claims)
		if err != nil {
			return nil, err
		}
		if len(pending) > 0 {
			out = append(out, preemption.Nominated{Pod: other, Claims: pending})
		}
	}
	return out, nil
}

// node is what preemption needs of one node: its own slices (devices
// shared between nodes are out of scope), its pods and the allocated claims
// holding devices of its pools.
func (s *clusterState) node(ni fwk.NodeInfo) preemption.Node {
	name := ni.Node().Name
	n := preemption.Node{Name: name, Slices: s.slicesByNode[name], Classes: s.classes, Gangs: s.gangs}
	type pool struct{ driver, name string }
	pools := map[pool]bool{}
	for _, sl := range n.Slices {
		pools[pool{sl.Spec.Driver, sl.Spec.Pool.Name}] = true
	}
	for _, c := range s.claims {
		if slices.ContainsFunc(c.Status.Allocation.Devices.Results, func(r resourceapi.DeviceRequestAllocationResult) bool {
			return pools[pool{r.Driver, r.Pool}]
		}) {
			n.Claims = append(n.Claims, c)
		}
	}
	for _, pi := range ni.GetPods() {
		n.Pods = append(n.Pods, pi.GetPod())
	}
	return n
}

// podClaims returns the pod's claims that are not allocated yet and
// whether some are. A claim not created yet is reported by the DRA plugin's
// PreFilter, so there is nothing to preempt for.
func podClaims(pod *v1.Pod, claims fwk.ResourceClaimTracker) (pending []*resourceapi.ResourceClaim, allocated bool, err error) {
	for i := range pod.Spec.ResourceClaims {
		name, _, err := resourceclaim.Name(pod, &pod.Spec.ResourceClaims[i])
		if errors.Is(err, resourceclaim.ErrClaimNotFound) {
			// From a template, not created yet: the DRA plugin waits for
			// it, and there is nothing to preempt for. (This was an error,
			// which sent every new pod of a claim template to the error
			// back-off instead of waiting for its claim.)
			return nil, false, nil
		}
		if err != nil {
			return nil, false, fmt.Errorf("pod %s/%s: %w", pod.Namespace, pod.Name, err)
		}
		if name == nil {
			continue
		}
		c, err := claims.Get(pod.Namespace, *name)
		if err != nil {
			return nil, false, nil
		}
		if c.Status.Allocation == nil {
			pending = append(pending, c)
		} else {
			allocated = true
		}
	}
	return pending, allocated, nil
}
