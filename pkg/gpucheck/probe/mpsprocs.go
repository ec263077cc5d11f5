package probe

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/tangram-gpu/tangram/pkg/gpucheck"
)

// procClients are the MPS processes row's two clients: each its own claim
// (a share of ShareMiB) and a known allocation well below it (a client
// under a 2048 MiB pinned limit got 1280 MiB on r580), so that what NVML
// lists can be told apart and set beside what each holds.
var procClients = []struct {
	name, claim string
	mib         int64
}{
	{"a", "gpu-check-procs-a", 256},
	{"b", "gpu-check-procs-b", 512},
}

// checkMPSProcesses starts a private classic daemon through the plugin's
// MPS manager, as the classic check does, prepares two shares and runs a
// client in each that allocates a known amount and holds it; while both
// hold, it asks NVML the card's compute and MPS process lists, then ends
// the clients and tears down. It reads and never changes a GPU setting.
func (s *state) checkMPSProcesses(ctx context.Context, progress gpucheck.Progress) gpucheck.Outcome {
	if out, ok := s.needCards(); !ok {
		return out
	}
	d := gpucheck.PlanClassicMPS(s.facts)
	if !d.Run {
		return gpucheck.Skip("%s", d.Reason)
	}
	privateShm := gpucheck.PlanContainerView(gpucheck.ClientTools{Unshare: lookPath("unshare"), Root: os.Geteuid() == 0}).Run
	ms, err := s.startSession(ctx, progress, "mps-procs", d, false, privateShm)
	if err != nil {
		return gpucheck.Fail("%v", err)
	}
	holdSeconds := s.holdSeconds
	if holdSeconds == 0 {
		holdSeconds = 45
	}
	hctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	reading := gpucheck.MPSProcessReading{Card: ms.card.UUID}
	var parts []gpucheck.Part
	var holders []*holder
	for _, c := range procClients {
		progress("preparing claim %s (a %d MiB share); its client allocates %d MiB and holds it", c.claim, s.cfg.ShareMiB, c.mib)
		env, _, err := ms.acquire(hctx, c.claim, s.cfg.ShareMiB, nil)
		if err != nil {
			parts = append(parts, gpucheck.Part{Name: "share " + c.name, Outcome: gpucheck.Fail("%v", err)})
			break
		}
		h, err := startHolder(hctx, env, []string{s.cfg.CUDAAlloc, strconv.FormatInt(c.mib, 10)}, holdSeconds)
		if err != nil {
			parts = append(parts, gpucheck.Part{Name: "client " + c.name, Outcome: gpucheck.Fail("starting the client: %v", err)})
			break
		}
		holders = append(holders, h)
		select {
		case <-h.served:
		case <-hctx.Done():
		}
	}
	if len(holders) == len(procClients) {
		servers, controls := s.mpsRoles(ms.before)
		reading.ServerPIDs, reading.ControlPIDs = servers, controls
		progress("asking NVML the process lists of %s while both clients hold their memory (MPS server pids %v)", ms.card.UUID, servers)
		compute, mpsList, err := nvmlProcesses(s.src, ms.card.UUID)
		if err != nil {
			parts = append(parts, gpucheck.Part{Name: "NVML", Outcome: gpucheck.Fail("%v", err)})
		}
		for i, h := range holders {
			running := h.running()
			log := h.log()
			mib := int64(0)
			if r, err := gpucheck.ParseAllocLog(log); err == nil {
				mib = r.AllocatedMiB
			}
			reading.Clients = append(reading.Clients, gpucheck.MPSClient{Name: procClients[i].name, PID: h.cmd.Process.Pid, AllocatedMiB: mib, Running: running, Log: log})
		}
		reading.Compute, reading.MPS = s.markGone(compute), s.markGone(mpsList)
		if b, err := json.MarshalIndent(reading, "", "  "); err == nil {
			s.writeArtefact("nvml-mps-processes.json", b)
		}
		if err == nil {
			parts = append(parts, gpucheck.Part{Name: "NVML", Outcome: gpucheck.MPSProcessesOutcome(reading)})
		}
	}
	for _, h := range holders {
		h.stop()
	}
	progress("teardown: end the clients, release both shares, quit the daemon")
	if err := ms.teardown(ctx, progress); err != nil {
		parts = append(parts, gpucheck.Part{Name: "teardown", Outcome: gpucheck.Fail("%v", err)})
	} else {
		parts = append(parts, gpucheck.Part{Name: "teardown", Outcome: gpucheck.Pass("left no MPS process")})
	}
	return gpucheck.CombineParts(parts...)
}

