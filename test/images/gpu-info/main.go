// Command gpu-info is the e2e workload: it prints what the container got from
// the GPU driver (visible devices, Tangram and MPS settings, device nodes) in
// a stable KEY=VALUE form the e2e suite parses from the pod log, then sleeps
// until it is stopped. It also leaves a marker file in /dev/shm and reports
// what /dev/shm holds (SHM_FILES), so the suite can tell whether two
// containers share a /dev/shm.
package main

import (
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
	report(os.Stdout, os.Environ(), deviceNodes(), shmFiles("/dev/shm"))
	if len(os.Args) > 1 && os.Args[1] == "--once" {
		return
	}
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	<-sigs
}

// report writes the interesting environment variables, sorted, between
// begin/end markers so a reader can tell a complete report from a cut one.
func report(w io.Writer, environ []string, devices, shm []string) {
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
	fmt.Fprintln(w, "gpu-info: end")
}

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
