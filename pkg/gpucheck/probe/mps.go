package probe

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io/fs"
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
	"github.com/tangram-gpu/tangram/pkg/plugin/mps/daemon"
	"github.com/tangram-gpu/tangram/pkg/plugin/mps/mpsv3"
	"github.com/tangram-gpu/tangram/pkg/plugin/prepared"
)

// The calls into pkg/plugin/mps and pkg/plugin/cdi live in this file only:
// newManager builds what a prepare uses, clientEnv derives a share's
// environment the way its CDI spec does.

// readOnlyModes stands in for the NVML compute-mode setter of a prepare:
// gpu-check never changes a card's settings, it records what a prepare
// would have set. MPS also serves clients in DEFAULT compute mode.
type readOnlyModes struct {
	daemon.RecordingComputeModeSetter
}

// newManager is the MPS accounting a prepare drives, on a private layout:
// classic (v3 false) or MPS v3 with a namespace per claim. The daemon runs
// with the driver root's libraries and multi-user (-M classic, -m v3), as
// the plugin runs it by default; wrapper, when set, starts it in a mount
// namespace of its own (daemon.PrivateShmWrapper), as the plugin does.
func newManager(layout daemon.Layout, root driverroot.Root, binary, card string, v3 bool, wrapper []string) (*mps.Manager, *daemon.ProcessDaemon) {
	protocol := 2
	if v3 {
		protocol = 3
	}
	d := daemon.NewProcessDaemon(daemon.ProcessDaemonConfig{
		Layout:         layout,
		Binary:         binary,
		VisibleDevices: []string{card},
		MultiUser:      true,
		Wrapper:        wrapper,
		Protocol:       protocol,
		ReadyTimeout:   20 * time.Second,
		StopTimeout:    15 * time.Second,
		Env:            root.ToolEnv(),
	})
	opts := []mps.ManagerOption{mps.WithTiming(mps.Timing{ReadyWait: 30 * time.Second, Linger: time.Millisecond, RetryMin: time.Second, RetryMax: 5 * time.Second})}
	if v3 {
		opts = append(opts, mps.WithV3(mpsv3.NewNamespaces(d.Control, []string{card}), daemon.ClaimDirs{Layout: layout}))
	}
	return mps.NewManager(layout, d, &readOnlyModes{}, []string{card}, opts...), d
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
	layout  daemon.Layout
	mgr     *mps.Manager
	before  map[int]string
	claims  []string
	card    gpu.GPU
	cleanup []string
}

