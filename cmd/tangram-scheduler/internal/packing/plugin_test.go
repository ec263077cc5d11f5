package packing

import (
	"context"
	"fmt"
	"sync"
	"testing"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/cache"
	fwk "k8s.io/kube-scheduler/framework"
	schedframework "k8s.io/kubernetes/pkg/scheduler/framework"
	"k8s.io/utils/ptr"

	"github.com/tangram-gpu/tangram/pkg/device"
	"github.com/tangram-gpu/tangram/pkg/dra"
	"github.com/tangram-gpu/tangram/pkg/gpu"
	"github.com/tangram-gpu/tangram/pkg/placement"
	"github.com/tangram-gpu/tangram/pkg/resourceslices"
)

// fakeHandle serves DRA objects from memory, and informers of a fake
// clientset holding the same objects; the scheduler framework's other
// services are not used by the plugin.
type fakeHandle struct {
	fwk.Handle
	dra       *fakeDRA
	informers informers.SharedInformerFactory
}

func (h *fakeHandle) SharedDRAManager() fwk.SharedDRAManager { return h.dra }
func (h *fakeHandle) SharedInformerFactory() informers.SharedInformerFactory {
	if h.informers == nil {
		var objects []runtime.Object
		if h.dra != nil {
			for _, s := range h.dra.slices {
				objects = append(objects, s)
			}
			for _, c := range h.dra.claims {
				objects = append(objects, c)
			}
		}
		h.informers = informers.NewSharedInformerFactory(fake.NewClientset(objects...), 0)
	}
	return h.informers
}

// newTestPlugin creates the plugin over dra and waits until the informers
// have delivered every object to it.
func newTestPlugin(tb testing.TB, policy string, dra *fakeDRA) *Plugin {
	tb.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	tb.Cleanup(cancel)
	h := &fakeHandle{dra: dra}
	p, err := New(ctx, &runtime.Unknown{Raw: []byte("policy: " + policy)}, h)
	if err != nil {
		tb.Fatal(err)
	}
	h.informers.Start(ctx.Done())
	h.informers.WaitForCacheSync(ctx.Done())
	plugin := p.(*Plugin)
	if !cache.WaitForCacheSync(ctx.Done(), plugin.synced) {
		tb.Fatal("the plugin's informer handlers did not sync")
	}
	return plugin
}

type fakeDRA struct {
	fwk.SharedDRAManager
	slices []*resourceapi.ResourceSlice
	claims []*resourceapi.ResourceClaim

	mu     sync.Mutex
	byName map[string]*resourceapi.ResourceClaim
}

func (d *fakeDRA) ResourceSlices() fwk.ResourceSliceLister  { return d }
func (d *fakeDRA) ResourceClaims() fwk.ResourceClaimTracker { return &fakeClaims{d: d} }
func (d *fakeDRA) ListWithDeviceTaintRules() ([]*resourceapi.ResourceSlice, error) {
	return d.slices, nil
}

type fakeClaims struct {
	fwk.ResourceClaimTracker
	d *fakeDRA
}

func (c *fakeClaims) List() ([]*resourceapi.ResourceClaim, error) { return c.d.claims, nil }

// Get looks the claim up by name, as the scheduler's claim cache does (a
// linear search would dominate the benchmark at 1213 nodes).
func (c *fakeClaims) Get(namespace, name string) (*resourceapi.ResourceClaim, error) {
	d := c.d
	d.mu.Lock()
	defer d.mu.Unlock()
	if len(d.byName) != len(d.claims) {
		d.byName = make(map[string]*resourceapi.ResourceClaim, len(d.claims))
		for _, cl := range d.claims {
			d.byName[cl.Namespace+"/"+cl.Name] = cl
		}
	}
	if cl, ok := d.byName[namespace+"/"+name]; ok {
		return cl, nil
	}
	return nil, fmt.Errorf("claim %s/%s not found", namespace, name)
}

