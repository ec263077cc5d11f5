package memlimit

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
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

// PodCgroup is the cgroup of the pod a container belongs to.
type PodCgroup struct {
	// Dir is its directory (under the cgroup root the container's was found in).
	Dir string
	// PodUID is the pod's UID as the kubelet gives it (dashes, not underscores).
	PodUID string
}

// FindPodCgroup returns the pod cgroup containing the container cgroup
// containerDir (ContainerCgroup's answer), a directory below cgroupRoot:
// the nearest ancestor named as the kubelet names pod cgroups, itself below
// a kubepods cgroup. It must exist. A dmem limit on it bounds all of the
// pod's containers together (NVIDIA-FACTS.md, Hierarchy).
func FindPodCgroup(cgroupRoot, containerDir string) (PodCgroup, error) {
	rel, err := filepath.Rel(cgroupRoot, containerDir)
	if err != nil || rel == "." || strings.HasPrefix(rel, "..") {
		return PodCgroup{}, fmt.Errorf("the container's cgroup %s is not under the cgroup root %s", containerDir, cgroupRoot)
	}
	parts := strings.Split(filepath.ToSlash(rel), "/")
	// The container's own cgroup is the last element: a pod cgroup is above it.
	for i := len(parts) - 2; i >= 1; i-- {
		uid := podUIDOf(parts[i])
		if uid == "" {
			continue
		}
		if !underKubepods(parts[:i]) {
			break
		}
		dir := filepath.Join(append([]string{cgroupRoot}, parts[:i+1]...)...)
		st, err := os.Stat(dir)
		if err != nil {
			return PodCgroup{}, fmt.Errorf("the pod cgroup of container cgroup %s: %w", containerDir, err)
		}
		if !st.IsDir() {
			return PodCgroup{}, fmt.Errorf("the pod cgroup of container cgroup %s: %s is not a directory", containerDir, dir)
		}
		return PodCgroup{Dir: dir, PodUID: uid}, nil
	}
	return PodCgroup{}, fmt.Errorf("the container's cgroup %s is not inside a kubelet pod cgroup (kubepods…/pod<uid>/… with the cgroupfs driver, "+
		"kubepods….slice/…-pod<uid>.slice/… with systemd): the memory limit bounds a pod's containers together on their pod cgroup, and there is none to set it on", rel)
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
