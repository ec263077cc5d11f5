package clusterstate

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"sort"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/tangram-gpu/tangram/pkg/device"
	"github.com/tangram-gpu/tangram/pkg/gpu"
	"github.com/tangram-gpu/tangram/pkg/placement"
	tgslices "github.com/tangram-gpu/tangram/pkg/resourceslices"
)

// TestIncrementalStateMatchesFullRebuild applies seeded random sequences of
// slice and claim adds, updates and deletes, assumed and unreserved
// allocations to the incremental state and checks after every step that
// every node model and the workload histogram equal a model built from
// scratch out of the objects alive at that moment (what PreScore did for
// every pod before the state was incremental).
func TestIncrementalStateMatchesFullRebuild(t *testing.T) {
	for seed := uint64(1); seed <= 20; seed++ {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			w := newWorld(t, seed)
			for step := range 300 {
				op := w.step()
				w.check(t, fmt.Sprintf("step %d (%s)", step, op))
				if t.Failed() {
					return
				}
			}
			if w.ops["assume"] == 0 || w.ops["delete slice"] == 0 || w.ops["deallocate claim"] == 0 {
				t.Fatalf("the sequence misses kinds of events: %v", w.ops)
			}
		})
	}
}

// world is the truth the state must follow: the objects the API server
// holds and the allocations assumed by pods not bound yet.
type world struct {
	t      *testing.T
	rng    *rand.Rand
	state  *State
	slices map[types.UID]*resourceapi.ResourceSlice
	claims map[types.UID]*resourceapi.ResourceClaim
	// assumed claims are allocated but the API server does not have it yet.
	assumed map[types.UID]*resourceapi.ResourceClaim
	devices map[string][]resourceapi.Device // per node, 4 cards
	next    int
	ops     map[string]int
}

var worldNodes = []string{"n0", "n1", "n2", "n3"}

func newWorld(t *testing.T, seed uint64) *world {
	w := &world{t: t, rng: rand.New(rand.NewPCG(seed, 7)), state: New(),
		slices: map[types.UID]*resourceapi.ResourceSlice{}, claims: map[types.UID]*resourceapi.ResourceClaim{},
		assumed: map[types.UID]*resourceapi.ResourceClaim{}, devices: map[string][]resourceapi.Device{}, ops: map[string]int{}}
	for _, name := range worldNodes {
		var gpus []gpu.GPU
		for i := range 4 {
			mem := int64(16 << 30)
			if name == "n3" {
				mem = 80 << 30 // a second card size, so shares differ per node
			}
			gpus = append(gpus, gpu.GPU{Index: i, Minor: i, UUID: fmt.Sprintf("GPU-%s-%d", name, i), ProductName: "T4", MemoryBytes: mem})
		}
		devices, err := tgslices.Devices(gpus, tgslices.Options{NodeName: name, Sharing: true})
		if err != nil {
			t.Fatal(err)
		}
		w.devices[name] = devices
	}
	return w
}

func (w *world) uid(prefix string) types.UID {
	w.next++
	return types.UID(fmt.Sprintf("%s-%d", prefix, w.next))
}