func gpuNode(t *testing.T, name string) (*v1.Node, *resourceapi.ResourceSlice) {
	t.Helper()
	gpus := []gpu.GPU{
		{Index: 0, UUID: "GPU-" + name + "-0", ProductName: "T4", MemoryBytes: 16 << 30},
		{Index: 1, Minor: 1, UUID: "GPU-" + name + "-1", ProductName: "T4", MemoryBytes: 16 << 30},
	}
	devices, err := resourceslices.Devices(gpus, resourceslices.Options{NodeName: name, Sharing: true})
	if err != nil {
		t.Fatal(err)
	}
	node := &v1.Node{ObjectMeta: clusterObject(name), Status: v1.NodeStatus{Allocatable: v1.ResourceList{
		v1.ResourceCPU: resource.MustParse("32"), v1.ResourceMemory: resource.MustParse("128Gi"), v1.ResourcePods: resource.MustParse("110"),
	}}}
	slice := &resourceapi.ResourceSlice{ObjectMeta: clusterObject(name + "-gpu"), Spec: resourceapi.ResourceSliceSpec{
		Driver: "gpu.tangram.dev", NodeName: ptr.To(name), Devices: devices,
		Pool: resourceapi.ResourcePool{Name: name, ResourceSliceCount: 1},
	}}
	return node, slice
}

func podWithClaim(name, cpu, claim string) *v1.Pod {
	return &v1.Pod{
		ObjectMeta: metaObject(name),
		Spec: v1.PodSpec{
			Containers:     []v1.Container{{Name: "c", Resources: v1.ResourceRequirements{Requests: v1.ResourceList{v1.ResourceCPU: resource.MustParse(cpu), v1.ResourceMemory: resource.MustParse("1Gi")}}}},
			ResourceClaims: []v1.PodResourceClaim{{Name: "gpu", ResourceClaimName: ptr.To(claim)}},
		},
	}
}

// TestSharePacksOntoUsedCard: node a already runs a pod with half of gpu-0
// and more CPU in use; node b is empty. The stock scheduler (LeastAllocated
// on CPU and memory) prefers b, breaking a fresh card; the Tangram plugin
// prefers a, where the share completes the used card.
func TestSharePacksOntoUsedCard(t *testing.T) {
	ctx := context.Background()
	nodeA, sliceA := gpuNode(t, "a")
	nodeB, sliceB := gpuNode(t, "b")

	harness := &dra.Node{Name: "a", Slices: []*resourceapi.ResourceSlice{sliceA}, Classes: device.DeviceClasses()}
	running, err := harness.Allocate(ctx, dra.Claim("running", nil, dra.SharedGPU("gpu", resource.MustParse("8Gi"), resource.MustParse("50"))))
	if err != nil {
		t.Fatal(err)
	}
	incoming := dra.Claim("incoming", nil, dra.SharedGPU("gpu", resource.MustParse("8Gi"), resource.MustParse("50")))
	dra := &fakeDRA{slices: []*resourceapi.ResourceSlice{sliceA, sliceB}, claims: []*resourceapi.ResourceClaim{running, incoming}}

	niA := schedframework.NewNodeInfo(podWithClaim("running", "16", "running"))
	niA.SetNode(nodeA)
	niB := schedframework.NewNodeInfo()
	niB.SetNode(nodeB)
	nodes := []fwk.NodeInfo{niA, niB}

	// FGD alone ties here: the live workload holds only 500-milli shares,
	// and a fresh card still fits them. Tangram's residue and packing terms
	// and best-fit separate the nodes.
	for _, tc := range []struct {
		policy string
		tie    bool
	}{{"tangram", false}, {"best-fit", false}, {"fgd", true}} {
		policy := tc.policy
		t.Run(policy, func(t *testing.T) {
			plugin := newTestPlugin(t, policy, dra)
			pod := podWithClaim("incoming", "2", "incoming")
			state := schedframework.NewCycleState()
			if st := plugin.PreScore(ctx, state, pod, nodes); !st.IsSuccess() {
				t.Fatalf("PreScore: %v", st)
			}
			var scores fwk.NodeScoreList
			for _, ni := range nodes {
				s, st := plugin.Score(ctx, state, pod, ni)
				if !st.IsSuccess() {
					t.Fatalf("Score %s: %v", ni.Node().Name, st)
				}
				scores = append(scores, fwk.NodeScore{Name: ni.Node().Name, Score: s})
			}
			if st := plugin.NormalizeScore(ctx, state, pod, scores); !st.IsSuccess() {
				t.Fatalf("NormalizeScore: %v", st)
			}
			wantB := int64(0)
			if tc.tie {
				wantB = fwk.MaxNodeScore
			}
			if scores[0].Score != fwk.MaxNodeScore || scores[1].Score != wantB {
				t.Errorf("scores a=%d b=%d, want a=%d b=%d", scores[0].Score, scores[1].Score, fwk.MaxNodeScore, wantB)
			}
		})
	}

	// The stock behaviour on the same state picks b.
	stock := placement.Stock{}
	r := placement.Request{Name: "incoming", CPUMilli: 2000, MemoryMiB: 1024, ShareMilli: 500}
	var best string
	bestScore := -1.0
	for _, ni := range nodes {
		n, err := placement.NodeFromCluster(ni.Node().Name, 32000, 128<<10, ni.GetRequested().GetMilliCPU(), ni.GetRequested().GetMemory()>>20,
			dra.slices, []*resourceapi.ResourceClaim{running})
		if err != nil {
			t.Fatal(err)
		}
		cands, _ := n.Candidates(r, nil)
		if c := stock.Score(n, r, cands); c.Score > bestScore {
			best, bestScore = n.Name, c.Score
		}
	}
	if best != "b" {
		t.Errorf("stock picks %s, want b (the scenario must separate the two)", best)
	}
}

