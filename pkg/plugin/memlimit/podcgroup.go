package memlimit

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/tangram-gpu/tangram/pkg/plugin/podcgroup"
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
	if uid, i, ok := podcgroup.Find(parts); ok {
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