// step makes one random change and feeds it to the state as the informer
// or the scheduler would.
func (w *world) step() string {
	op := w.pick()
	w.ops[op]++
	switch op {
	case "add slice":
		node := worldNodes[w.rng.IntN(len(worldNodes))]
		half := w.rng.IntN(2) // each node publishes its cards in two slices
		driver := device.DriverName
		if w.rng.IntN(8) == 0 {
			driver = "other.example.com"
		}
		s := &resourceapi.ResourceSlice{Spec: resourceapi.ResourceSliceSpec{
			Driver: driver, NodeName: ptr.To(node), Pool: resourceapi.ResourcePool{Name: node, ResourceSliceCount: 2},
			Devices: slices.Clone(w.devices[node][2*half : 2*half+2]),
		}}
		s.Name = fmt.Sprintf("%s-%d-%d", node, half, w.next)
		s.UID = w.uid("slice")
		s.ResourceVersion = "1"
		w.slices[s.UID] = s
		w.state.UpsertSlice(s)
	case "update slice":
		s := w.randomSlice().DeepCopy()
		s.ResourceVersion += "1"
		if len(s.Spec.Devices) > 1 && w.rng.IntN(2) == 0 {
			s.Spec.Devices = s.Spec.Devices[:1] // a card disappears; claims on it break the node
		} else {
			node := worldNodes[w.rng.IntN(len(worldNodes))]
			s.Spec.NodeName, s.Spec.Pool.Name = ptr.To(node), node
			s.Spec.Devices = slices.Clone(w.devices[node][:2])
		}
		w.slices[s.UID] = s
		w.state.UpsertSlice(s)
	case "delete slice":
		s := w.randomSlice()
		delete(w.slices, s.UID)
		w.state.DeleteSlice(s)
	case "create claim":
		c := w.newClaim()
		w.claims[c.UID] = c
		w.state.UpsertClaim(c)
	case "assume":
		// Reserve: allocated in the scheduler, not yet in the API server.
		c := w.newClaim()
		if c.Status.Allocation == nil {
			return op
		}
		pending := c.DeepCopy()
		pending.Status.Allocation = nil
		w.claims[c.UID] = pending
		w.state.UpsertClaim(pending)
		if w.state.Assume(c) {
			w.assumed[c.UID] = c
		}
	case "unreserve":
		for uid := range w.assumed {
			delete(w.assumed, uid)
			w.state.Unassume(uid)
			break
		}
	case "bind":
		// The API server gets the allocation; the informer shows it.
		for uid, c := range w.assumed {
			delete(w.assumed, uid)
			w.claims[uid] = c
			w.state.UpsertClaim(c)
			break
		}
	case "stale update":
		// An update without allocation arrives for an assumed claim (e.g.
		// reservedFor written before the status): the assumption stays.
		for uid := range w.assumed {
			c := w.claims[uid].DeepCopy()
			c.ResourceVersion += "1"
			w.claims[uid] = c
			w.state.UpsertClaim(c)
			break
		}
	case "deallocate claim":
		c := w.randomClaim().DeepCopy()
		c.Status.Allocation = nil
		if _, ok := w.assumed[c.UID]; ok {
			// Only Unreserve takes back an allocation the API server lacks.
			delete(w.assumed, c.UID)
			w.state.Unassume(c.UID)
		}
		w.claims[c.UID] = c
		w.state.UpsertClaim(c)
	case "delete claim":
		c := w.randomClaim()
		delete(w.claims, c.UID)
		delete(w.assumed, c.UID)
		w.state.DeleteClaim(c.UID)
	}
	return op
}

func (w *world) pick() string {
	for {
		ops := []string{"add slice", "add slice", "update slice", "delete slice", "create claim", "create claim", "create claim",
			"assume", "assume", "unreserve", "bind", "stale update", "deallocate claim", "delete claim"}
		op := ops[w.rng.IntN(len(ops))]
		switch {
		case (op == "update slice" || op == "delete slice") && len(w.slices) == 0,
			(op == "deallocate claim" || op == "delete claim") && len(w.claims) == 0:
			continue
		}
		return op
	}
}

func (w *world) randomSlice() *resourceapi.ResourceSlice {
	uids := sortedKeys(w.slices)
	return w.slices[uids[w.rng.IntN(len(uids))]]
}

func (w *world) randomClaim() *resourceapi.ResourceClaim {
	uids := sortedKeys(w.claims)
	return w.claims[uids[w.rng.IntN(len(uids))]]
}

func sortedKeys[V any](m map[types.UID]V) []types.UID {
	keys := make([]types.UID, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(a, b int) bool { return keys[a] < keys[b] })
	return keys
}

// newClaim is a claim allocated on a random node: whole cards, a share, or
// a result of another driver; sometimes not allocated at all.
func (w *world) newClaim() *resourceapi.ResourceClaim {
	c := &resourceapi.ResourceClaim{}
	c.UID = w.uid("claim")
	c.Name, c.Namespace, c.ResourceVersion = string(c.UID), "default", "1"
	if w.rng.IntN(6) == 0 {
		return c
	}
	node := worldNodes[w.rng.IntN(len(worldNodes))]
	var results []resourceapi.DeviceRequestAllocationResult
	switch w.rng.IntN(4) {
	case 0, 1: // a share
		mem := resource.MustParse(fmt.Sprintf("%dGi", 1+w.rng.IntN(8)))
		results = append(results, resourceapi.DeviceRequestAllocationResult{
			Request: "gpu", Driver: device.DriverName, Pool: node, Device: fmt.Sprintf("gpu-%d", w.rng.IntN(4)),
			ShareID:          ptr.To(types.UID(fmt.Sprintf("share-%d", w.next))),
			ConsumedCapacity: map[resourceapi.QualifiedName]resource.Quantity{device.CapacityMemory: mem, device.CapacityCompute: resource.MustParse("20")},
		})
	case 2: // whole cards
		for i := range 1 + w.rng.IntN(2) {
			results = append(results, resourceapi.DeviceRequestAllocationResult{
				Request: "gpu", Driver: device.DriverName, Pool: node, Device: fmt.Sprintf("gpu-%d", (w.next+i)%4),
			})
		}
	case 3: // another driver's device
		results = append(results, resourceapi.DeviceRequestAllocationResult{Request: "nic", Driver: "other.example.com", Pool: node, Device: "nic-0"})
	}
	c.Status.Allocation = &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{Results: results}}
	return c
}

