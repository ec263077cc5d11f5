package packing

import (
	"syscall"
	"testing"
	"time"
)

// processCPU is the CPU time the process has used (user + system, every
// thread, the garbage collector's included).
func processCPU(b *testing.B) time.Duration {
	b.Helper()
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// reportCPUPerOp adds cpu-ns/op: on a machine shared with other work the
// wall-clock ns/op also counts the time the benchmark waited for a core,
// the CPU time does not.
func reportCPUPerOp(b *testing.B, start time.Duration) {
	b.Helper()
	b.ReportMetric(float64(processCPU(b)-start)/float64(b.N), "cpu-ns/op")
}
