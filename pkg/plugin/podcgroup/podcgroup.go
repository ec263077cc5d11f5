// Package podcgroup tells which pod a process or a cgroup belongs to, from
// the names the kubelet gives pod cgroups and a process's
// /proc/<pid>/cgroup: the memory-limit hook finds a container's pod
// cgroup with it, the usage watcher a GPU process's pod. Pure but Read.
package podcgroup

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
)

// A pod's cgroup as the kubelet names it, by cgroup driver:
//   - cgroupfs: <root>/kubepods[/burstable|/besteffort]/pod<uid>/<container>
//   - systemd:  <root>/kubepods.slice[/kubepods-<qos>.slice]/kubepods[-<qos>]-pod<uid with _ for ->.slice/cri-containerd-<id>.scope
//
// (a kubelet --cgroup-root adds a prefix, e.g. kubelet.slice/kubelet-kubepods.slice).
// A static pod's UID is 32 hex digits without dashes.
var (
	cgroupfsPodName = regexp.MustCompile(`^pod([0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}|[0-9a-f]{32})$`)
	systemdPodName  = regexp.MustCompile(`^(?:[a-z0-9_-]+-)?pod([0-9a-f]{8}_[0-9a-f]{4}_[0-9a-f]{4}_[0-9a-f]{4}_[0-9a-f]{12}|[0-9a-f]{32})\.slice$`)
)

// Find returns the pod UID (dashes, as the kubelet gives it) of the
// nearest pod cgroup among parts, a cgroup path's elements below the
// cgroup root, with the container's own cgroup last, and the index of
// that pod cgroup: a pod cgroup is above the last element and below a
// kubepods cgroup. ok is false when there is none (a host process, a
// system service).
func Find(parts []string) (uid string, index int, ok bool) {
	return nearestPod(parts, 1, true)
}

// nearestPod returns the pod cgroup nearest the last element of parts,
// above it and at first or below; withKubepods: it must be below a
// kubepods cgroup, ok false otherwise.
func nearestPod(parts []string, first int, withKubepods bool) (uid string, index int, ok bool) {
	for i := len(parts) - 2; i >= first; i-- {
		uid := podUIDOf(parts[i])
		if uid == "" {
			continue
		}
		if withKubepods && !underKubepods(parts[:i]) {
			return "", 0, false
		}
		return uid, i, true
	}
	return "", 0, false
}

// podUIDOf is the pod UID a cgroup directory name carries, or "".
func podUIDOf(name string) string {
	if m := cgroupfsPodName.FindStringSubmatch(name); m != nil {
		return m[1]
	}
	if m := systemdPodName.FindStringSubmatch(name); m != nil {
		return strings.ReplaceAll(m[1], "_", "-")
	}
	return ""
}

// underKubepods says whether one of the ancestors is the kubelet's pods
// cgroup (kubepods, kubepods.slice, kubelet-kubepods.slice, …).
func underKubepods(ancestors []string) bool {
	for _, a := range ancestors {
		if a == "kubepods" || strings.HasSuffix(strings.TrimSuffix(a, ".slice"), "kubepods") {
			return true
		}
	}
	return false
}

// ProcCgroup is what a /proc/<pid>/cgroup file says: the cgroup v2 path
// (the "0::" entry) and the cgroup v1 memory controller's, each "" when
// absent.
type ProcCgroup struct {
	Unified, Memory string
	// Lines counts the file's entries: a cgroup v2 host has the unified
	// one alone.
	Lines int
}

// ParseProcCgroup reads a /proc/<pid>/cgroup file's content.
func ParseProcCgroup(content string) (ProcCgroup, error) {
	var c ProcCgroup
	for _, line := range strings.Split(content, "\n") {
		if line == "" {
			continue
		}
		c.Lines++
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 || !strings.HasPrefix(parts[2], "/") {
			return ProcCgroup{}, fmt.Errorf("line %q is not <id>:<controllers>:<path>", line)
		}
		if parts[0] == "0" && parts[1] == "" {
			c.Unified = parts[2]
		}
		for _, controller := range strings.Split(parts[1], ",") {
			if controller == "memory" {
				c.Memory = parts[2]
			}
		}
	}
	return c, nil
}

// PodOf returns the UID of the pod whose cgroup holds a process with that
// /proc/<pid>/cgroup content; ok is false for a process outside any pod.
//
// The file's paths are relative to the reader's cgroup namespace. From
// the host's they start at the root and a pod cgroup must sit below a
// kubepods one. From a container's own namespace (cgroup v2 gives each
// container one) another pod's path climbs out first,
// "/../../../kubepods-besteffort.slice/…-pod<uid>.slice/…": the kubepods
// ancestor may be cut off, so there a pod cgroup name alone is enough.
// A process of the reader's own pod reads "/", a path below it, or
// "/../<another container>": no pod is seen for it.
func (c ProcCgroup) PodOf() (uid string, ok bool) {
	for _, p := range []string{c.Unified, c.Memory} {
		if p == "" {
			continue
		}
		parts := strings.Split(strings.Trim(p, "/"), "/")
		climbed := 0
		for climbed < len(parts) && parts[climbed] == ".." {
			climbed++
		}
		if climbed == 0 {
			if uid, _, ok := Find(parts); ok {
				return uid, true
			}
			continue
		}
		// Out of the reader's namespace, any pod cgroup name will do: its
		// kubepods ancestor may be cut off.
		if uid, _, ok := nearestPod(parts[climbed:], 0, false); ok {
			return uid, true
		}
	}
	return "", false
}

// ErrProcessGone answers Read for a process that exited before or while
// its cgroup was read: common for short-lived GPU processes, and no error
// of the caller's.
var ErrProcessGone = errors.New("the process is gone")

// gone reports whether err is a read of a process that exited: its
// /proc directory is gone (ENOENT), or it exited between the open and the
// read (ESRCH).
func gone(err error) bool {
	return errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ESRCH)
}

// Read reads <procRoot>/<pid>/cgroup.
func Read(procRoot string, pid int) (ProcCgroup, error) {
	file := filepath.Join(procRoot, strconv.Itoa(pid), "cgroup")
	data, err := os.ReadFile(file)
	switch {
	case gone(err):
		// Both errors: a wrong --proc-root reads as every process gone,
		// and the OS error says which directory was missing.
		return ProcCgroup{}, fmt.Errorf("reading %s: %w: %w", file, ErrProcessGone, err)
	case err != nil:
		return ProcCgroup{}, fmt.Errorf("reading %s: %w", file, err)
	}
	c, err := ParseProcCgroup(string(data))
	if err != nil {
		return ProcCgroup{}, fmt.Errorf("%s: %w", file, err)
	}
	return c, nil
}
