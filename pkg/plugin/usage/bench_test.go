package usage

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/tangram-gpu/tangram/pkg/gpu"
	"github.com/tangram-gpu/tangram/pkg/plugin/prepared"
)

// BenchmarkWatcherRound is one round of the watcher on a busy node: 8
// cards, 50 share claims, two processes each (100 /proc/<pid>/cgroup files
// read from $TMPDIR), plus 4 processes no claim accounts for. NVML and the
// API server are not in it: their cost is theirs, and a round reads each
// once.
func BenchmarkWatcherRound(b *testing.B) {
	const cards, shares = 8, 50
	proc := b.TempDir()
	records := map[string]prepared.Claim{}
	claimsOf := map[string][]string{}
	var procs []gpu.Process
	addProc := func(pid int, card, pod string) {
		dir := filepath.Join(proc, fmt.Sprint(pid))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			b.Fatal(err)
		}
		cgroup := "0::/system.slice/something.service\n"
		if pod != "" {
			cgroup = "0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + pod + ".slice/cri-containerd-0123.scope\n"
		}
		if err := os.WriteFile(filepath.Join(dir, "cgroup"), []byte(cgroup), 0o644); err != nil {
			b.Fatal(err)
		}
		procs = append(procs, gpu.Process{Card: card, GPUInstance: gpu.NoGPUInstance, PID: pid, UsedBytes: gib})
	}
	for i := range shares {
		uid := fmt.Sprintf("00000000-0000-0000-0000-%012d", i)
		card := fmt.Sprintf("GPU-%d", i%cards)
		records[uid] = prepared.Claim{UID: uid, Namespace: "team", Name: fmt.Sprintf("claim-%d", i), State: prepared.PrepareCompleted,
			Devices: []prepared.Device{{Device: fmt.Sprintf("gpu-%d", i%cards), GPUUUID: card, ShareID: uid, Share: true, MemoryBytes: 8 * gib, MPSPipeDir: "/run/tangram/mps/pipe"}}}
		pod := fmt.Sprintf("11111111_2222_3333_4444_%012d", i)
		podUID := fmt.Sprintf("11111111-2222-3333-4444-%012d", i)
		claimsOf[podUID] = []string{"team/" + records[uid].Name}
		addProc(1000+2*i, card, pod)
		addProc(1001+2*i, card, pod)
	}
	for i := range 4 {
		addProc(5000+i, fmt.Sprintf("GPU-%d", i), "")
	}
	w := Watcher{
		Processes: listedProcesses{procs: procs},
		PodOf:     ProcPodOf(proc),
		PodClaims: func(context.Context) (map[string][]string, error) { return claimsOf, nil },
		Records:   func() map[string]prepared.Claim { return records },
	}
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		r, err := w.Once(ctx)
		if err != nil {
			b.Fatal(err)
		}
		if len(r.Uses) != shares || len(r.Strays) != 4 {
			b.Fatalf("%d uses, %d strays; want %d and 4", len(r.Uses), len(r.Strays), shares)
		}
	}
}
