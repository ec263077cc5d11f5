// Package packing is Tangram's kube-scheduler score plugin: it rates the
// nodes that passed filtering with a pkg/placement policy over the DRA state
// (ResourceSlices and allocated claims), so GPU shares are packed across
// nodes. Filtering and the allocation itself stay with the stock DRA
// plugin; inside the chosen node the allocator's first fit picks the card.
package packing

import (
	"context"
	"errors"
	"fmt"
	"math"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"
	resourcehelper "k8s.io/component-helpers/resource"
	"k8s.io/dynamic-resource-allocation/resourceclaim"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"

	"github.com/tangram-gpu/tangram/pkg/placement"
	"github.com/tangram-gpu/tangram/pkg/placement/clusterstate"
)

// Name is the plugin name in KubeSchedulerConfiguration.
const Name = "TangramPacking"

const stateKey fwk.StateKey = Name

// Args are the plugin's arguments (pluginConfig[].args).
type Args struct {
	// Policy is one of placement.PolicyNames; empty means "tangram".
	Policy string `json:"policy,omitempty"`
}

// Plugin implements PreScore, Score and NormalizeScore, and Reserve and
// Unreserve to see the allocations of pods it has not seen bound yet.
type Plugin struct {
	handle fwk.Handle

	// state is the model of every node, kept up to date by informer
	// events and Reserve/Unreserve; synced says whether the informers have
	// delivered their initial lists to it.
	state  *clusterstate.State
	synced func() bool

	// policies builds the configured policy (Args.Policy) and keeps the
	// previous pod's, with its score cache.
	policies *clusterstate.PolicyCache
}

var (
	_ fwk.PreScorePlugin = (*Plugin)(nil)
	_ fwk.ScorePlugin    = (*Plugin)(nil)
	_ fwk.ReservePlugin  = (*Plugin)(nil)
	_ fwk.SignPlugin     = (*Plugin)(nil)
)

// SignPod lets kube-scheduler batch pods (opportunistic batching, KEP-5598):
// a pod without claims gets no score from this plugin, so it adds nothing
// to the signature; a pod with claims is scored against the GPU workload
// and is refused (the DynamicResources plugin refuses such pods too).
// Without this method kube-scheduler turns batching off for the whole
// profile, plain CPU pods included.
func (*Plugin) SignPod(_ context.Context, pod *v1.Pod) ([]fwk.SignFragment, *fwk.Status) {
	if len(pod.Spec.ResourceClaims) > 0 {
		return nil, fwk.NewStatus(fwk.Unschedulable, "pods with resource claims are scored against the GPU workload")
	}
	return nil, nil
}

// New is the plugin factory registered with the scheduler.
func New(ctx context.Context, obj runtime.Object, h fwk.Handle) (fwk.Plugin, error) {
	args := Args{Policy: "tangram"}
	if u, ok := obj.(*runtime.Unknown); ok && u != nil && len(u.Raw) > 0 {
		if err := decodeArgs(u.Raw, &args); err != nil {
			return nil, fmt.Errorf("%s args: %w", Name, err)
		}
	}
	if args.Policy == "" {
		args.Policy = "tangram"
	}
	if _, err := placement.New(args.Policy, placement.NewWorkload([]placement.Request{{WholeCards: 1}})); err != nil {
		return nil, fmt.Errorf("%s args: %w", Name, err)
	}
	p := &Plugin{handle: h, state: clusterstate.New(), policies: clusterstate.NewPolicyCache(args.Policy)}
	synced, err := p.watch(h.SharedInformerFactory())
	if err != nil {
		return nil, fmt.Errorf("%s: %w", Name, err)
	}
	p.synced = synced
	return p, nil
}