func TestNewRejectsBadArgs(t *testing.T) {
	for _, raw := range []string{"policy: random", "polcy: tangram"} {
		if _, err := New(context.Background(), &runtime.Unknown{Raw: []byte(raw)}, &fakeHandle{}); err == nil {
			t.Errorf("args %q: want an error", raw)
		}
	}
}

func TestPreScoreSkipsPodsWithoutGPUClaims(t *testing.T) {
	p, err := New(context.Background(), nil, &fakeHandle{dra: &fakeDRA{}})
	if err != nil {
		t.Fatal(err)
	}
	pod := &v1.Pod{ObjectMeta: metaObject("plain")}
	st := p.(*Plugin).PreScore(context.Background(), schedframework.NewCycleState(), pod, nil)
	if st.Code() != fwk.Skip {
		t.Errorf("status = %v, want Skip", st)
	}
}

// TestPreScoreSkipsClaimsOfOtherDrivers: a pod whose claim asks for
// another driver's devices (scheduler_perf's test driver) is not scored,
// whether or not Tangram claims are allocated. Before, with no Tangram
// claim in the cluster the policy got an empty workload and PreScore
// failed the pod on every attempt ("policy tangram needs a workload
// sample"), so tangram-scheduler scheduled none of upstream's DRA pods.
func TestPreScoreSkipsClaimsOfOtherDrivers(t *testing.T) {
	ctx := context.Background()
	nodeA, sliceA := gpuNode(t, "a")
	harness := &dra.Node{Name: "a", Slices: []*resourceapi.ResourceSlice{sliceA}, Classes: device.DeviceClasses()}
	running, err := harness.Allocate(ctx, dra.Claim("running", nil, dra.SharedGPU("gpu", resource.MustParse("8Gi"), resource.Quantity{})))
	if err != nil {
		t.Fatal(err)
	}
	other := dra.Claim("other", nil, resourceapi.DeviceRequest{Name: "req-0", Exactly: &resourceapi.ExactDeviceRequest{
		DeviceClassName: "test-class", AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: 1}})
	for _, tc := range []struct {
		name   string
		claims []*resourceapi.ResourceClaim
	}{
		{"no Tangram claim in the cluster", []*resourceapi.ResourceClaim{other}},
		{"a Tangram share allocated", []*resourceapi.ResourceClaim{running, other}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			plugin := newTestPlugin(t, "tangram", &fakeDRA{slices: []*resourceapi.ResourceSlice{sliceA}, claims: tc.claims})
			ni := schedframework.NewNodeInfo()
			ni.SetNode(nodeA)
			st := plugin.PreScore(ctx, schedframework.NewCycleState(), podWithClaim("other", "1", "other"), []fwk.NodeInfo{ni})
			if st.Code() != fwk.Skip {
				t.Errorf("PreScore = %v, want Skip", st)
			}
		})
	}
}

