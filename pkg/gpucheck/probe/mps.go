package probe

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/tangram-gpu/tangram/pkg/gpu"
	"github.com/tangram-gpu/tangram/pkg/gpucheck"
	"github.com/tangram-gpu/tangram/pkg/plugin/cdi"
	"github.com/tangram-gpu/tangram/pkg/plugin/driverroot"
	"github.com/tangram-gpu/tangram/pkg/plugin/mps"
	"github.com/tangram-gpu/tangram/pkg/plugin/prepared"
)

// The calls into pkg/plugin/mps and pkg/plugin/cdi live in this file only:
// newManager builds what a prepare uses, clientEnv derives a share's
// environment the way its CDI spec does.

// readOnlyModes stands in for the NVML compute-mode setter of a prepare:
// gpu-check never changes a card's settings, it records what a prepare
// would have set. MPS also serves clients in DEFAULT compute mode.
type readOnlyModes struct{ mps.RecordingComputeModeSetter }

// newManager is the MPS accounting a prepare drives, on a private layout:
// classic (v3 false) or MPS v3 with a namespace per claim.
// The daemon runs with the driver root's libraries, as a prepare runs it.
func newManager(layout mps.Layout, root driverroot.Root, binary, card string, v3 bool) (*mps.Manager, *mps.MPSDaemon) {
	protocol := 2
	if v3 {
		protocol = 3
	}
	daemon := mps.NewMPSDaemon(mps.MPSDaemonConfig{
		Layout:         layout,
		Binary:         binary,
		VisibleDevices: []string{card},
		MultiUser:      v3,
		Protocol:       protocol,
		ReadyTimeout:   20 * time.Second,
		StopTimeout:    15 * time.Second,
		Env:            root.ToolEnv(),
	})
	opts := []mps.ManagerOption{mps.WithTiming(mps.Timing{ReadyWait: 30 * time.Second, Linger: time.Millisecond, RetryMin: time.Second, RetryMax: 5 * time.Second})}
	if v3 {
		opts = append(opts, mps.WithV3(mps.NewV3Namespaces(daemon.Control, []string{card}), mps.ClaimDirs{Layout: layout}))
	}
	return mps.NewManager(layout, daemon, &readOnlyModes{}, []string{card}, opts...), daemon
}

// shareOf is the prepared record of a claim holding one share of card.
func shareOf(claimUID string, g gpu.GPU, memBytes int64, pipeDir string) prepared.Claim {
	return prepared.Claim{UID: claimUID, Namespace: "gpu-check", Name: claimUID, Devices: []prepared.Device{{
		Request: "gpu", Device: fmt.Sprintf("gpu-%d", g.Index), GPUUUID: g.UUID, ShareID: "gpu-check",
		Share: true, MemoryBytes: memBytes, MPSPipeDir: pipeDir,
	}}}
}

// clientEnv is the environment the share's CDI spec gives its container
// (pkg/plugin/cdi), plus CUDA_VISIBLE_DEVICES for the card the container
// runtime would have made the only one visible. hook, when set, is the
// memory-limit hook the spec would carry; it is returned, not run.
func clientEnv(claim prepared.Claim, g gpu.GPU, pipeDir string, hook *cdi.MemoryLimitHook) ([]string, []string, error) {
	edits, err := cdi.ComputeClaimEdits(claim, cdi.Inputs{
		Cards:           map[string]gpu.GPU{fmt.Sprintf("gpu-%d", g.Index): g},
		MPSPipeDir:      pipeDir,
		MemoryLimitHook: hook,
	})
	if err != nil {
		return nil, nil, err
	}
	var env, hookArgv []string
	for _, d := range edits.Devices {
		env = append(env, d.Edits.Env...)
		for _, h := range d.Edits.Hooks {
			hookArgv = append([]string{h.Path}, h.Args[1:]...)
		}
	}
	return append(env, "CUDA_VISIBLE_DEVICES="+g.UUID), hookArgv, nil
}

func (s *state) cardByUUID(uuid string) (gpu.GPU, bool) {
	for _, g := range s.cards {
		if g.UUID == strings.TrimSpace(uuid) {
			return g, true
		}
	}
	return gpu.GPU{}, false
}

