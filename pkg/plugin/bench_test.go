package plugin

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/klog/v2"
)

// The benchmarks prepare claims through the real checkpoint store (an
// unsynced atomic replace, then write + fsync + rename + directory fsync)
// and the real CDI spec store, with the files where a node has them: the
// checkpoint on the file system of $TMPDIR (set it to the state
// directory's file system to measure that disk), the CDI specs and the MPS
// root (claims' /dev/shm directories) on tmpfs, /dev/shm here, as
// /var/run/cdi and /run/tangram/mps are on a node (newNodeHarness). Each
// reports per-claim latency percentiles as custom metrics: p50-ms and
// p99-ms.

func init() {
	// Keep benchmark output readable; errors still fail the benchmark.
	klog.SetOutput(discard{})
	klog.LogToStderr(false)
}

type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }

// newNodeHarness is a harness with the node's file systems: the state
// directory in $TMPDIR, the CDI specs and the MPS root on tmpfs. Without a
// tmpfs at /dev/shm everything stays in $TMPDIR, and the benchmark says
// so.
func newNodeHarness(b *testing.B) *harness {
	b.Helper()
	dir := harnessDir(b, "")
	var fs unix.Statfs_t
	if err := unix.Statfs("/dev/shm", &fs); err != nil || fs.Type != unix.TMPFS_MAGIC {
		b.Logf("no tmpfs at /dev/shm (%v): the CDI specs and the MPS root stay in %s, on the checkpoint's file system", err, dir)
		return newHarnessIn(b, dir, dir)
	}
	return newHarnessIn(b, dir, harnessDir(b, "/dev/shm"))
}

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
// timed. The MPS daemon is kept between shares for the plugin's default
// --mps-idle-grace (5m), as on a node: a share's prepare finds it running,
// rather than timing a daemon start each time (the harness default, 0,
// stops it as soon as the last share goes). "share" is the common case of
// a node that shares its cards: another claim's share is held throughout,
// on another card. "first-share" is a share on a node where no other is
// held: its prepare waits for the MPS worker to check the daemon afresh
// (Manager.AwaitDaemon), since whatever the worker saw before may be stale
// once no share holds the daemon.
func BenchmarkPrepareOneClaim(b *testing.B) {
	for _, shape := range []string{"whole", "share", "first-share"} {
		b.Run(shape, func(b *testing.B) {
			h := newNodeHarness(b)
			h.timing.IdleGrace = 5 * time.Minute
			h.restart()
			ctx := context.Background()
			if shape == "share" {
				resident := claimWith("resident", shareResult("gpu", "gpu-2", "s", "4Gi", "20"))
				res, _ := h.driver.PrepareResourceClaims(ctx, []*resourceapi.ResourceClaim{resident})
				if err := res[resident.UID].Err; err != nil {
					b.Fatal(err)
				}
			}
			var latencies []time.Duration
			for i := 0; b.Loop(); i++ {
				uid := fmt.Sprintf("bench-%d", i)
				claim := claimWith(uid, wholeResult("gpu", "gpu-0"))
				if shape != "whole" {
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

// BenchmarkDurableReplaceFloor is the reference for the numbers above: the
// least one durable file replacement costs in $TMPDIR (write a temp file,
// fsync it, rename it over the target, fsync the directory). A prepare does
// one, for PrepareCompleted; its PrepareStarted is written without fsync
// (docs/prepare.md, "One durable write per prepare").
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

// BenchmarkPrepareBatch prepares the claims of one kubelet call (a pod's
// claims come in one call); unprepare is not timed. It is the measure for
// preparing a call's claims in parallel or one after the other.
func BenchmarkPrepareBatch(b *testing.B) {
	for _, size := range []int{2, 8} {
		b.Run(fmt.Sprintf("claims=%d", size), func(b *testing.B) {
			h := newNodeHarness(b)
			ctx := context.Background()
			for call := 0; b.Loop(); call++ {
				var claims []*resourceapi.ResourceClaim
				var uids []string
				for i := range size {
					uid := fmt.Sprintf("call-%d-%d", call, i)
					uids = append(uids, uid)
					claims = append(claims, claimWith(uid, shareResult("gpu", fmt.Sprintf("gpu-%d", 1+i%3), "s", "2Gi", "")))
				}
				res, _ := h.driver.PrepareResourceClaims(ctx, claims)
				for _, r := range res {
					if r.Err != nil {
						b.Fatal(r.Err)
					}
				}
				b.StopTimer()
				for _, err := range h.unprepare(uids...) {
					if err != nil {
						b.Fatal(err)
					}
				}
				b.StartTimer()
			}
		})
	}
}
