//go:build cgo

package nvmlgpu

import (
	"context"
	"errors"
	"path/filepath"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	mocknvml "github.com/tangram-gpu/tangram/hack/mock-nvml"
	"github.com/tangram-gpu/tangram/pkg/gpu"
	"github.com/tangram-gpu/tangram/pkg/gpu/fakegpu"
)

const h100MIGProfile = `
name: h100-mig
gpus:
- {index: 0, productName: NVIDIA H100 80GB HBM3, memory: 80Gi, pciBusID: "0000:47:00.0", migType: h100-80gb, migMode: enabled, architecture: hopper, cudaComputeCapability: "9.0"}
`

// TestMIGPartitions holds NVML's implementation (over the C mock library)
// and the fake cards' one to the same behaviour: create at a placement with
// its compute instance, the refusals (taken, out of resources), list,
// destroy (compute instance, then GPU instance) and an interrupted create
// completed. Profile IDs are the MIG user guide's for the H100 80GB: 19
// (1g.10gb, seven at 0..6), 9 (3g.40gb at 0 or 4), 20 (1g.10gb+me, one per
// card), 0 (7g.80gb at 0).
func TestMIGPartitions(t *testing.T) {
	const node = "node-mig"
	p, err := fakegpu.ParseProfile([]byte(h100MIGProfile))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	// bareGI makes a GPU instance without its compute instance, as a
	// crash between the two creates leaves one.
	type bareGI func(t *testing.T, card gpu.GPU, profileID, start int)
	impls := map[string]func(t *testing.T) (gpu.MIGPartitions, gpu.GPU, bareGI){
		"fake": func(t *testing.T) (gpu.MIGPartitions, gpu.GPU, bareGI) {
			gpus, err := fakegpu.NewFakeSource(node, p).GPUs(ctx)
			if err != nil {
				t.Fatal(err)
			}
			parts := fakegpu.NewPartitions(filepath.Join(t.TempDir(), fakegpu.PartitionsFileName))
			return parts, gpus[0], func(t *testing.T, card gpu.GPU, profileID, start int) {
				prof, _ := card.MIG.Profile(profileID)
				pl, _ := prof.PlacementAt(start)
				if _, err := parts.InjectGPUInstance(card, profileID, start, pl.Size, false); err != nil {
					t.Fatal(err)
				}
			}
		},
		"nvml over the mock library": func(t *testing.T) (gpu.MIGPartitions, gpu.GPU, bareGI) {
			mocknvml.UseProfile(t, p, node)
			src, done, err := Open(ctx, mockLibraryPath(t))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(done)
			gpus, err := src.GPUs(ctx)
			if err != nil {
				t.Fatal(err)
			}
			parts, err := Partitions(src)
			if err != nil {
				t.Fatal(err)
			}
			return parts, gpus[0], func(t *testing.T, card gpu.GPU, profileID, start int) {
				dev, ret := src.(*source).lib.DeviceGetHandleByUUID(card.UUID)
				if ret != nvml.SUCCESS {
					t.Fatal(ret)
				}
				info, err := profileByID(dev, profileID)
				if err != nil {
					t.Fatal(err)
				}
				prof, _ := card.MIG.Profile(profileID)
				pl, _ := prof.PlacementAt(start)
				if _, ret := dev.CreateGpuInstanceWithPlacement(&info, &nvml.GpuInstancePlacement{Start: uint32(start), Size: uint32(pl.Size)}); ret != nvml.SUCCESS {
					t.Fatal(ret)
				}
			}
		},
	}
	for name, impl := range impls {
		t.Run(name, func(t *testing.T) {
			parts, card, bare := impl(t)
			if card.MIG == nil || !card.MIG.Enabled {
				t.Fatalf("card %+v is not in MIG mode", card)
			}
			g3, err := parts.Create(ctx, card, 9, 4)
			if err != nil {
				t.Fatal(err)
			}
			if g3.ProfileID != 9 || g3.Placement != (gpu.MIGPlacement{Start: 4, Size: 4}) || g3.ComputeInstanceID < 0 || len(g3.UUID) != len("MIG-")+36 {
				t.Errorf("3g.40gb at 4 = %+v, want profile 9 at {4 4} with a compute instance and a MIG UUID", g3)
			}
			g1, err := parts.Create(ctx, card, 19, 0)
			if err != nil {
				t.Fatal(err)
			}
			if g1.UUID == g3.UUID || g1.GPUInstanceID == g3.GPUInstanceID {
				t.Errorf("two instances share IDs: %+v %+v", g1, g3)
			}
			for _, tt := range []struct {
				what       string
				profile, s int
				want       error
			}{
				{"1g.10gb inside the 3g.40gb", 19, 5, gpu.ErrMIGPlacementTaken},
				{"7g.80gb over both", 0, 0, gpu.ErrMIGPlacementTaken},
			} {
				if _, err := parts.Create(ctx, card, tt.profile, tt.s); !errors.Is(err, tt.want) {
					t.Errorf("%s: %v, want %v", tt.what, err, tt.want)
				}
			}
			if _, err := parts.Create(ctx, card, 20, 1); err != nil {
				t.Fatalf("1g.10gb+me at 1: %v", err)
			}
			if _, err := parts.Create(ctx, card, 20, 2); !errors.Is(err, gpu.ErrMIGOutOfResources) {
				t.Errorf("a second 1g.10gb+me: %v, want %v", err, gpu.ErrMIGOutOfResources)
			}
			if _, err := parts.Create(ctx, card, 9, 2); err == nil {
				t.Error("3g.40gb at 2, not a placement of the profile: created")
			}
			list, err := parts.List(ctx, card)
			if err != nil {
				t.Fatal(err)
			}
			if len(list) != 3 || list[0] != g1 || list[2] != g3 {
				t.Errorf("List = %+v, want the 1g at 0, the 1g+me at 1 and the 3g at 4 as created", list)
			}
			for _, m := range list {
				if err := parts.Destroy(ctx, card, m.GPUInstanceID); err != nil {
					t.Fatal(err)
				}
			}
			if err := parts.Destroy(ctx, card, g3.GPUInstanceID); err != nil {
				t.Errorf("destroying an absent GPU instance: %v, want no error", err)
			}
			if list, err := parts.List(ctx, card); err != nil || len(list) != 0 {
				t.Errorf("List after destroying all = %+v %v, want none", list, err)
			}
			g7, err := parts.Create(ctx, card, 0, 0)
			if err != nil {
				t.Fatalf("7g.80gb once the card is empty: %v", err)
			}
			if err := parts.Destroy(ctx, card, g7.GPUInstanceID); err != nil {
				t.Fatal(err)
			}

			// A create interrupted between its steps: listed without a
			// compute instance, then completed.
			bare(t, card, 9, 0)
			list, err = parts.List(ctx, card)
			if err != nil || len(list) != 1 || list[0].ComputeInstanceID != -1 || list[0].UUID != "" {
				t.Fatalf("List with a bare GPU instance = %+v %v, want it without compute instance or UUID", list, err)
			}
			done, err := parts.CompleteComputeInstance(ctx, card, list[0].GPUInstanceID)
			if err != nil || done.ComputeInstanceID < 0 || done.UUID == "" || done.Placement != list[0].Placement {
				t.Errorf("CompleteComputeInstance = %+v %v, want the GPU instance with its compute instance and MIG UUID", done, err)
			}
			if err := parts.Destroy(ctx, card, done.GPUInstanceID); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// failingMIGCount is an NVML library whose cards answer
// nvmlDeviceGetMaxMigDeviceCount with ERROR_UNKNOWN (a return nvml.h lists
// for it), everything else answered by the C mock: Create's last step
// (reading the new MIG device's UUID) fails after both instances exist.
type failingMIGCount struct{ nvml.Interface }

func (l failingMIGCount) DeviceGetHandleByUUID(uuid string) (nvml.Device, nvml.Return) {
	dev, ret := l.Interface.DeviceGetHandleByUUID(uuid)
	return failingMIGCountDevice{dev}, ret
}

type failingMIGCountDevice struct{ nvml.Device }

func (failingMIGCountDevice) GetMaxMigDeviceCount() (int, nvml.Return) {
	return 0, nvml.ERROR_UNKNOWN
}

// TestMIGCreateFailingAfterComputeInstanceLeavesNothing: when Create fails
// after the compute instance was created, it destroys the compute instance
// and then the GPU instance (the mock answers IN_USE to destroying a GPU
// instance that still has one, as NVML does), so no instance is left.
func TestMIGCreateFailingAfterComputeInstanceLeavesNothing(t *testing.T) {
	const node = "node-mig"
	p, err := fakegpu.ParseProfile([]byte(h100MIGProfile))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	mocknvml.UseProfile(t, p, node)
	src, done, err := Open(ctx, mockLibraryPath(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(done)
	gpus, err := src.GPUs(ctx)
	if err != nil {
		t.Fatal(err)
	}
	lib := src.(*source).lib
	failing := &partitions{lib: failingMIGCount{lib}}
	_, err = failing.Create(ctx, gpus[0], 9, 4)
	if err == nil {
		t.Fatal("Create with the MIG device count failing: no error")
	}
	if errors.Is(err, nvml.ERROR_IN_USE) {
		t.Errorf("Create's clean-up: %v, want the compute instance destroyed before the GPU instance", err)
	}
	list, err := (&partitions{lib: lib}).List(ctx, gpus[0])
	if err != nil || len(list) != 0 {
		t.Errorf("instances after the failed create = %+v %v, want none", list, err)
	}
}
