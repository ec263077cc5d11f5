// Package usageview is `kubectl tangram top`: what the kubelet plugins'
// /metrics say of the GPUs' use (pkg/plugin/usage serves it), parsed into
// a view per node and card (Parse, Build) and rendered (WriteTop). Pure:
// reading the metrics through the API server is the cli's. It names the
// series it reads rather than importing the plugin, which kubectl-tangram
// does not link; a test holds the names to what the plugin serves.
package usageview

// The series pkg/plugin/usage serves, all gauges.
const (
	// Per prepared device in use; labels node, namespace, claim, device.
	MetricClaimUsed    = "tangram_gpu_claim_memory_used_bytes"
	MetricClaimAllowed = "tangram_gpu_claim_memory_allowed_bytes"
	MetricClaimOver    = "tangram_gpu_claim_memory_over"
	MetricClaimSM      = "tangram_gpu_claim_sm_utilization_percent"
	// Per card; labels node, device, uuid.
	MetricCardUsed         = "tangram_gpu_card_memory_used_bytes"
	MetricUnaccounted      = "tangram_gpu_unaccounted_processes"
	MetricUnaccountedBytes = "tangram_gpu_unaccounted_memory_bytes"
	MetricNodeProcesses    = "tangram_gpu_node_processes"
	MetricAmbiguous        = "tangram_gpu_ambiguous_processes"
	// Per node; label node.
	MetricRound = "tangram_gpu_usage_round_timestamp_seconds"
)

// Metrics are all of them, as the plugin describes them.
var Metrics = []string{MetricClaimUsed, MetricClaimAllowed, MetricClaimOver, MetricClaimSM, MetricCardUsed,
	MetricUnaccounted, MetricUnaccountedBytes, MetricNodeProcesses, MetricAmbiguous, MetricRound}