// mpsRoles sorts the MPS processes started since before into servers
// and control daemons by their argv[0] (their comm, cut at 15
// characters, is the same for both).
func (s *state) mpsRoles(before map[int]string) (servers, controls []int) {
	for pid := range s.mpsProcesses() {
		if _, old := before[pid]; old {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join(s.cfg.ProcRoot, strconv.Itoa(pid), "cmdline"))
		if err != nil {
			continue
		}
		argv0, _, _ := strings.Cut(string(cmdline), "\x00")
		switch filepath.Base(argv0) {
		case "nvidia-cuda-mps-server":
			servers = append(servers, pid)
		case "nvidia-cuda-mps-control":
			controls = append(controls, pid)
		}
	}
	sort.Ints(servers)
	sort.Ints(controls)
	return servers, controls
}

// markGone marks the listed PIDs no process runs under any more.
func (s *state) markGone(l gpucheck.ProcessList) gpucheck.ProcessList {
	for i, p := range l.Processes {
		if _, err := os.Stat(filepath.Join(s.cfg.ProcRoot, strconv.FormatUint(uint64(p.PID), 10))); err != nil {
			l.Processes[i].Gone = true
		}
	}
	return l
}

// holder is a client that holds its context and memory after its result
// line (CUDA_ALLOC_HOLD_SECONDS), in a process group of its own.
type holder struct {
	cmd    *exec.Cmd
	mu     sync.Mutex
	out    strings.Builder
	served chan struct{} // closed at the result line, or at exit
	exited chan struct{}
}

func startHolder(ctx context.Context, env, argv []string, holdSeconds int) (*holder, error) {
	h := &holder{served: make(chan struct{}), exited: make(chan struct{})}
	h.cmd = exec.CommandContext(ctx, argv[0], argv[1:]...)
	h.cmd.Env = append(append(os.Environ(), env...), fmt.Sprintf("CUDA_ALLOC_HOLD_SECONDS=%d", holdSeconds))
	h.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	h.cmd.Cancel = func() error { return syscall.Kill(-h.cmd.Process.Pid, syscall.SIGKILL) }
	stdout, err := h.cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	h.cmd.Stderr = &lockedWriter{h: h}
	if err := h.cmd.Start(); err != nil {
		return nil, err
	}
	copied := make(chan struct{})
	go func() {
		defer close(copied)
		sc := bufio.NewScanner(stdout)
		once := false
		for sc.Scan() {
			h.mu.Lock()
			h.out.WriteString(sc.Text() + "\n")
			h.mu.Unlock()
			if !once && strings.HasPrefix(sc.Text(), "cuda-alloc: devices=") {
				once = true
				close(h.served)
			}
		}
		if !once {
			close(h.served)
		}
	}()
	go func() {
		<-copied
		_ = h.cmd.Wait()
		close(h.exited)
	}()
	return h, nil
}

type lockedWriter struct{ h *holder }

func (w *lockedWriter) Write(p []byte) (int, error) {
	w.h.mu.Lock()
	defer w.h.mu.Unlock()
	return w.h.out.Write(p)
}

func (h *holder) log() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.out.String()
}

func (h *holder) running() bool {
	select {
	case <-h.exited:
		return false
	default:
		return true
	}
}

// stop ends the client's group and waits for it.
func (h *holder) stop() {
	_ = syscall.Kill(-h.cmd.Process.Pid, syscall.SIGTERM)
	select {
	case <-h.exited:
	case <-time.After(10 * time.Second):
		_ = syscall.Kill(-h.cmd.Process.Pid, syscall.SIGKILL)
		<-h.exited
	}
}
