// Package sim replays a GPU cluster trace through placement policies and
// the real DRA allocator: every trace node gets the ResourceSlice devices
// Tangram would publish for its cards, every task becomes a pod request and
// a ResourceClaim, and tasks arrive one after another and never leave.
package sim

import (
	"context"
	"fmt"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/tangram-gpu/tangram/pkg/device"
	"github.com/tangram-gpu/tangram/pkg/gpu"
	"github.com/tangram-gpu/tangram/pkg/gpu/fakegpu"
	"github.com/tangram-gpu/tangram/pkg/placement"
	"github.com/tangram-gpu/tangram/pkg/resourceslices"
	"github.com/tangram-gpu/tangram/pkg/trace"
)

const gib = int64(1) << 30

// CardMemory is the framebuffer of each trace card model. The trace names
// models but not their memory; docs/placement.md says which are guesses.
// A share takes the same fraction of memory as of compute, so the values
// change which claims are written, not how well a policy packs.
var CardMemory = map[string]int64{
	"G2":      16 * gib, // Alibaba-internal name, guessed
	"G3":      32 * gib, // Alibaba-internal name, guessed
	"T4":      16 * gib,
	"P100":    16 * gib, // the 16 GB variant; a 12 GB one exists
	"V100M16": 16 * gib,
	"V100M32": 32 * gib,
	"A10":     24 * gib,
}

// Cluster is a trace's nodes as the placement model and as ResourceSlices.
type Cluster struct {
	Nodes  []*placement.Node
	Slices map[string][]*resourceapi.ResourceSlice
	// CapacityMilli is the GPU capacity in milli-GPU.
	CapacityMilli int64
}

// BuildCluster turns trace nodes into model nodes and ResourceSlices.
func BuildCluster(nodes []trace.Node) (*Cluster, error) {
	c := &Cluster{Slices: make(map[string][]*resourceapi.ResourceSlice, len(nodes))}
	for _, tn := range nodes {
		if _, dup := c.Slices[tn.Name]; dup {
			return nil, fmt.Errorf("node %s appears twice in the node list; node names must be unique", tn.Name)
		}
		gpus, err := cardsOf(tn)
		if err != nil {
			return nil, err
		}
		devices, err := publishedDevices(tn.Name, gpus)
		if err != nil {
			return nil, fmt.Errorf("building devices of node %s: %w", tn.Name, err)
		}
		sets := resourceslices.CounterSets(gpus)
		n, err := placement.NodeFromDevices(tn.Name, tn.CPUMilli, tn.MemoryMiB, devices, sets...)
		if err != nil {
			return nil, err
		}
		c.Nodes = append(c.Nodes, n)
		c.CapacityMilli += n.CapacityMilli()
		if len(devices) > 0 {
			nodeName := tn.Name
			count := int64(1)
			if len(sets) > 0 {
				count = 2 // the cards in MIG mode's counter sets, in a slice of their own
			}
			c.Slices[tn.Name] = []*resourceapi.ResourceSlice{{
				ObjectMeta: metav1.ObjectMeta{Name: tn.Name + "-" + device.DriverName},
				Spec: resourceapi.ResourceSliceSpec{
					Driver:   device.DriverName,
					Pool:     resourceapi.ResourcePool{Name: tn.Name, ResourceSliceCount: count},
					NodeName: &nodeName,
					Devices:  devices,
				},
			}}
			if len(sets) > 0 {
				c.Slices[tn.Name] = append(c.Slices[tn.Name], &resourceapi.ResourceSlice{
					ObjectMeta: metav1.ObjectMeta{Name: tn.Name + "-" + device.DriverName + "-counters"},
					Spec: resourceapi.ResourceSliceSpec{
						Driver:         device.DriverName,
						Pool:           resourceapi.ResourcePool{Name: tn.Name, ResourceSliceCount: count},
						NodeName:       &nodeName,
						SharedCounters: sets,
					},
				})
			}
		}
	}
	if c.CapacityMilli == 0 {
		return nil, fmt.Errorf("the node list has no GPUs; nothing to place shares on")
	}
	return c, nil
}

// cardsOf describes a trace node's cards the way pkg/gpu reports real ones.
func cardsOf(tn trace.Node) ([]gpu.GPU, error) {
	if tn.Model == MIGModel {
		return migCards(tn), nil
	}
	mem, ok := CardMemory[tn.Model]
	if !ok && tn.GPUs > 0 {
		return nil, fmt.Errorf("node %s: card model %q has no memory size; known models: G2, G3, T4, P100, V100M16, V100M32, A10", tn.Name, tn.Model)
	}
	gpus := make([]gpu.GPU, tn.GPUs)
	for i := range gpus {
		gpus[i] = gpu.GPU{
			Index:       i,
			Minor:       i,
			UUID:        fmt.Sprintf("GPU-%s-%d", tn.Name, i),
			ProductName: tn.Model,
			Brand:       fakegpu.DefaultFakeBrand,
			MemoryBytes: mem,
		}
	}
	return gpus, nil
}

// Requests turns trace tasks into placement requests.
func Requests(tasks []trace.Task) []placement.Request {
	out := make([]placement.Request, len(tasks))
	for i, t := range tasks {
		r := placement.Request{Name: t.Name, CPUMilli: t.CPUMilli, MemoryMiB: t.MemoryMiB, Models: t.GPUSpec}
		if t.MIGProfile != "" {
			r.MIGProfile = t.MIGProfile
		} else if t.IsShare() {
			r.ShareMilli = int64(t.GPUMilli)
		} else {
			r.WholeCards = t.NumGPU
		}
		out[i] = r
	}
	return out
}

// NewScheduler builds the named policy against the workload of tasks, and
// a scheduler validating with the real allocator.
func NewScheduler(ctx context.Context, c *Cluster, policy string, workload []trace.Task, seed uint64) (*placement.Scheduler, error) {
	p, err := placement.New(policy, placement.NewWorkload(Requests(workload)))
	if err != nil {
		return nil, err
	}
	v, err := placement.NewDRAValidator(ctx, c.Slices)
	if err != nil {
		return nil, err
	}
	return placement.NewScheduler(c.Nodes, p, v, seed), nil
}
