package sim

import (
	"github.com/tangram-gpu/tangram/pkg/gpu"
	"github.com/tangram-gpu/tangram/pkg/gpu/fakegpu"
	"github.com/tangram-gpu/tangram/pkg/trace"
)

// MIGModel is the card model of the MIG variant's nodes: an H100 80GB in
// MIG mode, its MIG profiles those of pkg/gpu/fakegpu's h100-80gb (NVIDIA's
// MIG user guide), published as the kubelet plugin publishes them.
const MIGModel = "H100-MIG"

// migType is the fake MIG card type of MIGModel.
const migType = "h100-80gb"

// migProfiles are the profiles a MIG variant's task asks for, by compute
// slices (sevenths of a card): the smallest one of at least the task's GPU.
var migProfiles = []struct {
	slices  int
	profile string
}{{1, "1g.10gb"}, {2, "2g.20gb"}, {3, "3g.40gb"}, {4, "4g.40gb"}, {7, "7g.80gb"}}

// MIGVariant derives the MIG variant of a trace: every node keeps its name,
// CPU, memory and number of cards, its cards become H100s in MIG mode
// (MIGModel); every task asking for one card or less asks instead for the
// smallest MIG profile with at least its GPU (a share of g milli-GPU: the
// profile of ceil(7g/1000) compute slices, 1g to 4g, else 7g; a whole card:
// 7g.80gb), with its CPU and memory, any card model; a task asking for
// several cards is left out (a pod of several partitions is not modelled);
// a task without GPU is kept. The task's GPUMilli becomes its profile's
// share of a card (n sevenths), so arrival counts what it takes.
func MIGVariant(nodes []trace.Node, tasks []trace.Task) ([]trace.Node, []trace.Task) {
	outNodes := make([]trace.Node, len(nodes))
	for i, n := range nodes {
		n.Model = MIGModel
		outNodes[i] = n
	}
	var outTasks []trace.Task
	for _, t := range tasks {
		switch {
		case t.RequestedMilliGPU() == 0:
		case t.NumGPU > 1:
			continue
		default:
			need := (int(t.RequestedMilliGPU())*7 + 999) / 1000
			for _, p := range migProfiles {
				if p.slices >= need {
					t.MIGProfile = p.profile
					t.NumGPU, t.GPUMilli = 1, min(p.slices*1000/7, 1000)
					break
				}
			}
			t.GPUSpec = nil
		}
		outTasks = append(outTasks, t)
	}
	return outNodes, outTasks
}

// migCards are a MIG variant node's cards.
func migCards(tn trace.Node) []gpu.GPU {
	var profiles []gpu.MIGProfile
	for _, p := range fakegpu.MIGTable(migType) {
		q := gpu.MIGProfile{ID: p.ID, Name: p.Name, ComputeSlices: p.ComputeSlices, Instances: p.Instances,
			Multiprocessors: p.Multiprocessors, CopyEngines: p.CopyEngines, MemoryBytes: p.MemoryMiB << 20}
		for _, s := range p.Starts {
			q.Placements = append(q.Placements, gpu.MIGPlacement{Start: s, Size: p.MemorySlices})
		}
		profiles = append(profiles, q)
	}
	gpus := make([]gpu.GPU, tn.GPUs)
	for i := range gpus {
		gpus[i] = gpu.GPU{Index: i, Minor: i, UUID: "GPU-" + tn.Name + "-" + itoa(i), ProductName: MIGModel,
			Brand: fakegpu.DefaultFakeBrand, MemoryBytes: 80 << 30,
			MIG: &gpu.MIG{Enabled: true, PendingEnabled: true, Profiles: profiles}}
	}
	return gpus
}

func itoa(i int) string {
	if i == 0 {
		return "0"
	}
	var b []byte
	for ; i > 0; i /= 10 {
		b = append([]byte{byte('0' + i%10)}, b...)
	}
	return string(b)
}