// startSession starts a private MPS session on the decision's card; with
// privateShm its daemon gets a /dev/shm of its own, as the plugin starts
// it. A session that fails to start is torn down before the error returns.
func (s *state) startSession(ctx context.Context, progress gpucheck.Progress, name string, d gpucheck.Decision, v3, privateShm bool) (*mpsSession, error) {
	g, ok := s.cardByUUID(d.Card.UUID)
	if !ok {
		return nil, fmt.Errorf("card %s is not in the NVML inventory", d.Card.UUID)
	}
	dir, err := os.MkdirTemp(s.cfg.WorkDir, name+"-")
	if err != nil {
		return nil, fmt.Errorf("creating the private MPS directory: %w", err)
	}
	layout := daemon.Layout{Root: dir}
	server := ""
	if v3 {
		server = mpsv3.DefaultServer
	}
	if err := mps.CheckSocketPaths(layout, server); err != nil {
		_ = os.Remove(dir)
		return nil, fmt.Errorf("the check's own MPS root under its work directory %s: %w", s.cfg.WorkDir, err)
	}
	ms := &mpsSession{s: s, layout: layout, before: s.mpsProcesses(), card: g}
	progress("MPS directories under %s (never the default /tmp/nvidia-mps); card %s (%s)", dir, g.UUID, d.Card.ComputeMode)
	var wrap []string
	if privateShm {
		wrap = daemon.PrivateShmWrapper(layout.ShmDir())
	}
	ms.mgr, _ = newManager(layout, s.root, s.facts.MPSControl, g.UUID, v3, wrap)
	if err := ms.mgr.Reconcile(ctx); err != nil {
		return nil, fmt.Errorf("reconciling the MPS manager: %w; teardown: %v", err, ms.teardown(ctx, progress))
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

// checkClassicMPS prepares a classic share through the plugin's MPS
// manager (daemon multi-user, in a mount namespace of its own) and runs
// its client as the share's container would: through a read-only bind of
// the pipe directory and with a /dev/shm of its own (needs util-linux's
// unshare; otherwise the client runs plainly and the report says why).
// Then a root client holds the server while a client of another UID
// (setpriv) must be served at once.
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
	tools := gpucheck.ClientTools{Unshare: lookPath("unshare"), Setpriv: lookPath("setpriv"), Root: os.Geteuid() == 0}
	view := gpucheck.PlanContainerView(tools)
	ms, err := s.startSession(ctx, progress, "mps-classic", d, false, view.Run)
	if err != nil {
		return gpucheck.Fail("%v", err)
	}
	limit := s.cfg.ShareMiB
	progress("preparing a %d MiB share (daemon start, multi-user, through the plugin's MPS manager)", limit)
	const claim = "gpu-check-classic"
	env, _, err := ms.acquire(ctx, claim, limit, nil)
	var parts []gpucheck.Part
	if err != nil {
		parts = append(parts, gpucheck.Part{Name: "share", Outcome: gpucheck.Fail("%v", err)})
	} else {
		pipe := ms.mgr.ClientConfig(claim).PipeDir
		client := []string{s.cfg.CUDAAlloc, strconv.FormatInt(limit+1024, 10)}
		if view.Run {
			progress("client in a share's view (read-only %s, a tmpfs of its own at /dev/shm): cuda-alloc %d MiB with %s", pipe, limit+1024, strings.Join(mpsVars(env), " "))
			log := s.runArgv(ctx, env, gpucheck.ContainerClientArgv(tools.Unshare, pipe, nil, client))
			parts = append(parts, gpucheck.Part{Name: "client", Outcome: gpucheck.JudgeContainerClient(limit, log)})
		} else {
			progress("client (plain: %s): cuda-alloc %d MiB with %s", view.Reason, limit+1024, strings.Join(mpsVars(env), " "))
			parts = append(parts, gpucheck.Part{Name: "client", Outcome: gpucheck.JudgeLimitedClient(limit, s.runClient(ctx, env, limit+1024, -1))},
				gpucheck.Part{Name: "container view", Outcome: gpucheck.Skip("%s", view.Reason)})
		}
		parts = append(parts, gpucheck.Part{Name: "two users", Outcome: s.twoUsers(ctx, progress, ms, tools, view, pipe, env, limit)})
	}
	progress("teardown: release the share, quit the daemon")
	if err := ms.teardown(ctx, progress); err != nil {
		parts = append(parts, gpucheck.Part{Name: "teardown", Outcome: gpucheck.Fail("%v", err)})
	} else {
		parts = append(parts, gpucheck.Part{Name: "teardown", Outcome: gpucheck.Pass("left no MPS process")})
	}
	return gpucheck.CombineParts(parts...)
}

// twoUsers runs a root client that holds its context and, while it does,
// a client of gpucheck.SecondUID, both in a share's view when view.Run.
func (s *state) twoUsers(ctx context.Context, progress gpucheck.Progress, ms *mpsSession, tools gpucheck.ClientTools, view gpucheck.Decision, pipe string, env []string, limit int64) gpucheck.Outcome {
	// The other user runs a copy of the client in the session's directory,
	// which it must be able to traverse, as the pipe directory below it.
	if err := os.Chmod(ms.layout.Root, 0o755); err != nil {
		return gpucheck.Fail("opening the session directory to other users: %v", err)
	}
	plan := gpucheck.PlanSecondUser(tools, gpucheck.UnreachableAncestor(pipe, func(p string) (fs.FileMode, error) {
		fi, err := os.Stat(p)
		if err != nil {
			return 0, err
		}
		return fi.Mode(), nil
	}))
	if !plan.Run {
		return gpucheck.Skip("%s", plan.Reason)
	}
	alloc := filepath.Join(ms.layout.Root, "cuda-alloc")
	if err := copyExecutable(s.cfg.CUDAAlloc, alloc); err != nil {
		return gpucheck.Fail("copying cuda-alloc for the other user: %v", err)
	}
	wrap := func(runAs []string, tryMiB int64) []string {
		client := []string{alloc, strconv.FormatInt(tryMiB, 10)}
		if view.Run {
			return gpucheck.ContainerClientArgv(tools.Unshare, pipe, runAs, client)
		}
		return append(append([]string(nil), runAs...), client...)
	}
	hctx, cancel := context.WithTimeout(ctx, 90*time.Second)
	defer cancel()
	holdSeconds := s.holdSeconds
	if holdSeconds == 0 {
		holdSeconds = 30
	}
	argv := wrap(nil, limit+1024)
	holder := exec.CommandContext(hctx, argv[0], argv[1:]...)
	holder.Env = append(append(os.Environ(), env...), fmt.Sprintf("CUDA_ALLOC_HOLD_SECONDS=%d", holdSeconds))
	// A group of its own, ended as a whole: the client runs under sh in
	// the namespace, and a client left holding its context would keep the
	// MPS server from quitting.
	holder.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	holder.Cancel = func() error { return syscall.Kill(-holder.Process.Pid, syscall.SIGKILL) }
	var firstLog strings.Builder
	stdout, err := holder.StdoutPipe()
	if err != nil {
		return gpucheck.Fail("starting the root client: %v", err)
	}
	holder.Stderr = &firstLog
	progress("root client: cuda-alloc %d MiB, holding its context for %d s", limit+1024, holdSeconds)
	if err := holder.Start(); err != nil {
		return gpucheck.Fail("starting the root client: %v", err)
	}
	// The holder is served once it prints its result line.
	served := make(chan struct{})
	var lines strings.Builder
	copied := make(chan struct{})
	go func() {
		defer close(copied)
		sc := bufio.NewScanner(stdout)
		once := false
		for sc.Scan() {
			lines.WriteString(sc.Text() + "\n")
			if !once && strings.HasPrefix(sc.Text(), "cuda-alloc: devices=") {
				once = true
				close(served)
			}
		}
		if !once {
			close(served)
		}
	}()
	exited := make(chan struct{})
	go func() {
		<-copied
		_ = holder.Wait()
		close(exited)
	}()
	select {
	case <-served:
	case <-hctx.Done():
	}
	progress("client of UID %d while the root client holds the server: cuda-alloc %d MiB", gpucheck.SecondUID, limit+1024)
	secondLog := s.runArgv(hctx, env, wrap(gpucheck.SetprivArgv(tools.Setpriv, gpucheck.SecondUID), limit+1024))
	doneFirst := false
	select {
	case <-exited:
	default:
		doneFirst = true
	}
	// The holder has shown what it had to: end it now.
	_ = syscall.Kill(-holder.Process.Pid, syscall.SIGTERM)
	<-exited
	return gpucheck.JudgeTwoUsers(limit, gpucheck.TwoUsers{FirstLog: lines.String() + firstLog.String(), SecondLog: secondLog, SecondDoneFirst: doneFirst})
}

// runArgv runs argv with env added to the check's environment and
// returns its output (and how it failed, if it did).
func (s *state) runArgv(ctx context.Context, env, argv []string) string {
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Sprintf("%s\n(%s: %v)", out, filepath.Base(argv[0]), err)
	}
	return string(out)
}

func lookPath(name string) string {
	p, err := exec.LookPath(name)
	if err != nil {
		return ""
	}
	return p
}

// copyExecutable copies the file src to dst, mode 0755.
func copyExecutable(src, dst string) error {
	data, err := os.ReadFile(src)
	if err != nil {
		return err
	}
	if err := os.WriteFile(dst, data, 0o755); err != nil {
		return err
	}
	return os.Chmod(dst, 0o755)
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
	ms, err := s.startSession(ctx, progress, "mps-v3", d, true, false)
	if err != nil {
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
