package packing

import (
	"context"
	"fmt"
	"testing"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"
	fwk "k8s.io/kube-scheduler/framework"
	schedframework "k8s.io/kubernetes/pkg/scheduler/framework"
	"k8s.io/utils/ptr"

	"github.com/tangram-gpu/tangram/pkg/device"
	"github.com/tangram-gpu/tangram/pkg/dra"
	"github.com/tangram-gpu/tangram/pkg/gpu/fakegpu"
	"github.com/tangram-gpu/tangram/pkg/resourceslices"
)

// benchCluster is nodes fake DGX H100s (8 × 80Gi, shareable) of which every
// other card holds a 20Gi share, allocated by the real allocator: the
// cluster size of the openb trace (1213 nodes) half full of shares.
func benchCluster(b *testing.B, nodes int) (*fakeDRA, []fwk.NodeInfo) {
	b.Helper()
	ctx := context.Background()
	p, err := fakegpu.BuiltinProfile("dgx-h100")
	if err != nil {
		b.Fatal(err)
	}
	fakeAPI := &fakeDRA{}
	var infos []fwk.NodeInfo
	for i := range nodes {
		name := fmt.Sprintf("node-%04d", i)
		gpus, err := fakegpu.NewFakeSource(name, p).GPUs(ctx)
		if err != nil {
			b.Fatal(err)
		}
		devices, err := resourceslices.Devices(gpus, resourceslices.Options{NodeName: name, Sharing: true})
		if err != nil {
			b.Fatal(err)
		}
		slice := &resourceapi.ResourceSlice{ObjectMeta: clusterObject(name + "-gpu"), Spec: resourceapi.ResourceSliceSpec{
			Driver: "gpu.tangram.dev", NodeName: ptr.To(name), Devices: devices,
			Pool: resourceapi.ResourcePool{Name: name, ResourceSliceCount: 1},
		}}
		fakeAPI.slices = append(fakeAPI.slices, slice)
		harness := &dra.Node{Name: name, Slices: []*resourceapi.ResourceSlice{slice}, Classes: device.DeviceClasses()}
		ni := schedframework.NewNodeInfo()
		for card := 0; card < 8; card += 2 {
			// Whole cards first so the next share lands on a fresh card.
			claimName := fmt.Sprintf("%s-share-%d", name, card)
			c := dra.Claim(claimName, nil, dra.SharedGPU("gpu", resource.MustParse("20Gi"), resource.MustParse("0")))
			c.UID = types.UID(claimName)
			allocated, err := harness.Allocate(ctx, c)
			if err != nil {
				b.Fatal(err)
			}
			fakeAPI.claims = append(fakeAPI.claims, allocated)
			ni.AddPod(podWithClaim(claimName, "4", claimName))
		}
		ni.SetNode(&v1.Node{ObjectMeta: clusterObject(name), Status: v1.NodeStatus{Allocatable: v1.ResourceList{
			v1.ResourceCPU: resource.MustParse("96"), v1.ResourceMemory: resource.MustParse("1Ti"), v1.ResourcePods: resource.MustParse("110"),
		}}})
		infos = append(infos, ni)
	}
	return fakeAPI, infos
}

// BenchmarkScoreOnePod is what the plugin adds to one pod's scheduling
// cycle when every node passed filtering: PreScore (the workload on the
// nodes and the policy for it), Score for each node and NormalizeScore. The
// cluster does not change between pods, so this is the steady state: the
// policy and every node's last score are reused.
func BenchmarkScoreOnePod(b *testing.B) {
	for _, nodes := range []int{100, 1213} {
		b.Run(fmt.Sprintf("nodes=%d", nodes), func(b *testing.B) { benchScoreOnePod(b, nodes, false) })
	}
}

// BenchmarkScoreOnePodWorkloadChanges is BenchmarkScoreOnePod with one
// allocation added or removed before every pod, as when the previous pod
// was bound: one node is modelled again, the workload differs, so the
// policy is built again and every node scored anew (its score cache still
// scores each distinct node state once).
func BenchmarkScoreOnePodWorkloadChanges(b *testing.B) {
	for _, nodes := range []int{100, 1213} {
		b.Run(fmt.Sprintf("nodes=%d", nodes), func(b *testing.B) { benchScoreOnePod(b, nodes, true) })
	}
}

func benchScoreOnePod(b *testing.B, nodes int, change bool) {
	ctx := context.Background()
	fakeAPI, infos := benchCluster(b, nodes)
	toggled := fakeAPI.claims[0]
	incoming := dra.Claim("incoming", nil, dra.SharedGPU("gpu", resource.MustParse("20Gi"), resource.MustParse("0")))
	incoming.UID = "incoming"
	fakeAPI.claims = append(fakeAPI.claims, incoming)
	plugin := newTestPlugin(b, "tangram", fakeAPI)
	pod := podWithClaim("incoming", "4", "incoming")
	scores := make(fwk.NodeScoreList, len(infos))
	b.ReportAllocs()
	b.ResetTimer()
	cpu := processCPU(b)
	present := true
	for b.Loop() {
		if change {
			if present {
				plugin.state.DeleteClaim(toggled.UID)
			} else {
				plugin.state.UpsertClaim(toggled)
			}
			present = !present
		}
		state := schedframework.NewCycleState()
		if st := plugin.PreScore(ctx, state, pod, infos); !st.IsSuccess() {
			b.Fatalf("PreScore: %v", st)
		}
		for i, ni := range infos {
			s, st := plugin.Score(ctx, state, pod, ni)
			if !st.IsSuccess() {
				b.Fatalf("Score: %v", st)
			}
			scores[i] = fwk.NodeScore{Name: ni.Node().Name, Score: s}
		}
		if st := plugin.NormalizeScore(ctx, state, pod, scores); !st.IsSuccess() {
			b.Fatalf("NormalizeScore: %v", st)
		}
	}
	reportCPUPerOp(b, cpu)
}
