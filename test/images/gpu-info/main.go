// Command gpu-info is the e2e workload: it prints what the container got from
// the GPU driver (visible devices, Tangram and MPS settings, device nodes) in
// a stable KEY=VALUE form the e2e suite parses from the pod log, then sleeps
// until it is stopped.
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
	report(os.Stdout, os.Environ(), deviceNodes())
	if len(os.Args) > 1 && os.Args[1] == "--once" {
		return
	}
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	<-sigs
}

// report writes the interesting environment variables, sorted, between
// begin/end markers so a reader can tell a complete report from a cut one.
func report(w io.Writer, environ []string, devices []string) {
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
