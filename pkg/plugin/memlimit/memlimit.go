// Package memlimit is the logic of tangram-cdi-hook, the CDI createRuntime
// hook that gives a container a hard GPU memory limit per card: it finds the
// container's cgroup from the OCI state the runtime passes on stdin and sets
// each card's limit on that cgroup through NVML's per-cgroup memory limits
// (nvmlDeviceSetMemoryLimits_v1, driver 615+). It fails closed: any error
// stops the container (docs/enforcement.md).
package memlimit

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// Limit is the hard memory limit of one card for one container.
type Limit struct {
	// UUID is the card's NVML UUID, GPU-….
	UUID string
	// Bytes is the most the container may allocate on the card.
	Bytes uint64
}

// String is the hook's argument form, <uuid>=<bytes>.
func (l Limit) String() string { return fmt.Sprintf("%s=%d", l.UUID, l.Bytes) }

// ParseLimit parses a --limit argument, <uuid>=<bytes>.
func ParseLimit(s string) (Limit, error) {
	uuid, bytes, ok := strings.Cut(s, "=")
	if !ok || uuid == "" || bytes == "" {
		return Limit{}, fmt.Errorf("limit %q: want <card UUID>=<bytes>, e.g. GPU-8f3c…=21474836480", s)
	}
	if !strings.HasPrefix(uuid, "GPU-") {
		return Limit{}, fmt.Errorf("limit %q: %q is not a GPU UUID (GPU-…)", s, uuid)
	}
	n, err := strconv.ParseUint(bytes, 10, 64)
	if err != nil || n == 0 {
		return Limit{}, fmt.Errorf("limit %q: %q is not a positive number of bytes", s, bytes)
	}
	return Limit{UUID: uuid, Bytes: n}, nil
}

// ReadPID reads the container's init process ID from the OCI state JSON
// a runtime hook receives on stdin.
func ReadPID(r io.Reader) (int, error) {
	var state specs.State
	if err := json.NewDecoder(r).Decode(&state); err != nil {
		return 0, fmt.Errorf("reading the container's OCI state from stdin: %w", err)
	}
	if state.Pid <= 0 {
		return 0, fmt.Errorf("container %q: the OCI state on stdin has no pid (status %q); the hook must run as createRuntime or later", state.ID, state.Status)
	}
	return state.Pid, nil
}

// ContainerCgroup returns the directory of process pid's cgroup under
// cgroupRoot (the host's /sys/fs/cgroup), read from <procRoot>/<pid>/cgroup.
// With cgroup v2 (the unified hierarchy alone) it is the "0::" entry's
// path; on a cgroup v1 or hybrid host, the memory controller's hierarchy
// (<cgroupRoot>/memory/<path>). The directory must exist.
func ContainerCgroup(procRoot, cgroupRoot string, pid int) (string, error) {
	file := filepath.Join(procRoot, strconv.Itoa(pid), "cgroup")
	f, err := os.Open(file)
	if err != nil {
		return "", fmt.Errorf("finding the cgroup of the container's process %d: %w", pid, err)
	}
	defer func() { _ = f.Close() }()
	var unified, memory string
	lines := 0
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if sc.Text() == "" {
			continue
		}
		lines++
		parts := strings.SplitN(sc.Text(), ":", 3)
		if len(parts) != 3 || !strings.HasPrefix(parts[2], "/") {
			return "", fmt.Errorf("%s: line %q is not <id>:<controllers>:<path>", file, sc.Text())
		}
		if parts[0] == "0" && parts[1] == "" {
			unified = parts[2]
		}
		for _, c := range strings.Split(parts[1], ",") {
			if c == "memory" {
				memory = parts[2]
			}
		}
	}
	if err := sc.Err(); err != nil {
		return "", fmt.Errorf("reading %s: %w", file, err)
	}
	var dir string
	switch {
	case lines == 1 && unified != "":
		dir = filepath.Join(cgroupRoot, unified)
	case memory != "":
		dir = filepath.Join(cgroupRoot, "memory", memory)
	default:
		return "", fmt.Errorf("%s names neither a cgroup v2 path nor a memory cgroup", file)
	}
	st, err := os.Stat(dir)
	if err != nil {
		return "", fmt.Errorf("the cgroup of the container's process %d: %w", pid, err)
	}
	if !st.IsDir() {
		return "", fmt.Errorf("the cgroup of the container's process %d: %s is not a directory", pid, dir)
	}
	return dir, nil
}

// Apply sets each limit on cgroup, soft limit 0 (nothing guaranteed beyond
// the hard limit), in order; it stops at the first failure, whose error
// names the card, the cgroup and NVML's answer.
func Apply(lib nvml.Interface, cgroup string, limits []Limit) error {
	if len(limits) == 0 {
		return errors.New("no --limit given: the CDI spec must name at least one card")
	}
	for _, l := range limits {
		dev, ret := lib.DeviceGetHandleByUUID(l.UUID)
		if ret != nvml.SUCCESS {
			return fmt.Errorf("card %s: finding it in NVML: %v", l.UUID, nvmlError(ret))
		}
		if ret := dev.SetMemoryLimits_v1(cgroup, 0, l.Bytes); ret != nvml.SUCCESS {
			return fmt.Errorf("card %s: setting a %d-byte memory limit on cgroup %s: %v", l.UUID, l.Bytes, cgroup, nvmlError(ret))
		}
	}
	return nil
}

// nvmlError is NVML's text for ret with its code, which NVIDIA's docs list.
func nvmlError(ret nvml.Return) string {
	return fmt.Sprintf("%s (NVML return %d)", ret.Error(), int32(ret))
}