// mpsProcesses lists the pids of MPS control daemons and servers running
// now (their comm is the first 15 characters of the name).
func (s *state) mpsProcesses() map[int]string {
	out := map[int]string{}
	entries, _ := os.ReadDir(s.cfg.ProcRoot)
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		comm, err := os.ReadFile(filepath.Join(s.cfg.ProcRoot, e.Name(), "comm"))
		if err != nil {
			continue
		}
		if name := strings.TrimSpace(string(comm)); strings.HasPrefix(name, "nvidia-cuda-mps") {
			out[pid] = name
		}
	}
	return out
}

// environMentions reports whether process pid's environment contains s.
func (s *state) environMentions(pid int, text string) bool {
	env, err := os.ReadFile(filepath.Join(s.cfg.ProcRoot, strconv.Itoa(pid), "environ"))
	return err == nil && strings.Contains(string(env), text)
}

// runClient runs the bundle's cuda-alloc with env, asking for tryMiB;
// cgroupFD, when not negative, starts it in that cgroup.
func (s *state) runClient(ctx context.Context, env []string, tryMiB int64, cgroupFD int) string {
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, s.cfg.CUDAAlloc, strconv.FormatInt(tryMiB, 10))
	cmd.Env = append(os.Environ(), env...)
	if cgroupFD >= 0 {
		cmd.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: cgroupFD}
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Sprintf("%s\n(cuda-alloc: %v)", out, err)
	}
	return string(out)
}

// mpsSession is one run of the prepare sequence on a private layout.
type mpsSession struct {
	s       *state
	layout  mps.Layout
	mgr     *mps.Manager
	before  map[int]string
	claims  []string
	card    gpu.GPU
	cleanup []string
}

func (s *state) startSession(ctx context.Context, progress gpucheck.Progress, name string, d gpucheck.Decision, v3 bool) (*mpsSession, error) {
	g, ok := s.cardByUUID(d.Card.UUID)
	if !ok {
		return nil, fmt.Errorf("card %s is not in the NVML inventory", d.Card.UUID)
	}
	dir, err := os.MkdirTemp(s.cfg.WorkDir, name+"-")
	if err != nil {
		return nil, fmt.Errorf("creating the private MPS directory: %w", err)
	}
	layout := mps.Layout{Root: dir}
	ms := &mpsSession{s: s, layout: layout, before: s.mpsProcesses(), card: g}
	progress("MPS directories under %s (never the default /tmp/nvidia-mps); card %s (%s)", dir, g.UUID, d.Card.ComputeMode)
	ms.mgr, _ = newManager(layout, s.root, s.facts.MPSControl, g.UUID, v3)
	if err := ms.mgr.Reconcile(ctx); err != nil {
		return ms, fmt.Errorf("reconciling the MPS manager: %w", err)
	}
	return ms, nil
}

// acquire prepares a share of memMiB for claimUID and returns its
// client environment (and the memory-limit hook's argv, when asked).
func (ms *mpsSession) acquire(ctx context.Context, claimUID string, memMiB int64, hook *cdi.MemoryLimitHook) ([]string, []string, error) {
	share := mps.Share{Card: ms.card.UUID, MemoryBytes: memMiB << 20}
	if err := ms.mgr.Acquire(ctx, claimUID, []mps.Share{share}); err != nil {
		return nil, nil, fmt.Errorf("preparing the share of claim %s: %w", claimUID, err)
	}
	ms.claims = append(ms.claims, claimUID)
	cc := ms.mgr.ClientConfig(claimUID)
	return clientEnv(shareOf(claimUID, ms.card, memMiB<<20, cc.PipeDir), ms.card, cc.PipeDir, hook)
}

