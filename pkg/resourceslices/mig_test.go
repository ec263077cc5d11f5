package resourceslices_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/tangram-gpu/tangram/pkg/device"
	"github.com/tangram-gpu/tangram/pkg/dra"
	"github.com/tangram-gpu/tangram/pkg/gpu"
	"github.com/tangram-gpu/tangram/pkg/gpu/fakegpu"
	"github.com/tangram-gpu/tangram/pkg/resourceslices"
)

// guideProfile is one GPU instance profile as NVIDIA's MIG user guide
// documents it.
type guideProfile struct {
	name      string
	id        int
	compute   int // sevenths of the SMs
	instances int
	sms       int
	ce        int
	mib       int64
	starts    []int
	size      int // memory slices (eighths)
}

// guideTables are the MIG user guide's "Supported MIG Profiles" tables
// (https://docs.nvidia.com/datacenter/tesla/mig-user-guide/supported-mig-profiles.html:
// "A100 MIG Profiles" for A100-SXM4-40GB, renamed for 80GB as the guide
// says; "H100 MIG Profiles", H100-SXM5-80GB; "H200 MIG Profiles"):
// fraction of SMs, copy engines, number of instances (one +me); the
// placements of nvidia-smi mig -lgipp and the SMs of nvidia-smi mig -lgip
// in "Getting Started with MIG" ("List GPU Instance Profiles",
// A100-SXM4-40GB; the same slice layout on H100/H200). Memory, in MiB as
// NVML reports it: A100 40GB from that -lgip (4.75, 9.62, 19.50, 39.25
// GiB); H200 as NVML reported it on an H200 (r580.159.04,
// docs/gpu-reports/h200-580.159.04-nvml-mig.json); A100 80GB and H100
// 80GB: the guide prints no -lgip for them, these are nvidia-smi mig -lgip
// on real cards in public reports, unverified by us.
var guideTables = map[string][]guideProfile{
	"a100-40gb": {
		{"1g.5gb", 19, 1, 7, 14, 1, 4864, []int{0, 1, 2, 3, 4, 5, 6}, 1},
		{"2g.10gb", 14, 2, 3, 28, 2, 9856, []int{0, 2, 4}, 2},
		{"3g.20gb", 9, 3, 2, 42, 3, 19968, []int{0, 4}, 4},
		{"4g.20gb", 5, 4, 1, 56, 4, 19968, []int{0}, 4},
		{"7g.40gb", 0, 7, 1, 98, 7, 40192, []int{0}, 8},
		{"1g.5gb+me", 20, 1, 1, 14, 1, 4864, []int{0, 1, 2, 3, 4, 5, 6}, 1},
		{"1g.10gb", 15, 1, 4, 14, 1, 9856, []int{0, 2, 4, 6}, 2},
	},
	"a100-80gb": {
		{"1g.10gb", 19, 1, 7, 14, 1, 9728, []int{0, 1, 2, 3, 4, 5, 6}, 1},
		{"2g.20gb", 14, 2, 3, 28, 2, 19968, []int{0, 2, 4}, 2},
		{"3g.40gb", 9, 3, 2, 42, 3, 40192, []int{0, 4}, 4},
		{"4g.40gb", 5, 4, 1, 56, 4, 40192, []int{0}, 4},
		{"7g.80gb", 0, 7, 1, 98, 7, 80896, []int{0}, 8},
		{"1g.10gb+me", 20, 1, 1, 14, 1, 9728, []int{0, 1, 2, 3, 4, 5, 6}, 1},
		{"1g.20gb", 15, 1, 4, 14, 1, 19968, []int{0, 2, 4, 6}, 2},
	},
	"h100-80gb": {
		{"1g.10gb", 19, 1, 7, 16, 1, 9984, []int{0, 1, 2, 3, 4, 5, 6}, 1},
		{"2g.20gb", 14, 2, 3, 32, 2, 20096, []int{0, 2, 4}, 2},
		{"3g.40gb", 9, 3, 2, 60, 3, 40448, []int{0, 4}, 4},
		{"4g.40gb", 5, 4, 1, 64, 4, 40448, []int{0}, 4},
		{"7g.80gb", 0, 7, 1, 132, 8, 81152, []int{0}, 8},
		{"1g.10gb+me", 20, 1, 1, 16, 1, 9984, []int{0, 1, 2, 3, 4, 5, 6}, 1},
		{"1g.20gb", 15, 1, 4, 26, 1, 20096, []int{0, 2, 4, 6}, 2},
	},
	"h200-141gb": {
		{"1g.18gb", 19, 1, 7, 16, 1, 16384, []int{0, 1, 2, 3, 4, 5, 6}, 1},
		{"2g.35gb", 14, 2, 3, 32, 2, 33280, []int{0, 2, 4}, 2},
		{"3g.71gb", 9, 3, 2, 60, 3, 71424, []int{0, 4}, 4},
		{"4g.71gb", 5, 4, 1, 64, 4, 71424, []int{0}, 4},
		{"7g.141gb", 0, 7, 1, 132, 8, 143360, []int{0}, 8},
		{"1g.18gb+me", 20, 1, 1, 16, 1, 16384, []int{0, 1, 2, 3, 4, 5, 6}, 1},
		{"1g.35gb", 15, 1, 4, 26, 1, 33280, []int{0, 2, 4, 6}, 2},
	},
}

