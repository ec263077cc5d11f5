#!/usr/bin/env bash
# A real Prometheus (Debian's prometheus package, installed with apt-get if
# missing) scraping the pods of the local cluster's Tangram release (chart.sh;
# they run on the host network), and the check that every query of the
# chart's Grafana dashboard returns a series.
#   prometheus.sh start|check|stop
# start: scrape the kubelet plugin (:9400, labelled with its node as the
#   chart's PodMonitor does), the controller (:9401) and tangram-scheduler
#   (https :10359, with the admin token, as kube-prometheus scrapes
#   kube-scheduler) every 2s.
# check: go test -tags e2e ./test/dashboard against it (docs/observability.md);
#   all three jobs must be up.
# Settings (environment):
#   TANGRAM_PROMETHEUS_PORT  loopback port of its API (default 19091)
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

NAME=prometheus
PORT="${TANGRAM_PROMETHEUS_PORT:-19091}"
DIR="$CLUSTER_DIR/prometheus"
URL="http://127.0.0.1:$PORT"

install() {
	command -v prometheus >/dev/null && return 0
	local started
	started="$(now_s)"
	apt_install prometheus
	# The package enables and starts a Prometheus of its own (port 9090);
	# this one is all the check needs.
	if command -v systemctl >/dev/null && systemctl is-active --quiet prometheus 2>/dev/null; then
		info "stopping and disabling the packaged prometheus.service"
		systemctl disable --now prometheus >/dev/null 2>&1 || true
	fi
	log "installed prometheus in $(elapsed "$started")"
}

start() {
	need_root
	[ -f "$KUBECONFIG_FILE" ] || die "no cluster: $KUBECONFIG_FILE is missing; run 'make cluster-up' first"
	if [ -n "$(proc_pid "$NAME")" ]; then
		info "$NAME already running (pid $(proc_pid "$NAME"))"
		return 0
	fi
	install
	mkdir -p "$DIR/data"
	cat >"$DIR/prometheus.yml" <<-YAML
		# Written by hack/local-cluster/prometheus.sh: the static form of the
		# chart's PodMonitor (plugin, node label added) and ServiceMonitors
		# (controller, scheduler) for the host-network pods of the local
		# cluster (chart.sh).
		global:
		  scrape_interval: 2s
		  scrape_timeout: 2s
		scrape_configs:
		  - job_name: kubelet-plugin
		    honor_labels: true
		    static_configs:
		      - targets: ["127.0.0.1:9400"]
		        labels: {node: "$NODE_NAME"}
		  - job_name: controller
		    static_configs:
		      - targets: ["127.0.0.1:9401"]
		  - job_name: scheduler
		    scheme: https
		    tls_config: {insecure_skip_verify: true}
		    authorization:
		      credentials_file: $CLUSTER_DIR/pki/admin.token
		    static_configs:
		      - targets: ["127.0.0.1:10359"]
	YAML
	log "starting Prometheus $(prometheus --version 2>&1 | head -1 | awk '{print $3}') on $URL"
	start_proc "$NAME" "$(command -v prometheus)" \
		--config.file="$DIR/prometheus.yml" \
		--storage.tsdb.path="$DIR/data" \
		--storage.tsdb.retention.time=2h \
		--web.listen-address="127.0.0.1:$PORT"
	wait_until "$NAME" 60 "Prometheus is ready" curl -sf --max-time 2 "$URL/-/ready"
}

check() {
	[ -n "$(proc_pid "$NAME")" ] || die "Prometheus is not running; run '$0 start' first"
	cd "$REPO_ROOT"
	go_static test -tags e2e -count=1 -v -run 'TestDashboardQueriesReturnSeries|TestAlertQueriesRun' ./test/dashboard -args --prometheus-url "$URL" \
		--jobs kubelet-plugin,controller,scheduler
}

case "${1:-}" in
start) start ;;
check) check ;;
stop) stop_proc "$NAME" 10 ;;
*) die "usage: $0 start|check|stop" ;;
esac