// watch feeds the state from the scheduler's shared informers (the same
// ones its DRA plugin reads).
func (p *Plugin) watch(factory informers.SharedInformerFactory) (func() bool, error) {
	slices, err := factory.Resource().V1().ResourceSlices().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { p.state.UpsertSlice(obj.(*resourceapi.ResourceSlice)) },
		UpdateFunc: func(_, obj any) { p.state.UpsertSlice(obj.(*resourceapi.ResourceSlice)) },
		DeleteFunc: func(obj any) {
			if s, ok := tombstone[*resourceapi.ResourceSlice](obj); ok {
				p.state.DeleteSlice(s)
			}
		},
	})
	if err != nil {
		return nil, fmt.Errorf("watching ResourceSlices: %w", err)
	}
	claims, err := factory.Resource().V1().ResourceClaims().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { p.state.UpsertClaim(obj.(*resourceapi.ResourceClaim)) },
		UpdateFunc: func(_, obj any) { p.state.UpsertClaim(obj.(*resourceapi.ResourceClaim)) },
		DeleteFunc: func(obj any) {
			if c, ok := tombstone[*resourceapi.ResourceClaim](obj); ok {
				p.state.DeleteClaim(c.UID)
			}
		},
	})
	if err != nil {
		return nil, fmt.Errorf("watching ResourceClaims: %w", err)
	}
	return func() bool { return slices.HasSynced() && claims.HasSynced() }, nil
}

// tombstone unwraps the object of a delete event, which the informer may
// hand over as DeletedFinalStateUnknown when it missed the delete.
func tombstone[T any](obj any) (T, bool) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	t, ok := obj.(T)
	return t, ok
}

func (*Plugin) Name() string { return Name }

// cycleState is what PreScore prepares for Score.
type cycleState struct {
	// requests is the pod's request by the memory of a node's cards (a
	// share's size is relative to it); ok false when the claims ask for
	// none of our GPUs there.
	requests map[int64]podRequest
	policy   placement.Policy
}

type podRequest struct {
	request placement.Request
	ok      bool
}

func (s *cycleState) Clone() fwk.StateData { return s }

// requestFor is the pod's request on cards of memory cardMemory; ok false
// for a card size PreScore did not see (a node modelled since) or where the
// pod asks for none of our GPUs.
func (s *cycleState) requestFor(cardMemory int64) (placement.Request, bool) {
	r, ok := s.requests[cardMemory]
	return r.request, ok && r.ok
}

// PreScore prepares the pod's request and the policy for the workload on
// the filtered nodes; the node models come from the state, kept up to date
// by events, so nothing here is per node but a look-up.
func (p *Plugin) PreScore(ctx context.Context, state fwk.CycleState, pod *v1.Pod, nodes []fwk.NodeInfo) *fwk.Status {
	logger := klog.FromContext(ctx)
	dra := p.handle.SharedDRAManager()
	if dra == nil {
		return fwk.NewStatus(fwk.Skip)
	}
	podClaims, err := pendingClaims(pod, dra.ResourceClaims())
	if err != nil {
		return fwk.AsStatus(err)
	}
	if len(podClaims) == 0 {
		return fwk.NewStatus(fwk.Skip)
	}
	if _, ours := placement.RequestFromClaims(pod.Name, 0, 0, podClaims, 0); !ours {
		// Another driver's devices only: skipped before the snapshot of
		// the nodes is taken.
		return fwk.NewStatus(fwk.Skip)
	}
	if !p.synced() {
		logger.V(4).Info("GPU packing skipped: the informers have not delivered every slice and claim yet", "pod", klog.KObj(pod))
		return fwk.NewStatus(fwk.Skip)
	}
	names := make([]string, len(nodes))
	for i, ni := range nodes {
		if node := ni.Node(); node != nil {
			names[i] = node.Name
		}
	}
	snap := p.state.Snapshot(names)
	requests := resourcehelper.PodRequests(pod, resourcehelper.PodResourcesOptions{})
	cpu, memMiB := requests.Cpu().MilliValue(), requests.Memory().Value()>>20
	s := &cycleState{requests: make(map[int64]podRequest, len(snap.CardMemories))}
	var own *placement.Request
	for _, mem := range snap.CardMemories {
		r, ok := placement.RequestFromClaims(pod.Name, cpu, memMiB, podClaims, mem)
		s.requests[mem] = podRequest{request: r, ok: ok}
		if ok && own == nil {
			own = &r
		}
	}
	if own == nil {
		// No Tangram card in the cluster the claims could use: nothing to
		// pack. Without this, a cluster with no Tangram claim yet gave the
		// policy an empty workload and the pod failed PreScore on every
		// attempt.
		logger.V(5).Info("GPU packing skipped: the pod's claims ask for no Tangram GPU", "pod", klog.KObj(pod))
		return fwk.NewStatus(fwk.Skip)
	}
	s.policy, err = p.policies.For(snap.Shapes, own)
	if err != nil {
		return fwk.AsStatus(err)
	}
	state.Write(stateKey, s)
	return nil
}