// TestReserveAssumesUntilUnreserve: Reserve records the allocation the DRA
// plugin made for the pod (the informer has not shown it yet) so the next
// pod is scored with it; Unreserve takes it back, except for a claim that
// was allocated before the pod (another pod shares it).
func TestReserveAssumesUntilUnreserve(t *testing.T) {
	ctx := context.Background()
	_, slice := gpuNode(t, "a")
	harness := &dra.Node{Name: "a", Slices: []*resourceapi.ResourceSlice{slice}, Classes: device.DeviceClasses()}
	share := func(name string) *resourceapi.ResourceClaim {
		c, err := harness.Allocate(ctx, dra.Claim(name, nil, dra.SharedGPU("gpu", resource.MustParse("8Gi"), resource.MustParse("50"))))
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	shared := share("shared")
	pending := dra.Claim("new", nil, dra.SharedGPU("gpu", resource.MustParse("8Gi"), resource.MustParse("50")))
	dra := &fakeDRA{slices: []*resourceapi.ResourceSlice{slice}, claims: []*resourceapi.ResourceClaim{shared, pending}}
	plugin := newTestPlugin(t, "tangram", dra)
	allocatedMilli := func() int64 {
		m, _ := plugin.state.Model("a")
		return m.AllocatedMilli()
	}
	if got := allocatedMilli(); got != 500 {
		t.Fatalf("before Reserve: %d milli-GPU allocated, want 500 (the shared claim)", got)
	}

	// The DRA plugin's Reserve has allocated "new" in the scheduler's claim
	// cache; the informer still shows it pending.
	dra.mu.Lock()
	dra.claims[1] = share("new")
	dra.byName = nil
	dra.mu.Unlock()
	pod := &v1.Pod{ObjectMeta: metaObject("p"), Spec: v1.PodSpec{ResourceClaims: []v1.PodResourceClaim{
		{Name: "a", ResourceClaimName: ptr.To("shared")}, {Name: "b", ResourceClaimName: ptr.To("new")}}}}
	state := schedframework.NewCycleState()
	if st := plugin.Reserve(ctx, state, pod, "a"); !st.IsSuccess() {
		t.Fatalf("Reserve: %v", st)
	}
	if got := allocatedMilli(); got != 1000 {
		t.Errorf("after Reserve: %d milli-GPU allocated, want 1000", got)
	}
	plugin.Unreserve(ctx, state, pod, "a")
	if got := allocatedMilli(); got != 500 {
		t.Errorf("after Unreserve: %d milli-GPU allocated, want 500 (the shared claim stays)", got)
	}
}

// TestSignPod: pods without claims are signable with nothing added, pods
// with claims are not. Before SignPod existed kube-scheduler disabled
// opportunistic batching for the whole tangram profile
// (TestTangramProfileRegistersInHarness in internal/schedperf checks the
// profile).
func TestSignPod(t *testing.T) {
	for _, tc := range []struct {
		name string
		pod  *v1.Pod
		want fwk.Code
	}{
		{"no claims", &v1.Pod{ObjectMeta: metaObject("plain")}, fwk.Success},
		{"a claim", podWithClaim("gpu", "1", "c"), fwk.Unschedulable},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fragments, st := (&Plugin{}).SignPod(context.Background(), tc.pod)
			if st.Code() != tc.want || len(fragments) != 0 {
				t.Errorf("SignPod = %v, %v; want code %v and no fragments", fragments, st, tc.want)
			}
		})
	}
}
