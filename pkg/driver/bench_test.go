package driver

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/klog/v2"
)

// The benchmarks prepare claims through the real checkpoint store (atomic
// write + fsync + rename + directory fsync) and the real CDI spec store, on
// the file system of $TMPDIR (set it to the state directory's file system
// to measure that disk). Each reports per-claim latency percentiles as
// custom metrics: p50-ms and p99-ms.

func init() {
	// Keep benchmark output readable; errors still fail the benchmark.
	klog.SetOutput(discard{})
	klog.LogToStderr(false)
}

type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }

func reportPercentiles(b *testing.B, latencies []time.Duration) {
	slices.Sort(latencies)
	pct := func(p float64) float64 {
		i := int(p * float64(len(latencies)-1))
		return float64(latencies[i].Nanoseconds()) / 1e6
	}
	b.ReportMetric(pct(0.50), "p50-ms")
	b.ReportMetric(pct(0.99), "p99-ms")
}

// BenchmarkPrepareOneClaim prepares one claim at a time; unprepare is not
// timed.
func BenchmarkPrepareOneClaim(b *testing.B) {
	for _, shape := range []string{"whole", "share"} {
		b.Run(shape, func(b *testing.B) {
			h := newHarness(b)
			ctx := context.Background()
			var latencies []time.Duration
			for i := 0; b.Loop(); i++ {
				uid := fmt.Sprintf("bench-%d", i)
				claim := claimWith(uid, wholeResult("gpu", "gpu-0"))
				if shape == "share" {
					claim = claimWith(uid, shareResult("gpu", "gpu-1", "s", "4Gi", "20"))
				}
				start := time.Now()
				res, _ := h.driver.PrepareResourceClaims(ctx, []*resourceapi.ResourceClaim{claim})
				latencies = append(latencies, time.Since(start))
				if err := res[claim.UID].Err; err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
				if err := h.unprepare(uid)[claim.UID]; err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
			}
			reportPercentiles(b, latencies)
		})
	}
}

// BenchmarkPrepare100Concurrent prepares 100 share claims from 100
// goroutines at once (as a kubelet without serialization would); one
// iteration is the whole wave. The percentiles are over every claim of
// every wave.
func BenchmarkPrepare100Concurrent(b *testing.B) {
	const claims = 100
	h := newHarness(b)
	ctx := context.Background()
	var latencies []time.Duration
	var mu sync.Mutex
	for wave := 0; b.Loop(); wave++ {
		var wg sync.WaitGroup
		errs := make(chan error, claims)
		for i := range claims {
			uid := fmt.Sprintf("wave-%d-%d", wave, i)
			claim := claimWith(uid, shareResult("gpu", fmt.Sprintf("gpu-%d", i%4), "s", "2Gi", ""))
			wg.Go(func() {
				start := time.Now()
				res, _ := h.driver.PrepareResourceClaims(ctx, []*resourceapi.ResourceClaim{claim})
				d := time.Since(start)
				mu.Lock()
				latencies = append(latencies, d)
				mu.Unlock()
				errs <- res[claim.UID].Err
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			if err != nil {
				b.Fatal(err)
			}
		}
		b.StopTimer()
		for i := range claims {
			if err := h.unprepare(fmt.Sprintf("wave-%d-%d", wave, i)); err != nil {
				for _, e := range err {
					if e != nil {
						b.Fatal(e)
					}
				}
			}
		}
		b.StartTimer()
	}
	reportPercentiles(b, latencies)
	if dir := os.Getenv("TMPDIR"); dir != "" {
		b.Logf("state on %s", dir)
	}
}

// BenchmarkDurableReplaceFloor is the reference for the numbers above: the
// least one durable file replacement costs in $TMPDIR (write a temp file,
// fsync it, rename it over the target, fsync the directory). A prepare does
// two, one per checkpoint phase.
func BenchmarkDurableReplaceFloor(b *testing.B) {
	dir := b.TempDir()
	target := filepath.Join(dir, "state")
	var latencies []time.Duration
	for b.Loop() {
		start := time.Now()
		if err := durableReplace(dir, target, []byte(`{"claims":{}}`)); err != nil {
			b.Fatal(err)
		}
		latencies = append(latencies, time.Since(start))
	}
	reportPercentiles(b, latencies)
}

func durableReplace(dir, target string, data []byte) error {
	f, err := os.CreateTemp(dir, "tmp-")
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := os.Rename(f.Name(), target); err != nil {
		return err
	}
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