// reservedKey is where Reserve keeps the claims it assumed, for Unreserve.
const reservedKey fwk.StateKey = Name + "/reserved"

type reservedClaims []types.UID

func (r reservedClaims) Clone() fwk.StateData { return r }

// Reserve records the allocations the DRA plugin's Reserve (earlier in the
// profile's order) made for the pod: the API server sees them only in the
// binding cycle, and the next pod must already be scored with them.
func (p *Plugin) Reserve(ctx context.Context, state fwk.CycleState, pod *v1.Pod, nodeName string) *fwk.Status {
	dra := p.handle.SharedDRAManager()
	if dra == nil || len(pod.Spec.ResourceClaims) == 0 {
		return nil
	}
	var assumed reservedClaims
	for i := range pod.Spec.ResourceClaims {
		name, _, err := resourceclaim.Name(pod, &pod.Spec.ResourceClaims[i])
		if err != nil || name == nil {
			continue
		}
		c, err := dra.ResourceClaims().Get(pod.Namespace, *name)
		if err != nil || c.Status.Allocation == nil {
			continue
		}
		if p.state.Assume(c) {
			assumed = append(assumed, c.UID)
		}
	}
	if len(assumed) > 0 {
		state.Write(reservedKey, assumed)
	}
	return nil
}

// Unreserve takes back what Reserve assumed for the pod.
func (p *Plugin) Unreserve(ctx context.Context, state fwk.CycleState, pod *v1.Pod, nodeName string) {
	data, err := state.Read(reservedKey)
	if err != nil {
		return
	}
	for _, uid := range data.(reservedClaims) {
		p.state.Unassume(uid)
	}
}

// Score rates one node; NormalizeScore maps the policy's scores to 0..100.
func (p *Plugin) Score(ctx context.Context, state fwk.CycleState, pod *v1.Pod, nodeInfo fwk.NodeInfo) (int64, *fwk.Status) {
	data, err := state.Read(stateKey)
	if err != nil {
		return 0, nil
	}
	s := data.(*cycleState)
	alloc, used := nodeInfo.GetAllocatable(), nodeInfo.GetRequested()
	res := clusterstate.Resources{AllocatableCPU: alloc.GetMilliCPU(), AllocatableMemMiB: alloc.GetMemory() >> 20,
		RequestedCPU: used.GetMilliCPU(), RequestedMemMiB: used.GetMemory() >> 20}
	return p.state.Score(nodeInfo.Node().Name, s.policy, s.requestFor, res), nil
}

func (p *Plugin) ScoreExtensions() fwk.ScoreExtensions { return p }

// NormalizeScore maps the scores linearly to 0..MaxNodeScore; nodes the
// model could not rate get 0.
func (p *Plugin) NormalizeScore(ctx context.Context, state fwk.CycleState, pod *v1.Pod, scores fwk.NodeScoreList) *fwk.Status {
	lo, hi := int64(math.MaxInt64), int64(math.MinInt64)
	for _, s := range scores {
		if s.Score == clusterstate.Unrated {
			continue
		}
		lo, hi = min(lo, s.Score), max(hi, s.Score)
	}
	for i := range scores {
		switch {
		case scores[i].Score == clusterstate.Unrated:
			scores[i].Score = 0
		case hi == lo:
			scores[i].Score = fwk.MaxNodeScore
		default:
			scores[i].Score = (scores[i].Score - lo) * fwk.MaxNodeScore / (hi - lo)
		}
	}
	return nil
}

// pendingClaims returns the pod's claims that are not allocated yet.
func pendingClaims(pod *v1.Pod, claims fwk.ResourceClaimTracker) ([]*resourceapi.ResourceClaim, error) {
	var out []*resourceapi.ResourceClaim
	for i := range pod.Spec.ResourceClaims {
		name, _, err := resourceclaim.Name(pod, &pod.Spec.ResourceClaims[i])
		if errors.Is(err, resourceclaim.ErrClaimNotFound) {
			// From a template, not created yet: the DRA plugin waits for it.
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("pod %s/%s: %w", pod.Namespace, pod.Name, err)
		}
		if name == nil {
			continue
		}
		c, err := claims.Get(pod.Namespace, *name)
		if err != nil {
			// Not created yet: the DRA plugin's PreFilter waits for it.
			continue
		}
		if c.Status.Allocation == nil {
			out = append(out, c)
		}
	}
	return out, nil
}