// teardown releases every share, lets the manager stop the daemon, and
// reports whether any MPS process this session started is left.
func (ms *mpsSession) teardown(ctx context.Context, progress gpucheck.Progress) error {
	ctx = context.WithoutCancel(ctx) // tear down even past the deadline
	var errs []error
	for _, c := range slices.Backward(ms.claims) {
		if err := ms.mgr.Release(ctx, c); err != nil {
			errs = append(errs, fmt.Errorf("releasing claim %s: %w", c, err))
		}
	}
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	if err := ms.mgr.WaitIdle(wctx); err != nil {
		errs = append(errs, err)
	}
	cancel()
	ms.mgr.Close()
	progress("waiting for the MPS processes to leave")
	var left []string
	for deadline := time.Now().Add(20 * time.Second); ; {
		left = left[:0]
		for pid, name := range ms.s.mpsProcesses() {
			if _, old := ms.before[pid]; !old {
				left = append(left, fmt.Sprintf("%s (pid %d)", name, pid))
			}
		}
		if len(left) == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(250 * time.Millisecond)
	}
	if len(left) > 0 {
		slices.Sort(left)
		errs = append(errs, fmt.Errorf("still running after the last share was released: %s", strings.Join(left, ", ")))
		// Do not leave behind what this check started: the processes whose
		// environment names its private MPS directory, and no other.
		for pid := range ms.s.mpsProcesses() {
			if _, old := ms.before[pid]; !old && ms.s.environMentions(pid, ms.layout.Root) {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
	}
	return errors.Join(errs...)
}

func (s *state) checkClassicMPS(ctx context.Context, progress gpucheck.Progress) gpucheck.Outcome {
	if out, ok := s.needCards(); !ok {
		return out
	}
	d := gpucheck.PlanClassicMPS(s.facts)
	if !d.Run {
		return gpucheck.Skip("%s", d.Reason)
	}
	if _, err := os.Stat("/tmp/nvidia-mps"); err == nil {
		progress("note: /tmp/nvidia-mps exists already (another MPS daemon's default directory); this check does not use it")
	}
	ms, err := s.startSession(ctx, progress, "mps-classic", d, false)
	if err != nil {
		if ms != nil {
			return gpucheck.Fail("%v; teardown: %v", err, ms.teardown(ctx, progress))
		}
		return gpucheck.Fail("%v", err)
	}
	limit := s.cfg.ShareMiB
	progress("preparing a %d MiB share (daemon start through the plugin's MPS manager)", limit)
	env, _, err := ms.acquire(ctx, "gpu-check-classic", limit, nil)
	var out gpucheck.Outcome
	if err != nil {
		out = gpucheck.Fail("%v", err)
	} else {
		progress("client: cuda-alloc %d MiB with %s", limit+1024, strings.Join(mpsVars(env), " "))
		out = gpucheck.JudgeLimitedClient(limit, s.runClient(ctx, env, limit+1024, -1))
	}
	progress("teardown: release the share, quit the daemon")
	if err := ms.teardown(ctx, progress); err != nil {
		return gpucheck.Fail("%s; teardown failed: %v", out.Detail, err)
	}
	if out.Result == gpucheck.Passed {
		out.Detail += "; teardown left no MPS process"
	}
	return out
}

func mpsVars(env []string) []string {
	var out []string
	for _, kv := range env {
		if strings.HasPrefix(kv, "CUDA_") {
			out = append(out, kv)
		}
	}
	return out
}

func (s *state) checkV3(ctx context.Context, progress gpucheck.Progress) gpucheck.Outcome {
	if out, ok := s.needCards(); !ok {
		return out
	}
	d := gpucheck.PlanV3(s.facts)
	if !d.Run {
		return gpucheck.Skip("%s", d.Reason)
	}
	ms, err := s.startSession(ctx, progress, "mps-v3", d, true)
	if err != nil {
		if ms != nil {
			return gpucheck.Fail("%v; teardown: %v", err, ms.teardown(ctx, progress))
		}
		return gpucheck.Fail("%v", err)
	}
	// Two claims, two namespaces, two limits: each client is held to its own.
	limits := map[string]int64{"gpu-check-v3-a": s.cfg.ShareMiB, "gpu-check-v3-b": s.cfg.ShareMiB / 2}
	var results []string
	failed := false
	for _, claim := range []string{"gpu-check-v3-a", "gpu-check-v3-b"} {
		limit := limits[claim]
		progress("preparing claim %s: a namespace with a %d MiB limit", claim, limit)
		env, _, err := ms.acquire(ctx, claim, limit, nil)
		if err != nil {
			results, failed = append(results, err.Error()), true
			continue
		}
		progress("client of %s: cuda-alloc %d MiB with %s", claim, limit+1024, strings.Join(mpsVars(env), " "))
		o := gpucheck.JudgeLimitedClient(limit, s.runClient(ctx, env, limit+1024, -1))
		results = append(results, claim+": "+o.Detail)
		failed = failed || o.Result != gpucheck.Passed
	}
	progress("teardown: release both claims (namespaces deleted), quit the daemon")
	if err := ms.teardown(ctx, progress); err != nil {
		results, failed = append(results, "teardown: "+err.Error()), true
	} else {
		results = append(results, "teardown left no MPS process")
	}
	if failed {
		return gpucheck.Fail("%s", strings.Join(results, "; "))
	}
	return gpucheck.Pass("%s", strings.Join(results, "; "))
}
