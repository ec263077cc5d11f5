#!/usr/bin/env bash
# The whole end-to-end run CI does: cluster up, plugin, controller, tangram-scheduler, Prometheus, e2e suite,
# the dashboard's queries against Prometheus, cluster
# down (always, also after a failure), printing how long each stage took.
# Set KEEP_CLUSTER=1 to leave the cluster running for inspection.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
HERE="$(dirname "${BASH_SOURCE[0]}")"
cluster_lock

finish() {
	local rc=$?
	set +o errexit
	down_unless_kept stage cluster-down "$HERE/down.sh"
	stage_summary
	[ $rc -eq 0 ] && log "test-e2e passed" || log "test-e2e FAILED (exit $rc); component logs in $LOG_DIR"
	exit $rc
}
trap finish EXIT

# Compiling the suite first fails fast on a broken test before any cluster work.
stage e2e-vet go vet -tags e2e "$REPO_ROOT/test/e2e/" "$REPO_ROOT/test/dashboard/"
stage cluster-up "$HERE/up.sh"
stage plugin-start "$HERE/plugin.sh" start
stage controller-start "$HERE/controller.sh" start
stage scheduler-start "$HERE/scheduler.sh" start
# Prometheus scrapes the plugin and the controller while the suite runs; then
# every query of the chart's Grafana dashboard must return a series.
stage prometheus-start "$HERE/prometheus.sh" start
stage e2e "$HERE/e2e.sh"
stage dashboard-queries "$HERE/prometheus.sh" check
