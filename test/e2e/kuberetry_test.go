//go:build e2e

package e2e

import (
	"context"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
)

// kubeRetryTimeout bounds a wait on something Kubernetes itself retries,
// with its own backoffs, after Tangram has done its part. The suite controls
// none of these timings, and on a loaded machine each can take far longer
// than its usual second:
//
//   - the kubelet re-syncs a pod whose sync failed (a NodePrepareResources
//     refused, a claim fetch the node authorizer refused because its graph
//     had not yet seen the pod bound, a container not created) after its pod
//     worker's backoff: 10 s with 50 % jitter, or the CRI's own backoff,
//     capped at the resync interval (syncFrequency, 1 min, plus up to 50 %
//     jitter): up to 90 s per retry, and a pod may need more than one;
//   - the kube-scheduler retries an unschedulable pod after a backoff of up
//     to podMaxBackoffSeconds (10 s) once an event may make it schedulable,
//     and at the latest when podMaxInUnschedulablePodsDuration (5 min)
//     flushes it back to the active queue;
//   - the kubelet's status manager, the event broadcaster, the resourceclaim
//     and namespace controllers and every informer (the node authorizer's
//     graph, the API server's namespace cache for webhooks) deliver with a
//     lag that grows with the machine's load.
//
// So a wait is bounded by the scheduler's longest retry (5 min), which also
// covers three kubelet retries; the spec's SpecTimeout bounds the whole
// spec. waitKube prints how long each wait took: those figures are the
// latency measurements, read from the report, not assertions that fail
// under load. What happens (which pod runs, which is evicted, what an
// event says) is still asserted exactly.
const kubeRetryTimeout = 5 * time.Minute

// waitKube polls check every poll until it passes, for up to
// kubeRetryTimeout (or the spec's end), and prints how long it took under
// what; it returns that duration. On failure the last check's message is
// the failure, and the report says how long was waited.
func waitKube(ctx context.Context, what string, poll time.Duration, check func(g Gomega)) time.Duration {
	GinkgoHelper()
	start := time.Now()
	done := false
	defer func() {
		if !done {
			GinkgoWriter.Printf("  [kube wait] %s: not after %s\n", what, time.Since(start).Round(100*time.Millisecond))
		}
	}()
	Eventually(check).WithContext(ctx).WithTimeout(kubeRetryTimeout).WithPolling(poll).Should(Succeed(), what)
	done = true
	took := time.Since(start).Round(100 * time.Millisecond)
	GinkgoWriter.Printf("  [kube wait] %s: %s\n", what, took)
	return took
}
