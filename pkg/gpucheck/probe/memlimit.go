package probe

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/tangram-gpu/tangram/pkg/gpucheck"
	"github.com/tangram-gpu/tangram/pkg/plugin/cdi"
)

// scratchCgroup is a tree of the check's own under the root, laid out as
// the kubelet lays out a pod (…/kubepods/pod<uid>/<container>), because the
// hook sets a share's limit on the pod's cgroup, which bounds its containers
// together; dmem is enabled on each level below the check's top cgroup. The
// client runs in the container cgroup.
type scratchCgroup struct {
	// dirs from the top down; child is the last.
	dirs  []string
	child string
}

// scratchPodUID names the scratch pod cgroup (a UID as the kubelet writes it).
const scratchPodUID = "00000000-0000-4000-8000-67707563686b"

func newScratchCgroup(root string) (*scratchCgroup, error) {
	top := filepath.Join(root, fmt.Sprintf("tangram-gpu-check-%d", os.Getpid()))
	pods := filepath.Join(top, "kubepods")
	pod := filepath.Join(pods, "pod"+scratchPodUID)
	sc := &scratchCgroup{child: filepath.Join(pod, "client")}
	for _, dir := range []string{top, pods, pod} {
		if err := os.Mkdir(dir, 0o755); err != nil {
			return nilIfEmpty(sc), fmt.Errorf("creating the scratch cgroup %s: %w", dir, err)
		}
		sc.dirs = append(sc.dirs, dir)
		if err := os.WriteFile(filepath.Join(dir, "cgroup.subtree_control"), []byte("+dmem"), 0o644); err != nil {
			return sc, fmt.Errorf("enabling dmem for the children of scratch cgroup %s: %w", dir, err)
		}
	}
	if err := os.Mkdir(sc.child, 0o755); err != nil {
		return sc, fmt.Errorf("creating the scratch cgroup: %w", err)
	}
	sc.dirs = append(sc.dirs, sc.child)
	return sc, nil
}

// nilIfEmpty is nil when nothing was created, so there is nothing to remove.
func nilIfEmpty(sc *scratchCgroup) *scratchCgroup {
	if len(sc.dirs) == 0 {
		return nil
	}
	return sc
}

// remove deletes the scratch cgroups, bottom up, once their processes are gone.
func (sc *scratchCgroup) remove() error {
	var err error
	for deadline := time.Now().Add(10 * time.Second); ; {
		var errs []error
		for i := len(sc.dirs) - 1; i >= 0; i-- {
			errs = append(errs, rmdirIfThere(sc.dirs[i]))
		}
		err = errors.Join(errs...)
		if err == nil || time.Now().After(deadline) {
			return err
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func rmdirIfThere(dir string) error {
	if err := syscall.Rmdir(dir); err != nil && !errors.Is(err, syscall.ENOENT) {
		return fmt.Errorf("removing scratch cgroup %s: %w", dir, err)
	}
	return nil
}

func (s *state) checkMemoryLimitHook(ctx context.Context, progress gpucheck.Progress) gpucheck.Outcome {
	if out, ok := s.needCards(); !ok {
		return out
	}
	d := gpucheck.PlanMemoryLimit(s.facts)
	if !d.Run {
		return gpucheck.Skip("%s", d.Reason)
	}
	g, ok := s.cardByUUID(d.Card.UUID)
	if !ok {
		return gpucheck.Fail("card %s is not in the NVML inventory", d.Card.UUID)
	}
	if s.cfg.TangramCDIHook == "" {
		return gpucheck.Fail("no tangram-cdi-hook given (--tangram-cdi-hook)")
	}
	limit := s.cfg.ShareMiB
	claim := shareOf("gpu-check-memlimit", g, limit<<20, s.cfg.WorkDir)
	_, hookArgv, err := clientEnv(claim, g, s.cfg.WorkDir, &cdi.MemoryLimitHook{Path: s.cfg.TangramCDIHook, DriverRoot: s.cfg.DriverRoot})
	if err != nil {
		return gpucheck.Fail("the share's CDI edits: %v", err)
	}
	if len(hookArgv) == 0 {
		return gpucheck.Fail("the share's CDI edits carry no memory-limit hook")
	}
	sc, err := newScratchCgroup(s.cfg.CgroupRoot)
	if sc == nil {
		return gpucheck.Fail("%v", err)
	}
	out := s.limitInCgroup(ctx, progress, sc, hookArgv, g.UUID, limit, err)
	if err := sc.remove(); err != nil {
		return gpucheck.Fail("%s; %v", out.Detail, err)
	}
	return out
}

// limitInCgroup runs the hook for a placeholder process in the scratch
// cgroup, as the runtime runs it for a container's first process, then a
// client in the same cgroup, without MPS, that must be refused past the
// limit.
func (s *state) limitInCgroup(ctx context.Context, progress gpucheck.Progress, sc *scratchCgroup, hookArgv []string, uuid string, limitMiB int64, setupErr error) gpucheck.Outcome {
	if setupErr != nil {
		return gpucheck.Fail("%v", setupErr)
	}
	fd, err := syscall.Open(sc.child, syscall.O_DIRECTORY|syscall.O_RDONLY, 0)
	if err != nil {
		return gpucheck.Fail("opening the scratch cgroup: %v", err)
	}
	defer syscall.Close(fd)
	holder := exec.CommandContext(ctx, "sleep", "600")
	holder.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: fd}
	if err := holder.Start(); err != nil {
		return gpucheck.Fail("starting a placeholder process in the scratch cgroup: %v", err)
	}
	defer func() { _ = holder.Process.Kill(); _ = holder.Wait() }()
	progress("running the share's createRuntime hook: %s", strings.Join(hookArgv, " "))
	hook := exec.CommandContext(ctx, hookArgv[0], hookArgv[1:]...)
	hook.Args[0] = "tangram-cdi-hook"
	hook.Stdin = strings.NewReader(fmt.Sprintf(`{"ociVersion":"1.2.0","id":"gpu-check","status":"created","pid":%d,"bundle":"%s"}`, holder.Process.Pid, s.cfg.WorkDir))
	if out, err := hook.CombinedOutput(); err != nil {
		return gpucheck.Fail("tangram-cdi-hook refused: %v: %s", err, strings.TrimSpace(string(out)))
	}
	progress("client in the scratch cgroup: cuda-alloc %d MiB, no MPS", limitMiB+1024)
	o := gpucheck.JudgeLimitedClient(limitMiB, s.runClient(ctx, []string{"CUDA_VISIBLE_DEVICES=" + uuid}, limitMiB+1024, fd))
	o.Detail = fmt.Sprintf("cgroup %s: %s", sc.child, o.Detail)
	return o
}
