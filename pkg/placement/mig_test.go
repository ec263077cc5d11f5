package placement

import (
	"context"
	"fmt"
	"testing"

	resourceapi "k8s.io/api/resource/v1"

	"github.com/tangram-gpu/tangram/pkg/gpu"
	"github.com/tangram-gpu/tangram/pkg/gpu/fakegpu"
	"github.com/tangram-gpu/tangram/pkg/resourceslices"
)

// migTestCluster is nodes of one H100 80GB each in MIG mode (the guide's
// profiles, pkg/gpu/fakegpu), modelled from the slices the plugin
// publishes, with a validator running the real allocator.
func migTestCluster(t *testing.T, names ...string) ([]*Node, *DRAValidator) {
	t.Helper()
	var profiles []gpu.MIGProfile
	for _, p := range fakegpu.MIGTable("h100-80gb") {
		q := gpu.MIGProfile{ID: p.ID, Name: p.Name, ComputeSlices: p.ComputeSlices, Instances: p.Instances, MemoryBytes: p.MemoryMiB << 20}
		for _, s := range p.Starts {
			q.Placements = append(q.Placements, gpu.MIGPlacement{Start: s, Size: p.MemorySlices})
		}
		profiles = append(profiles, q)
	}
	var nodes []*Node
	bySlice := map[string][]*resourceapi.ResourceSlice{}
	for _, name := range names {
		gpus := []gpu.GPU{{Index: 0, UUID: "GPU-" + name, ProductName: "NVIDIA H100 80GB HBM3", MemoryBytes: 80 << 30,
			MIG: &gpu.MIG{Enabled: true, PendingEnabled: true, Profiles: profiles}}}
		res, err := resourceslices.DriverResources(gpus, resourceslices.Options{NodeName: name, Sharing: true})
		if err != nil {
			t.Fatal(err)
		}
		slices := resourceslices.ResourceSlices(name, res)
		cards, err := CardsFromSlices(name, slices)
		if err != nil {
			t.Fatal(err)
		}
		n, err := cards.Node(32000, 131072, 0, 0, nil)
		if err != nil {
			t.Fatal(err)
		}
		nodes = append(nodes, n)
		bySlice[name] = slices
	}
	v, err := NewDRAValidator(context.Background(), bySlice)
	if err != nil {
		t.Fatal(err)
	}
	return nodes, v
}

// TestMIGPartitionsPackOntoSplitCards: two nodes of one H100 in MIG mode;
// a 1g, a second 1g, then a 7g. kube-scheduler's stock scoring spreads the
// two 1g over both nodes (least allocated), breaking both cards, and the
// 7g finds no room; best-fit and tangram put the second 1g beside the
// first, on the card already split, and the 7g gets the untouched card.
// The real allocator validates every placement.
func TestMIGPartitionsPackOntoSplitCards(t *testing.T) {
	w := NewWorkload([]Request{{Name: "w", CPUMilli: 1000, MemoryMiB: 1024, MIGProfile: "1g.10gb"}, {Name: "x", CPUMilli: 1000, MemoryMiB: 1024, ShareMilli: 500}})
	for _, tc := range []struct {
		policy string
		want7g bool
	}{{"stock", false}, {"best-fit", true}, {"tangram", true}} {
		t.Run(tc.policy, func(t *testing.T) {
			nodes, v := migTestCluster(t, "a", "b")
			p, err := New(tc.policy, w)
			if err != nil {
				t.Fatal(err)
			}
			s := NewScheduler(nodes, p, v, 1)
			var got []string
			for i, profile := range []string{"1g.10gb", "1g.10gb", "7g.80gb"} {
				r := Request{Name: fmt.Sprintf("r%d", i), CPUMilli: 1000, MemoryMiB: 1024, MIGProfile: profile}
				pl, ok, err := s.Place(context.Background(), r)
				if err != nil {
					t.Fatal(err)
				}
				if ok {
					got = append(got, profile+"@"+pl.Node.Name)
				} else {
					got = append(got, profile+" failed")
				}
			}
			if s.Stats.Refused != 0 || s.Stats.Disagreed != 0 {
				t.Errorf("model and allocator differ: %+v", s.Stats)
			}
			placed7g := got[2] != "7g.80gb failed"
			if placed7g != tc.want7g {
				t.Errorf("placements %v: 7g placed %v, want %v", got, placed7g, tc.want7g)
			}
		})
	}
}

// TestRequestFromMIGClaims: a pod's claim of class mig.tangram.dev naming a
// profile (as dra.MIGPartition and the docs write it) is a MIG request of
// that profile, worth its sevenths of a card.
func TestRequestFromMIGClaims(t *testing.T) {
	claim := &resourceapi.ResourceClaim{Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{{
		Name: "mig", Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: "mig.tangram.dev", Count: 1,
			Selectors: []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{Expression: `device.attributes["gpu.tangram.dev"].profile == "3g.40gb"`}}}},
	}}}}}
	r, ok := RequestFromClaims("p", 1000, 1024, []*resourceapi.ResourceClaim{claim}, 80<<30)
	if !ok || r.MIGProfile != "3g.40gb" || r.GPUMilli() != 428 {
		t.Errorf("request %+v (found %v), want a 3g.40gb partition of 428 milli-GPU", r, ok)
	}
}
