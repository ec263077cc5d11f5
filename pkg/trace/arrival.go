package trace

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
)

// Arrival builds the published experiment's arrival sequence: the tasks
// sorted by name, shuffled with seed, then tasks drawn at random from the
// list appended until the GPU requested in total reaches arrival × capacity
// (capacityMilli in milli-GPU). A list that already requests more is cut at
// that point. Appended copies get a "-dup<N>" name suffix so names stay unique.
func Arrival(tasks []Task, capacityMilli int64, seed uint64, arrival float64) ([]Task, error) {
	if len(tasks) == 0 {
		return nil, fmt.Errorf("building arrival: the task list is empty")
	}
	if arrival <= 0 {
		return nil, fmt.Errorf("building arrival: arrival %.2f must be positive (1.3 = 130%% of GPU capacity)", arrival)
	}
	var gpuTasks int
	for _, t := range tasks {
		if t.RequestedMilliGPU() > 0 {
			gpuTasks++
		}
	}
	if gpuTasks == 0 {
		return nil, fmt.Errorf("building arrival: no task requests a GPU, so GPU arrival can never reach %.0f%%", arrival*100)
	}
	sorted := slices.Clone(tasks)
	slices.SortStableFunc(sorted, func(a, b Task) int { return strings.Compare(a.Name, b.Name) })
	rng := rand.New(rand.NewPCG(seed, seed^0x5ca1ab1e))
	rng.Shuffle(len(sorted), func(i, j int) { sorted[i], sorted[j] = sorted[j], sorted[i] })

	target := int64(float64(capacityMilli) * arrival)
	var out []Task
	var requested int64
	for _, t := range sorted {
		if requested >= target {
			return out, nil
		}
		out = append(out, t)
		requested += t.RequestedMilliGPU()
	}
	for dup := 1; requested < target; dup++ {
		t := sorted[rng.IntN(len(sorted))]
		t.Name = fmt.Sprintf("%s-dup%d", t.Name, dup)
		out = append(out, t)
		requested += t.RequestedMilliGPU()
	}
	return out, nil
}