var migCards = map[string]struct{ product, memory string }{
	"a100-40gb":  {"NVIDIA A100-SXM4-40GB", "40Gi"},
	"a100-80gb":  {"NVIDIA A100-SXM4-80GB", "80Gi"},
	"h100-80gb":  {"NVIDIA H100 80GB HBM3", "80Gi"},
	"h200-141gb": {"NVIDIA H200", "141Gi"},
}

const migNode = "node-a"

// migGPUs are two cards of a MIG card type: card 0 in mode mode0, card 1
// not in MIG mode.
func migGPUs(t testing.TB, migType, mode0 string) []gpu.GPU {
	t.Helper()
	c := migCards[migType]
	p, err := fakegpu.ParseProfile(fmt.Appendf(nil, `
defaults: {productName: %q, memory: %s, migType: %s, architecture: hopper}
gpus:
- {index: 0, pciBusID: "0000:1b:00.0", numaNode: 0, migMode: %s}
- {index: 1, pciBusID: "0000:2b:00.0", numaNode: 1, migMode: disabled}
`, c.product, c.memory, migType, mode0))
	if err != nil {
		t.Fatal(err)
	}
	gpus, err := fakegpu.NewFakeSource(migNode, p).GPUs(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return gpus
}

func migNodeOf(t testing.TB, gpus []gpu.GPU) *dra.Node {
	t.Helper()
	res, err := resourceslices.DriverResources(gpus, resourceslices.Options{NodeName: migNode, Sharing: true})
	if err != nil {
		t.Fatal(err)
	}
	out := resourceslices.ResourceSlices(migNode, res)
	for _, s := range out {
		if err := resourceslices.ValidateResourceSlice(s); err != nil {
			t.Fatal(err)
		}
	}
	return &dra.Node{Name: migNode, Slices: out, Classes: device.DeviceClasses()}
}

func sliceDevices(slices []*resourceapi.ResourceSlice) map[string]resourceapi.Device {
	out := map[string]resourceapi.Device{}
	for _, s := range slices {
		for _, d := range s.Spec.Devices {
			out[d.Name] = d
		}
	}
	return out
}

func intAttr(d resourceapi.Device, name string) int64 {
	if a, ok := d.Attributes[resourceapi.QualifiedName(name)]; ok && a.IntValue != nil {
		return *a.IntValue
	}
	return -1
}

func strAttr(d resourceapi.Device, name resourceapi.QualifiedName) string {
	if a, ok := d.Attributes[name]; ok && a.StringValue != nil {
		return *a.StringValue
	}
	return ""
}

// TestMIGPublicationFollowsTheGuide: a card in MIG mode publishes, instead
// of itself, one device per profile and placement of the guide's tables
// with the profile's attributes and memory, all consuming one counter set
// of the card (a counter per memory slice, the 7 compute slices, one
// instance of the single +me profile); the card not in MIG mode is
// published as before, and nothing else is.
func TestMIGPublicationFollowsTheGuide(t *testing.T) {
	for migType, table := range guideTables {
		t.Run(migType, func(t *testing.T) {
			gpus := migGPUs(t, migType, fakegpu.MIGModeEnabled)
			node := migNodeOf(t, gpus)
			devices := sliceDevices(node.Slices)

			want := map[string]bool{device.CardDeviceName(1): true}
			for _, p := range table {
				for _, start := range p.starts {
					name := device.MIGDeviceName(0, p.id, start)
					want[name] = true
					d, ok := devices[name]
					if !ok {
						t.Errorf("%s (%s at %d) not published", name, p.name, start)
						continue
					}
					if got := strAttr(d, device.AttrMIGProfile); got != p.name {
						t.Errorf("%s: profile %q, want %q", name, got, p.name)
					}
					if strAttr(d, device.AttrType) != device.TypeMIG || intAttr(d, device.AttrMIGProfileID) != int64(p.id) ||
						intAttr(d, device.AttrMIGPlacementStart) != int64(start) || intAttr(d, device.AttrMultiprocessors) != int64(p.sms) ||
						intAttr(d, device.AttrCopyEngines) != int64(p.ce) || intAttr(d, device.AttrParentIndex) != 0 ||
						strAttr(d, device.AttrParentUUID) != gpus[0].UUID {
						t.Errorf("%s: attributes %v, want type mig, profile ID %d, start %d, %d SMs, %d copy engines, parent 0 %s",
							name, d.Attributes, p.id, start, p.sms, p.ce, gpus[0].UUID)
					}
					for _, attr := range []resourceapi.QualifiedName{device.AttrNVLinkDomain, device.AttrProductName,
						"resource.kubernetes.io/pciBusID", "resource.kubernetes.io/numaNode"} {
						if _, ok := d.Attributes[attr]; !ok {
							t.Errorf("%s: no %s, which the card has", name, attr)
						}
					}
					if _, ok := d.Attributes[device.AttrUUID]; ok {
						t.Errorf("%s carries a uuid: a partition has none until it is created", name)
					}
					if got := d.Capacity[device.CapacityMemory].Value; got.Cmp(*resource.NewQuantity(p.mib<<20, resource.BinarySI)) != 0 {
						t.Errorf("%s: memory %s, want %d MiB", name, &got, p.mib)
					}
					wantUse := map[string]int64{device.MIGCounterComputeSlices: int64(p.compute)}
					for n := start; n < start+p.size; n++ {
						wantUse[device.MIGCounterMemorySlice(n)] = 1
					}
					if p.instances < len(p.starts) {
						wantUse[device.MIGCounterProfileInstances(p.id)] = 1
					}
					if len(d.ConsumesCounters) != 1 || d.ConsumesCounters[0].CounterSet != device.MIGCounterSetName(0) {
						t.Fatalf("%s consumes %+v, want one consumption of counter set %s", name, d.ConsumesCounters, device.MIGCounterSetName(0))
					}
					got := map[string]int64{}
					for c, v := range d.ConsumesCounters[0].Counters {
						got[c] = v.Value.Value()
					}
					if diff := cmp.Diff(wantUse, got); diff != "" {
						t.Errorf("%s consumes (-want +got):\n%s", name, diff)
					}
				}
			}
			for name := range devices {
				if !want[name] {
					t.Errorf("%s published; the guide has no such partition (and a card in MIG mode is not published whole)", name)
				}
			}
			if d := devices[device.CardDeviceName(1)]; strAttr(d, device.AttrType) != device.TypeGPU || len(d.ConsumesCounters) != 0 {
				t.Errorf("card 1 (MIG off) = %+v, want the card as before", d)
			}

			var sets []resourceapi.CounterSet
			for _, s := range node.Slices {
				sets = append(sets, s.Spec.SharedCounters...)
			}
			wantSet := map[string]int64{device.MIGCounterComputeSlices: 7, device.MIGCounterProfileInstances(20): 1}
			for n := range 8 {
				wantSet[device.MIGCounterMemorySlice(n)] = 1
			}
			if len(sets) != 1 || sets[0].Name != device.MIGCounterSetName(0) {
				t.Fatalf("counter sets %+v, want one, %s", sets, device.MIGCounterSetName(0))
			}
			got := map[string]int64{}
			for c, v := range sets[0].Counters {
				got[c] = v.Value.Value()
			}
			if diff := cmp.Diff(wantSet, got); diff != "" {
				t.Errorf("counter set (-want +got):\n%s", diff)
			}
		})
	}
}

// TestMIGModeOffPublishesTheCard: the same card with MIG mode off (its
// profiles known all the same) or only pending is published whole, with
// no counters.
func TestMIGModeOffPublishesTheCard(t *testing.T) {
	gpus := migGPUs(t, "h100-80gb", fakegpu.MIGModeDisabled)
	if len(gpus[0].MIG.Profiles) == 0 {
		t.Fatal("fake card with MIG off reports no profiles; NVML reports them in either mode")
	}
	gpus[0].MIG.PendingEnabled = true
	node := migNodeOf(t, gpus)
	got := slices.Sorted(func(yield func(string) bool) {
		for name := range sliceDevices(node.Slices) {
			if !yield(name) {
				return
			}
		}
	})
	if diff := cmp.Diff([]string{"gpu-0", "gpu-1"}, got); diff != "" {
		t.Errorf("devices (-want +got):\n%s", diff)
	}
	for _, s := range node.Slices {
		if len(s.Spec.SharedCounters) > 0 {
			t.Errorf("slice %s publishes counters %+v with no card in MIG mode", s.Name, s.Spec.SharedCounters)
		}
	}
}

// TestMIGWithoutProfilesPublishesNothing: a card in MIG mode whose
// profiles NVML could not report publishes nothing (it cannot run
// anything as a whole card) and the rest of the node is published.
func TestMIGWithoutProfilesPublishesNothing(t *testing.T) {
	gpus := migGPUs(t, "h100-80gb", fakegpu.MIGModeEnabled)
	gpus[0].MIG.Profiles = nil
	node := migNodeOf(t, gpus)
	devices := sliceDevices(node.Slices)
	if _, ok := devices["gpu-1"]; len(devices) != 1 || !ok {
		t.Errorf("devices %v, want only gpu-1", slices.Collect(func(yield func(string) bool) {
			for n := range devices {
				yield(n)
			}
		}))
	}
}

// placementOf reads a MIG device's profile, start and size from the guide.
func placementOf(t *testing.T, table []guideProfile, name string) (guideProfile, int) {
	t.Helper()
	ref, err := device.ParseDeviceName(name)
	if err != nil || ref.MIG == nil {
		t.Fatalf("allocated %q, not a MIG partition: %v", name, err)
	}
	for _, p := range table {
		if p.id == ref.MIG.ProfileID {
			return p, ref.MIG.Start
		}
	}
	t.Fatalf("allocated %q, a profile the guide does not have", name)
	return guideProfile{}, 0
}

func overlap(a guideProfile, aStart int, b guideProfile, bStart int) bool {
	return aStart < bStart+b.size && bStart < aStart+a.size
}

func exactly(name string) string {
	return fmt.Sprintf("device.attributes[%q].%s == %d && device.attributes[%q].%s == %d",
		device.DriverName, device.AttrParentIndex, 0, device.DriverName, device.AttrMIGPlacementStart, must(device.ParseDeviceName(name)).MIG.Start) +
		fmt.Sprintf(" && device.attributes[%q].%s == %d", device.DriverName, device.AttrMIGProfileID, must(device.ParseDeviceName(name)).MIG.ProfileID)
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// TestMIGAllocatorNeverOverlaps: with kube-scheduler's own 1.37 allocator,
// for every pair of partitions of an H100 and of an A100 40GB, the second
// is allocatable beside the first exactly when their placements share no
// memory slice and they are not both the single +me profile; the
// partitions of a card in MIG mode never land with a whole-card or shared
// claim.
func TestMIGAllocatorNeverOverlaps(t *testing.T) {
	ctx := context.Background()
	for _, migType := range []string{"h100-80gb", "a100-40gb"} {
		t.Run(migType, func(t *testing.T) {
			table := guideTables[migType]
			base := migNodeOf(t, migGPUs(t, migType, fakegpu.MIGModeEnabled))
			var names []string
			for name, d := range sliceDevices(base.Slices) {
				if len(d.ConsumesCounters) > 0 {
					names = append(names, name)
				}
			}
			slices.Sort(names)
			for _, first := range names {
				node := *base
				node.Allocated = nil
				if _, err := node.Allocate(ctx, dra.Claim("first", nil, dra.MIGPartition("mig", "", exactly(first)))); err != nil {
					t.Fatalf("%s alone: %v", first, err)
				}
				pa, sa := placementOf(t, table, first)
				for _, second := range names {
					pb, sb := placementOf(t, table, second)
					want := first != second && !overlap(pa, sa, pb, sb) && !(pa.instances == 1 && pa.id == pb.id)
					_, err := node.Try(ctx, dra.Claim("second", nil, dra.MIGPartition("mig", "", exactly(second))))
					if err != nil && !errors.Is(err, dra.ErrUnschedulable) {
						t.Fatalf("%s beside %s: %v", second, first, err)
					}
					if got := err == nil; got != want {
						t.Errorf("%s beside %s: allocated %v, want %v", second, first, got, want)
					}
				}
			}
			// Neither whole-card nor shared claims see the partitions: one
			// of each fits, on card 1 only.
			node := *base
			node.Allocated = nil
			if a, err := node.Allocate(ctx, dra.Claim("whole", nil, dra.WholeGPUs("gpu", 1))); err != nil || dra.Devices(a.Status.Allocation)[0] != "gpu-1" {
				t.Errorf("whole card: %v, want gpu-1", err)
			}
			if _, err := node.Try(ctx, dra.Claim("whole2", nil, dra.WholeGPUs("gpu", 1))); !errors.Is(err, dra.ErrUnschedulable) {
				t.Errorf("a second whole card: %v, want unschedulable (card 0 is in MIG mode)", err)
			}
			node.Allocated = nil
			if _, err := node.Allocate(ctx, dra.Claim("share", nil, dra.SharedGPU("gpu", resource.MustParse("1Gi"), resource.Quantity{}))); err != nil {
				t.Errorf("share: %v", err)
			}
			for _, a := range node.Allocated {
				for _, d := range dra.Devices(a.Status.Allocation) {
					if strings.Contains(d, "-mig-") {
						t.Errorf("claim %s got MIG partition %s", a.Name, d)
					}
				}
			}
		})
	}
}

// TestMIGAllocatesTheGuidesCombinations: every combination below is a
// valid MIG geometry of the guide; kube-scheduler's allocator allocates
// each, as one claim (it finds the placements) and as one claim per
// partition, largest first (first fit, as the scheduler sees claims one by
// one), never two overlapping placements, and nothing more of the card
// afterwards when it is full. A100 40GB: the guide's "Instance Geometry"
// examples ("Getting Started with MIG": 4-2-1, 3-2-1-1, 2-1-1-1-1-1) and
// its 3g.20gb x2 and 1g.5gb x7; H100: 4g+3g, 3g+3g, 7 x 1g.10gb, 4 x
// 1g.20gb, 1g.10gb+me + 6 x 1g.10gb, 3 x 2g.20gb + 1g.10gb (the guide's
// H100 profile table and its placements).
func TestMIGAllocatesTheGuidesCombinations(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		migType  string
		profiles []string
		full     bool // no 1g partition fits beside it
	}{
		{"a100-40gb", []string{"4g.20gb", "2g.10gb", "1g.5gb"}, true},
		{"a100-40gb", []string{"3g.20gb", "2g.10gb", "1g.5gb", "1g.5gb"}, true},
		{"a100-40gb", []string{"2g.10gb", "1g.5gb", "1g.5gb", "1g.5gb", "1g.5gb", "1g.5gb"}, true},
		{"a100-40gb", []string{"3g.20gb", "3g.20gb"}, true},
		{"a100-40gb", slices.Repeat([]string{"1g.5gb"}, 7), true},
		{"h100-80gb", []string{"4g.40gb", "3g.40gb"}, true},
		{"h100-80gb", []string{"3g.40gb", "3g.40gb"}, true},
		{"h100-80gb", slices.Repeat([]string{"1g.10gb"}, 7), true},
		{"h100-80gb", slices.Repeat([]string{"1g.20gb"}, 4), true},
		{"h100-80gb", append([]string{"1g.10gb+me"}, slices.Repeat([]string{"1g.10gb"}, 6)...), true},
		{"h100-80gb", []string{"2g.20gb", "2g.20gb", "2g.20gb", "1g.10gb"}, true},
		{"h100-80gb", []string{"7g.80gb"}, true},
		{"h200-141gb", []string{"4g.71gb", "2g.35gb", "1g.18gb"}, true},
		{"a100-80gb", []string{"3g.40gb", "2g.20gb", "1g.10gb", "1g.10gb"}, true},
	} {
		t.Run(tc.migType+"/"+strings.Join(tc.profiles, "+"), func(t *testing.T) {
			table := guideTables[tc.migType]
			base := migNodeOf(t, migGPUs(t, tc.migType, fakegpu.MIGModeEnabled))
			check := func(what string, node *dra.Node) {
				var got []string
				for _, a := range node.Allocated {
					got = append(got, dra.Devices(a.Status.Allocation)...)
				}
				for i, a := range got {
					pa, sa := placementOf(t, table, a)
					for _, b := range got[i+1:] {
						if pb, sb := placementOf(t, table, b); overlap(pa, sa, pb, sb) {
							t.Errorf("%s: %s and %s overlap", what, a, b)
						}
					}
				}
				if tc.full {
					smallest := table[0].name
					if _, err := node.Try(ctx, dra.Claim("more", nil, dra.MIGPartition("mig", smallest, exactlyCard0))); !errors.Is(err, dra.ErrUnschedulable) {
						t.Errorf("%s: a %s beside the full card: %v, want unschedulable", what, smallest, err)
					}
				}
			}

			one := *base
			one.Allocated = nil
			var reqs []resourceapi.DeviceRequest
			for i, p := range tc.profiles {
				reqs = append(reqs, dra.MIGPartition(fmt.Sprintf("p%d", i), p, exactlyCard0))
			}
			if _, err := one.Allocate(ctx, dra.Claim("all", nil, reqs...)); err != nil {
				t.Errorf("one claim: %v", err)
			} else {
				check("one claim", &one)
			}

			each := *base
			each.Allocated = nil
			for i, p := range tc.profiles {
				if _, err := each.Allocate(ctx, dra.Claim(fmt.Sprintf("c%d", i), nil, dra.MIGPartition("mig", p, exactlyCard0))); err != nil {
					t.Fatalf("claim %d (%s) after %v: %v", i, p, tc.profiles[:i], err)
				}
			}
			check("one claim each", &each)
		})
	}
}

var exactlyCard0 = fmt.Sprintf("device.attributes[%q].%s == 0", device.DriverName, device.AttrParentIndex)

// TestBuiltinMIGProfile: the built-in fake profile mig-h100 (for fake
// clusters and demos) publishes cards 0 and 1 as their 25 partitions each
// with one counter set apiece, and cards 2 (MIG off) and 3 (MIG pending)
// whole.
func TestBuiltinMIGProfile(t *testing.T) {
	p, err := fakegpu.BuiltinProfile("mig-h100")
	if err != nil {
		t.Fatal(err)
	}
	gpus, err := fakegpu.NewFakeSource(migNode, p).GPUs(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	node := migNodeOf(t, gpus)
	perCard := map[string]int{}
	var sets []string
	for _, s := range node.Slices {
		for _, d := range s.Spec.Devices {
			ref := must(device.ParseDeviceName(d.Name))
			kind := "card"
			if ref.MIG != nil {
				kind = "mig"
			}
			perCard[fmt.Sprintf("%d %s", ref.Index, kind)]++
		}
		for _, c := range s.Spec.SharedCounters {
			sets = append(sets, c.Name)
		}
	}
	if diff := cmp.Diff(map[string]int{"0 mig": 25, "1 mig": 25, "2 card": 1, "3 card": 1}, perCard); diff != "" {
		t.Errorf("devices per card (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"gpu-0", "gpu-1"}, sets); diff != "" {
		t.Errorf("counter sets (-want +got):\n%s", diff)
	}
}

// TestMIGPartitionsOverlapping: the partitions that share a memory slice
// with a placement are exactly the published devices that consume one of
// its memory slice counters (what makes the allocator keep them apart),
// in publication order; a card not in MIG mode has none.
func TestMIGPartitionsOverlapping(t *testing.T) {
	gpus := migGPUs(t, "h100-80gb", fakegpu.MIGModeEnabled)
	node := migNodeOf(t, gpus)
	for _, tt := range []struct {
		name  string
		taken gpu.MIGPlacement
		some  []string // a few it must name, checked by hand
		not   []string // and a few it must not
	}{
		{"a 1g at memory slice 2", gpu.MIGPlacement{Start: 2, Size: 1},
			[]string{"gpu-0-mig-19-2", "gpu-0-mig-14-2", "gpu-0-mig-9-0", "gpu-0-mig-0-0", "gpu-0-mig-15-2"},
			[]string{"gpu-0-mig-19-3", "gpu-0-mig-9-4", "gpu-0-mig-14-0"}},
		{"a 3g at memory slice 4", gpu.MIGPlacement{Start: 4, Size: 4},
			[]string{"gpu-0-mig-9-4", "gpu-0-mig-19-6", "gpu-0-mig-0-0"},
			[]string{"gpu-0-mig-9-0", "gpu-0-mig-5-0", "gpu-0-mig-19-3"}},
		{"the 7g", gpu.MIGPlacement{Start: 0, Size: 8}, []string{"gpu-0-mig-19-0", "gpu-0-mig-19-6", "gpu-0-mig-9-4"}, nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var want []string
			for _, s := range node.Slices {
				for _, d := range s.Spec.Devices {
					for n := tt.taken.Start; n < tt.taken.Start+tt.taken.Size && len(d.ConsumesCounters) > 0; n++ {
						if _, ok := d.ConsumesCounters[0].Counters[device.MIGCounterMemorySlice(n)]; ok {
							want = append(want, d.Name)
							break
						}
					}
				}
			}
			got := resourceslices.MIGPartitionsOverlapping(gpus[0], tt.taken)
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("partitions overlapping %+v (-published consumers of its slices +got):\n%s", tt.taken, diff)
			}
			for _, name := range tt.some {
				if !slices.Contains(got, name) {
					t.Errorf("%s not named", name)
				}
			}
			for _, name := range tt.not {
				if slices.Contains(got, name) {
					t.Errorf("%s named, but it does not overlap %+v", name, tt.taken)
				}
			}
		})
	}
	if got := resourceslices.MIGPartitionsOverlapping(gpus[1], gpu.MIGPlacement{Start: 0, Size: 8}); got != nil {
		t.Errorf("card not in MIG mode: %v, want none", got)
	}
}
