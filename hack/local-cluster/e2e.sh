#!/usr/bin/env bash
# Runs the e2e suite (test/e2e) against a cluster.
#   KUBECONFIG=... e2e.sh [extra suite flags]
# Without KUBECONFIG it uses the local cluster of `make cluster-up` with the
# chart installed (chart.sh install), and then also wires the commands that
# kill the chart's plugin and wait for the DaemonSet to bring it back, inject
# health events, and the CDI directory checks.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

args=()
if [ -z "${KUBECONFIG:-}" ]; then
	cluster_lock # nobody tears the cluster down under the suite (as root: the cluster's cache is root's)
	[ -f "$KUBECONFIG_FILE" ] || die "no cluster: set KUBECONFIG, or run 'make cluster-up' first ($KUBECONFIG_FILE is missing)"
	export KUBECONFIG="$KUBECONFIG_FILE"
	"$KUBECTL" -n "$RELEASE_NAMESPACE" get daemonset "$RELEASE-kubelet-plugin" >/dev/null 2>&1 ||
		die "Tangram is not installed on the local cluster: run hack/local-cluster/chart.sh install first"
	chart="$REPO_ROOT/hack/local-cluster/chart.sh"
	args+=(--plugin-kill-cmd "$chart kill-plugin" --plugin-start-cmd "$chart wait-plugin" --cdi-dir "$CDI_DIR" --gpu-node "$NODE_NAME" --helm "$HELM_BIN/helm"
		--health-event-cmd "$chart health-event" --fake-processes-cmd "$chart fake-processes" --release-namespace "$RELEASE_NAMESPACE" --helm-release "$RELEASE")
fi
log "running the e2e suite against $(KUBECONFIG="$KUBECONFIG" "$KUBECTL" config view --minify -o jsonpath='{.clusters[0].cluster.server}' 2>/dev/null || echo "$KUBECONFIG")"
cd "$REPO_ROOT"
# The specs labelled realpath need the chart over a mock driver root; they
# have a stage of their own (test-e2e-realpath.sh); those labelled demo are
# the demo's scenarios, run by make demo/test-demo (demo/run-local.sh);
# those labelled mig need the plugin on the mig-h100 profile, and run in
# make demo/test-demo too, which installs it first (docs/testing.md).
# E2E_LABEL_FILTER replaces this filter.
go_static test -v -tags e2e -count=1 -timeout "${E2E_TIMEOUT:-45m}" ./test/e2e -args \
	--kubeconfig "$KUBECONFIG" -ginkgo.v -ginkgo.no-color -ginkgo.label-filter="${E2E_LABEL_FILTER:-!realpath && !demo && !mig}" "${args[@]}" "$@"
