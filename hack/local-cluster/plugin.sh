#!/usr/bin/env bash
# Runs the Tangram kubelet plugin as a host process next to the local
# cluster's kubelet (no image, no DaemonSet), so it can be stopped, killed
# and restarted by the e2e suite.
#   plugin.sh start|stop|kill|restart|status|logs
# Settings (environment):
#   TANGRAM_FAKE_PROFILE   fake GPU profile of the real node (default dgx-h100)
#   TANGRAM_SHARING        enabled|disabled (default enabled)
#   TANGRAM_PLUGIN_VERBOSITY  klog -v (default 4)
#   TANGRAM_MOCK_DRIVER_ROOT=1  real-GPU path instead of a fake profile: NVML
#                          and the driver from the mock driver root up.sh made
#                          ($MOCK_DRIVER_ROOT, docs/nvml.md)
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

NAME=tangram-plugin
PLUGIN_BIN="$CLUSTER_DIR/bin/dra-kubelet-plugin"
PLUGIN_STATE="$CLUSTER_DIR/plugin"
PROFILE="${TANGRAM_FAKE_PROFILE:-dgx-h100}"
SHARING="${TANGRAM_SHARING:-enabled}"
K() { "$KUBECTL" --kubeconfig "$KUBECONFIG_FILE" "$@"; }

build() {
	info "go build ./cmd/dra-kubelet-plugin"
	mkdir -p "$(dirname "$PLUGIN_BIN")"
	(cd "$REPO_ROOT" && go build -o "$PLUGIN_BIN.new" ./cmd/dra-kubelet-plugin) \
		|| die "building the kubelet plugin failed (go build ./cmd/dra-kubelet-plugin)"
	mv "$PLUGIN_BIN.new" "$PLUGIN_BIN"
}

slices_published() {
	[ -n "$(K get resourceslices --field-selector "spec.nodeName=$NODE_NAME,spec.driver=gpu.tangram.dev" -o name 2>/dev/null)" ]
}

# registered_since N: the kubelet logged our registration after line N.
registered_since() {
	tail -n "+$(($1 + 1))" "$LOG_DIR/kubelet.log" | grep -q 'Registered DRA plugin.*driverName="gpu.tangram.dev"'
}

start() {
	need_root
	[ -f "$KUBECONFIG_FILE" ] || die "no cluster: $KUBECONFIG_FILE is missing; run 'make cluster-up' first"
	if [ -n "$(proc_pid "$NAME")" ]; then
		info "$NAME already running (pid $(proc_pid "$NAME"))"
		return 0
	fi
	build
	mkdir -p "$PLUGIN_STATE/state" "$PLUGIN_STATE/mps" "$CDI_DIR"
	local kubelet_lines
	kubelet_lines="$(wc -l <"$LOG_DIR/kubelet.log" 2>/dev/null || echo 0)"
	local gpus=(--fake-profile "$PROFILE") what="fake profile $PROFILE"
	if [ "${TANGRAM_MOCK_DRIVER_ROOT:-}" = 1 ]; then
		[ -f "$MOCK_DRIVER_ROOT/TANGRAM-MOCK-DRIVER-ROOT" ] ||
			die "no mock driver root at $MOCK_DRIVER_ROOT: start the cluster with TANGRAM_MOCK_DRIVER_ROOT=1 make cluster-up"
		gpus=(--driver-root "$MOCK_DRIVER_ROOT" --sysfs-root "$MOCK_DRIVER_ROOT/sys")
		what="NVML from the mock driver root $MOCK_DRIVER_ROOT"
	fi
	log "starting the Tangram kubelet plugin on $NODE_NAME ($what, sharing $SHARING)"
	start_proc "$NAME" "$PLUGIN_BIN" run \
		--node-name "$NODE_NAME" \
		"${gpus[@]}" \
		--sharing "$SHARING" \
		--cdi-root "$CDI_DIR" \
		--kubelet-registrar-dir "$KUBELET_ROOT/plugins_registry" \
		--kubelet-plugin-dir "$KUBELET_ROOT/plugins/gpu.tangram.dev" \
		--state-dir "$PLUGIN_STATE/state" \
		--mps-root "$PLUGIN_STATE/mps" \
		--kubeconfig "$KUBECONFIG_FILE" \
		-v "${TANGRAM_PLUGIN_VERBOSITY:-4}"
	wait_until "$NAME" 60 "the plugin published its ResourceSlices" slices_published
	wait_until "$NAME" 60 "the plugin's registration socket exists" \
		compgen -G "$KUBELET_ROOT/plugins_registry/gpu.tangram.dev*"
	# The kubelet logs the registration (at -v=3); only lines written since
	# this start count, an earlier registration says nothing.
	wait_until kubelet 60 "the kubelet registered the plugin" registered_since "$kubelet_lines"
}

case "${1:-}" in
start) start ;;
stop) stop_proc "$NAME" 10 ;;
kill)
	# Simulates a crash: no chance to clean up.
	pid="$(proc_pid "$NAME")"
	[ -n "$pid" ] && { info "killing $NAME (pid $pid) with SIGKILL"; kill -KILL "$pid"; }
	rm -f "$PID_DIR/$NAME.pid" "$PID_DIR/$NAME.cmd"
	;;
restart)
	stop_proc "$NAME" 10
	start
	;;
status)
	pid="$(proc_pid "$NAME")"
	if [ -n "$pid" ]; then echo "running (pid $pid)"; else echo "not running"; exit 1; fi
	;;
logs) exec tail -n "${LINES:-100}" "$LOG_DIR/$NAME.log" ;;
health-event)
	# Inject a health event for a fake card, e.g. `health-event --gpu 1 --xid 79`
	# (docs/health.md); the plugin reads it from its state directory.
	shift
	[ -x "$PLUGIN_BIN" ] || die "no plugin binary at $PLUGIN_BIN: run '$0 start' first"
	exec "$PLUGIN_BIN" health-event --state-dir "$PLUGIN_STATE/state" "$@"
	;;
*) die "usage: $0 start|stop|kill|restart|status|logs|health-event <flags>" ;;
esac