// check compares the state with a model built from scratch, the way
// PreScore built it for every pod before: group our slices by node, read
// the cards, apply every allocated claim on the node's pools, sample the
// workload of every allocation on a modelled node.
func (w *world) check(t *testing.T, when string) {
	t.Helper()
	slicesByNode := map[string][]*resourceapi.ResourceSlice{}
	for _, uid := range sortedKeys(w.slices) {
		s := w.slices[uid]
		if ours(s) {
			slicesByNode[*s.Spec.NodeName] = append(slicesByNode[*s.Spec.NodeName], s)
		}
	}
	var live []*resourceapi.ResourceClaim
	for _, uid := range sortedKeys(w.claims) {
		c := w.claims[uid]
		if a, ok := w.assumed[uid]; ok {
			c = a
		}
		live = append(live, c)
	}
	allocations := placement.AllocationsOf(live)
	models := map[string]*placement.Node{}
	for node, nodeSlices := range slicesByNode {
		cards, err := placement.CardsFromSlices(node, nodeSlices)
		if err != nil {
			t.Fatalf("%s: reading node %s: %v", when, node, err)
		}
		pools := map[string]bool{}
		for _, s := range nodeSlices {
			pools[s.Spec.Pool.Name] = true
		}
		var onNode []placement.Allocation
		for _, a := range allocations {
			if slices.ContainsFunc(a.Devices, func(d placement.AllocatedDevice) bool { return pools[d.Pool] }) {
				onNode = append(onNode, a)
			}
		}
		if n, err := cards.Node(0, 0, 0, 0, onNode); err == nil {
			models[node] = n
		}
	}
	wantShapes := map[Shape]int{}
	for _, r := range placement.WorkloadSample(allocations, models) {
		wantShapes[ShapeOf(r)]++
	}

	snap := w.state.Snapshot(worldNodes)
	for _, node := range worldNodes {
		got, mem := w.state.Model(node)
		want := models[node]
		if got != nil && mem != cardMemory(got) {
			t.Errorf("%s: node %s: card memory %d recorded, the model's is %d", when, node, mem, cardMemory(got))
		}
		switch {
		case want == nil && got == nil:
		case want == nil || got == nil:
			t.Errorf("%s: node %s modelled: state %v, rebuild %v", when, node, got != nil, want != nil)
		case !reflect.DeepEqual(got.Cards, want.Cards):
			t.Errorf("%s: node %s cards differ:\nstate   %+v\nrebuild %+v", when, node, got.Cards, want.Cards)
		}
	}
	if !reflect.DeepEqual(snap.Shapes, wantShapes) && (len(snap.Shapes) > 0 || len(wantShapes) > 0) {
		t.Errorf("%s: workload histogram: state %v, rebuild %v", when, snap.Shapes, wantShapes)
	}
	// A Snapshot of some nodes samples only their allocations.
	part := w.state.Snapshot(worldNodes[:2])
	partModels := map[string]*placement.Node{}
	for _, node := range worldNodes[:2] {
		if models[node] != nil {
			partModels[node] = models[node]
		}
	}
	wantPart := map[Shape]int{}
	for _, r := range placement.WorkloadSample(allocations, partModels) {
		wantPart[ShapeOf(r)]++
	}
	if !reflect.DeepEqual(part.Shapes, wantPart) && (len(part.Shapes) > 0 || len(wantPart) > 0) {
		t.Errorf("%s: workload histogram of n0, n1: state %v, rebuild %v", when, part.Shapes, wantPart)
	}
}
