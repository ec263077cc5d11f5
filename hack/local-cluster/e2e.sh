#!/usr/bin/env bash
# Runs the e2e suite (test/e2e) against a cluster.
#   KUBECONFIG=... e2e.sh [extra suite flags]
# Without KUBECONFIG it uses the local cluster of `make cluster-up`, and then
# also wires the plugin kill/start commands and the CDI directory checks, and
# applies the DeviceClasses unless something (the Helm chart) already did.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

args=()
if [ -z "${KUBECONFIG:-}" ]; then
	[ -f "$KUBECONFIG_FILE" ] || die "no cluster: set KUBECONFIG, or run 'make cluster-up' first ($KUBECONFIG_FILE is missing)"
	export KUBECONFIG="$KUBECONFIG_FILE"
	cluster_lock # nobody tears the cluster down under the suite
	plugin="$REPO_ROOT/hack/local-cluster/plugin.sh"
	args+=(--plugin-kill-cmd "$plugin kill" --plugin-start-cmd "$plugin start" --cdi-dir "$CDI_DIR" --gpu-node "$NODE_NAME" --helm "$HELM_BIN/helm"
		--health-event-cmd "$plugin health-event")
	if ! "$KUBECTL" get deviceclass gpu.tangram.dev >/dev/null 2>&1; then
		log "applying DeviceClasses from test/e2e/testdata (no Helm chart installed)"
		"$KUBECTL" apply -f "$REPO_ROOT/test/e2e/testdata/deviceclasses.yaml" >&2
	fi
fi
log "running the e2e suite against $(KUBECONFIG="$KUBECONFIG" "$KUBECTL" config view --minify -o jsonpath='{.clusters[0].cluster.server}' 2>/dev/null || echo "$KUBECONFIG")"
cd "$REPO_ROOT"
# The specs labelled realpath need the chart over a mock driver root; they
# have a stage of their own (test-e2e-realpath.sh); those labelled demo are
# the demo's scenarios, run by make demo/test-demo (demo/run-local.sh).
# E2E_LABEL_FILTER replaces this filter.
exec go test -v -tags e2e -count=1 -timeout "${E2E_TIMEOUT:-45m}" ./test/e2e -args \
	--kubeconfig "$KUBECONFIG" -ginkgo.v -ginkgo.no-color -ginkgo.label-filter="${E2E_LABEL_FILTER:-!realpath && !demo}" "${args[@]}" "$@"
