// Command gpu-info is the e2e workload: it prints what the container got from
// the GPU driver (visible devices, Tangram and MPS settings, device nodes) in
// a stable KEY=VALUE form the e2e suite parses from the pod log, then sleeps
// until it is stopped. It also leaves a marker file in /dev/shm and reports
// what /dev/shm holds (SHM_FILES), so the suite can tell whether two
// containers share a /dev/shm. Given an MPS pipe directory, it tries to
// create a file there and reports how that went (MPS_PIPE_WRITE: ok, or
// the error, e.g. "read-only file system" for a read-only mount).
package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
)

// reportedPrefixes are the environment variables worth reporting: the ones a
// GPU driver's CDI spec injects.
var reportedPrefixes = []string{"NVIDIA_", "TANGRAM_", "CUDA_"}

func main() {
	var extra []string
	if dir := os.Getenv("CUDA_MPS_PIPE_DIRECTORY"); dir != "" {
		extra = append(extra, "MPS_PIPE_WRITE="+tryWrite(dir))
	}
	if caps := capNodes("/dev/nvidia-caps"); len(caps) > 0 {
		extra = append(extra, "CAP_NODES="+strings.Join(caps, ","))
	}
	report(os.Stdout, os.Environ(), deviceNodes(), shmFiles("/dev/shm"), extra...)
	if len(os.Args) > 1 && os.Args[1] == "--once" {
		return
	}
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	<-sigs
}

// report writes the interesting environment variables, sorted, between
// begin/end markers so a reader can tell a complete report from a cut one.
func report(w io.Writer, environ []string, devices, shm []string, extra ...string) {
	fmt.Fprintln(w, "gpu-info: begin")
	var lines []string
	for _, kv := range environ {
		for _, p := range reportedPrefixes {
			if strings.HasPrefix(kv, p) {
				lines = append(lines, kv)
				break
			}
		}
	}
	sort.Strings(lines)
	for _, l := range lines {
		fmt.Fprintln(w, l)
	}
	fmt.Fprintf(w, "DEVICE_NODES=%s\n", strings.Join(devices, ","))
	fmt.Fprintf(w, "SHM_FILES=%s\n", strings.Join(shm, ","))
	for _, kv := range extra {
		fmt.Fprintln(w, kv)
	}
	fmt.Fprintln(w, "gpu-info: end")
}

// capNodes lists the MIG capability nodes in dir (/dev/nvidia-caps), sorted,
// each as <path>=<major>:<minor> (or <path>=not a device), so the suite can
// tell which GPU and compute instance the container may use; none when dir
// is absent.
func capNodes(dir string) []string {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil
	}
	var out []string
	for _, e := range entries {
		path := filepath.Join(dir, e.Name())
		var st syscall.Stat_t
		if err := syscall.Stat(path, &st); err != nil || st.Mode&syscall.S_IFMT != syscall.S_IFCHR {
			out = append(out, path+"=not a device")
			continue
		}
		out = append(out, fmt.Sprintf("%s=%d:%d", path, unixMajor(st.Rdev), unixMinor(st.Rdev)))
	}
	sort.Strings(out)
	return out
}

// unixMajor and unixMinor split a Linux dev_t (glibc's gnu_dev_major/minor).
func unixMajor(dev uint64) uint64 { return (dev>>8)&0xfff | (dev>>32)&^0xfff }
func unixMinor(dev uint64) uint64 { return dev&0xff | (dev>>12)&^0xff }

// deviceNodes lists the GPU device nodes visible in the container.
func deviceNodes() []string {
	nodes, err := filepath.Glob("/dev/nvidia*")
	if err != nil {
		return nil
	}
	sort.Strings(nodes)
	return nodes
}

// shmFiles writes the marker gpu-info-<hostname> into dir and lists the
// names dir holds, sorted; errors leave what could be listed.
func shmFiles(dir string) []string {
	host, _ := os.Hostname()
	_ = os.WriteFile(filepath.Join(dir, "gpu-info-"+host), []byte(host+"\n"), 0o644)
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	sort.Strings(names)
	return names
}

// tryWrite creates and removes a file in dir: "ok", or why it failed
// (the system's words, without the path).
func tryWrite(dir string) string {
	f, err := os.CreateTemp(dir, ".gpu-info-*")
	if err != nil {
		var pathErr *os.PathError
		if errors.As(err, &pathErr) {
			return pathErr.Err.Error()
		}
		return err.Error()
	}
	_ = f.Close()
	_ = os.Remove(f.Name())
	return "ok"
}
