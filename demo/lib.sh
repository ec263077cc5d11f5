#!/usr/bin/env bash
# Demo helpers shared by run-local.sh (this machine's local cluster) and
# kind-up.sh (a kind cluster): output, the chart install and the wait for
# the plugin's ResourceSlices. The scenarios themselves are Go e2e specs
# (test/e2e/demo_test.go). Sourced, not run. The caller defines:
#   K ARGS...   kubectl against the demo cluster
#   H ARGS...   helm against the demo cluster
# and may set DEMO_NAMESPACE, RELEASE, RELEASE_NAMESPACE.

DEMO_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
CHART_DIR="$(cd "$DEMO_DIR/../deployments/helm/tangram" && pwd)"
# The chart's values per cluster kind (host-network.yaml, kind.yaml, ...).
CHART_VALUES_DIR="$(cd "$DEMO_DIR/../deployments/helm/values" && pwd)"
SPEC_DIR="$DEMO_DIR/specs"
DEMO_NAMESPACE="${DEMO_NAMESPACE:-tangram-demo}"
RELEASE="${RELEASE:-tangram}"
RELEASE_NAMESPACE="${RELEASE_NAMESPACE:-tangram-system}"
DRIVER=gpu.tangram.dev

if [ -t 1 ]; then
	B=$'\e[1m' DIM=$'\e[2m' OK=$'\e[32m' BAD=$'\e[31m' R=$'\e[0m'
else
	B="" DIM="" OK="" BAD="" R=""
fi

step() { printf '\n%s━━ %s%s\n' "$B" "$*" "$R"; }
say() { printf '   %s\n' "$*"; }
pass() { printf '   %s✔ %s%s\n' "$OK" "$*" "$R"; }
fail() { printf '   %s✘ %s%s\n' "$BAD" "$*" "$R"; DEMO_FAILURES=$((${DEMO_FAILURES:-0} + 1)); }

# demo_install_chart HELM_ARGS...: install or upgrade the chart and wait for
# the plugin DaemonSet (kind; the local cluster uses hack/local-cluster/chart.sh).
demo_install_chart() {
	H upgrade --install "$RELEASE" "$CHART_DIR" --namespace "$RELEASE_NAMESPACE" --create-namespace \
		--wait --timeout 5m "$@" >/dev/null || return 1
	K -n "$RELEASE_NAMESPACE" rollout status "daemonset/$RELEASE-kubelet-plugin" --timeout=3m >/dev/null
}

# demo_wait_slices TIMEOUT: wait until every node running a plugin pod has
# published its ResourceSlices; prints the devices per node.
demo_wait_slices() {
	local timeout="$1" i nodes n missing
	for ((i = 0; i < timeout; i++)); do
		nodes="$(K -n "$RELEASE_NAMESPACE" get pods -l app.kubernetes.io/component=kubelet-plugin \
			-o jsonpath='{range .items[*]}{.spec.nodeName}{"\n"}{end}' 2>/dev/null | sort -u)"
		missing=""
		for n in $nodes; do
			[ -n "$(K get resourceslices --field-selector "spec.nodeName=$n,spec.driver=$DRIVER" -o name 2>/dev/null)" ] ||
				missing+=" $n"
		done
		if [ -n "$nodes" ] && [ -z "$missing" ]; then
			for n in $nodes; do
				say "node $n publishes $(K get resourceslices --field-selector "spec.nodeName=$n,spec.driver=$DRIVER" \
					-o go-template='{{range .items}}{{range .spec.devices}}{{.name}} {{end}}{{end}}')"
			done
			return 0
		fi
		sleep 1
	done
	echo "ERROR: no ResourceSlices from node(s)${missing:- (no plugin pod scheduled)} after ${timeout}s" >&2
	K -n "$RELEASE_NAMESPACE" logs -l app.kubernetes.io/component=kubelet-plugin --tail=30 >&2 || true
	return 1
}
