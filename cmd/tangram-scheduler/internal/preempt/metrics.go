package preempt

import (
	"sync"

	"k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/legacyregistry"
)

// Metric label values.
const (
	// kind: what preempted, a pod for its own claims or a gang.
	kindPod  = "pod"
	kindGang = "gang"

	// result of one preemption attempt.
	resultEvicted    = "evicted"     // victims evicted, node nominated
	resultWaiting    = "waiting"     // devices already being freed suffice: nominated, nobody new evicted
	resultNotHelpful = "not_helpful" // no node where evicting lower-priority pods makes room
	resultRefused    = "refused"     // the API server refused an eviction (PodDisruptionBudget)
	resultError      = "error"

	// reason a pod was evicted: the devices its claims held.
	reasonWholeCard = "whole_card"
	reasonShare     = "share"
)

var (
	// preemptions counts TangramPreemption's attempts by kind and result.
	preemptions = metrics.NewCounterVec(&metrics.CounterOpts{
		Namespace:      "tangram",
		Subsystem:      "scheduler",
		Name:           "preemptions_total",
		Help:           "GPU preemption attempts of TangramPreemption, by kind (pod, gang) and result (evicted, waiting, not_helpful, refused, error).",
		StabilityLevel: metrics.ALPHA,
	}, []string{"kind", "result"})
	// victims counts evicted pods by kind and by what they held.
	victims = metrics.NewCounterVec(&metrics.CounterOpts{
		Namespace:      "tangram",
		Subsystem:      "scheduler",
		Name:           "preemption_victims_total",
		Help:           "Pods evicted by TangramPreemption, by kind of preemptor (pod, gang) and reason (whole_card, share: what the freed claims held).",
		StabilityLevel: metrics.ALPHA,
	}, []string{"kind", "reason"})
	registerMetrics sync.Once
)

// register adds the metrics to kube-scheduler's registry (served on its
// /metrics endpoint) once per process.
func register() {
	registerMetrics.Do(func() { legacyregistry.MustRegister(preemptions, victims) })
}
