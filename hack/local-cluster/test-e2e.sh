#!/usr/bin/env bash
# The whole end-to-end run CI does: cluster up, the Helm chart (kubelet
# plugin, controller with its webhook, tangram-scheduler, DeviceClasses;
# chart.sh), Prometheus, e2e suite, the dashboard's queries against
# Prometheus, cluster down (always, also after a failure), printing how long
# each stage took.
# Set KEEP_CLUSTER=1 to leave the cluster running for inspection.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
HERE="$(dirname "${BASH_SOURCE[0]}")"
cluster_lock

finish() {
	local rc=$?
	set +o errexit
	if [ $rc -ne 0 ] && [ -f "$KUBECONFIG_FILE" ]; then
		"$HERE/chart.sh" status >&2
		LINES=60 "$HERE/chart.sh" logs plugin >&2
	fi
	down_unless_kept stage cluster-down "$HERE/down.sh"
	stage_summary
	[ $rc -eq 0 ] && log "test-e2e passed" || log "test-e2e FAILED (exit $rc); component logs in $LOG_DIR"
	exit $rc
}
trap finish EXIT

# Compiling the suite first fails fast on a broken test before any cluster work.
stage e2e-vet go_static vet -tags e2e "$REPO_ROOT/test/e2e/" "$REPO_ROOT/test/dashboard/"
stage cluster-up "$HERE/up.sh"
stage chart-install "$HERE/chart.sh" install
# Prometheus scrapes the plugin, the controller and tangram-scheduler while
# the suite runs; then
# every query of the chart's Grafana dashboard must return a series.
stage prometheus-start "$HERE/prometheus.sh" start
stage e2e "$HERE/e2e.sh"
stage dashboard-queries "$HERE/prometheus.sh" check
