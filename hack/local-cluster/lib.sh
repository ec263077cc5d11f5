#!/usr/bin/env bash
# Shared settings and helpers for the local cluster scripts. Sourced, not run.
# Everything built or downloaded lives in a cache outside the repository, keyed
# by component and version, so a second run reuses it.

set -o errexit -o nounset -o pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
# shellcheck source=../gomodes.sh
source "$REPO_ROOT/hack/gomodes.sh"
CACHE_ROOT="${TANGRAM_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/tangram}"

# Pinned versions. Kubernetes 1.37.2's module zip is not on the proxy; 1.37.0 is.
KUBE_VERSION="${KUBE_VERSION:-v1.37.0}"
ETCD_VERSION="${ETCD_VERSION:-v3.7.0}"
CONTAINERD_VERSION="${CONTAINERD_VERSION:-v2.4.2}"
RUNC_VERSION="${RUNC_VERSION:-v1.5.2}"
CNI_PLUGINS_VERSION="${CNI_PLUGINS_VERSION:-v1.9.1}"
CRICTL_VERSION="${CRICTL_VERSION:-v1.36.0}"
HELM_VERSION="${HELM_VERSION:-v4.3.1}"

# Runtime state of the running cluster (not versioned: one cluster per machine).
CLUSTER_DIR="${TANGRAM_CLUSTER_DIR:-$CACHE_ROOT/cluster}"
# The mock NVIDIA driver root up.sh creates with TANGRAM_MOCK_DRIVER_ROOT=1
# (hack/mock-driver-root, docs/nvml.md); the chart's driverRoot for it.
MOCK_DRIVER_ROOT="${TANGRAM_MOCK_DRIVER_ROOT_DIR:-/var/lib/tangram-mock-driver}"
LOG_DIR="$CLUSTER_DIR/logs"
PID_DIR="$CLUSTER_DIR/pids"
KUBECONFIG_FILE="$CLUSTER_DIR/kubeconfig"
NODE_NAME="${TANGRAM_NODE_NAME:-$(hostname | tr '[:upper:]' '[:lower:]')}"

# The API server listens on loopback only (no kube-proxy either): pods that
# talk to it run on the host network with this environment.
APISERVER_PORT=6443
LOOPBACK_API_ENV="[{\"name\":\"KUBERNETES_SERVICE_HOST\",\"value\":\"127.0.0.1\"},{\"name\":\"KUBERNETES_SERVICE_PORT\",\"value\":\"$APISERVER_PORT\"}]"

# The Helm release every test stage deploys Tangram with (chart.sh).
RELEASE=tangram
RELEASE_NAMESPACE=tangram-system
CHART_DIR="$REPO_ROOT/deployments/helm/tangram"
# The chart's values per cluster kind (local.yaml, host-network.yaml,
# mock-driver-root.yaml, ...): every script that installs the chart uses these.
CHART_VALUES_DIR="$REPO_ROOT/deployments/helm/values"
# The plugin's checkpoints (chart hostPaths) live under the cluster
# directory, so down.sh removes them with the cluster.
PLUGIN_STATE_DIR="$CLUSTER_DIR/plugin/state"
# The test stages' MPS roots (chart hostPaths.mpsRoot), under one short
# directory on /run (a tmpfs, as on a node) that down.sh removes: an MPS v3
# namespace socket under a root must fit in 107 bytes, so a root may have
# at most 41 characters (the plugin refuses a longer one at start-up,
# mps.CheckSocketPaths), which a cache directory under a long HOME
# (make test-cold) would not allow.
MPS_RUN_ROOT="${TANGRAM_MPS_RUN_ROOT:-/run/tangram-e2e}"
PLUGIN_MPS_ROOT="$MPS_RUN_ROOT/plugin/mps"

# Host paths the kubelet plugin and containerd share.
CDI_DIR=/var/run/cdi
KUBELET_ROOT=/var/lib/kubelet
CONTAINERD_ROOT="$CLUSTER_DIR/containerd"
CONTAINERD_STATE=/run/tangram-containerd
CONTAINERD_SOCK="$CONTAINERD_STATE/containerd.sock"
CNI_CONF_DIR=/etc/cni/net.d
CNI_BRIDGE=tangram0
POD_CIDR=10.88.0.0/16
SERVICE_CIDR=10.96.0.0/16

log()  { printf '==> %s\n' "$*" >&2; }
info() { printf '    %s\n' "$*" >&2; }
die()  { printf 'ERROR: %s\n' "$*" >&2; exit 1; }

# component_dir NAME VERSION: the cache directory of one built component.
component_dir() { printf '%s/%s-%s' "$CACHE_ROOT" "$1" "$2"; }

# now_s / elapsed START: wall-clock seconds, for progress messages.
now_s() { date +%s; }
elapsed() { echo "$(( $(now_s) - $1 ))s"; }

# The arguments of the script that sourced this file, for need_root.
SCRIPT_ARGS=("$@")

# need_root: the local cluster runs as root (containerd, a kubelet, host
# mounts and the lock under /run). As root, go on; otherwise run the calling
# script again through sudo when there is one (the environment and PATH
# kept, so go and the settings reach it; HOME root's, so the cluster's cache
# is root's whoever starts it), else stop and say so.
need_root() {
	[ "$(id -u)" -eq 0 ] && return 0
	command -v sudo >/dev/null 2>&1 ||
		die "this step needs root (it starts containerd and the kubelet) and there is no sudo here: run it as root"
	log "this step needs root (it starts containerd and the kubelet): running $0 again through sudo"
	exec sudo --preserve-env --set-home env "PATH=$PATH" bash "$0" "${SCRIPT_ARGS[@]}"
}

# apt_install PKG...: install the Debian packages that are missing; idempotent.
APT_UPDATED=""
apt_install() {
	local missing=() p
	for p in "$@"; do
		dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
	done
	[ "${#missing[@]}" -eq 0 ] && return 0
	command -v apt-get >/dev/null || die "missing packages ${missing[*]} and no apt-get to install them"
	if [ -z "$APT_UPDATED" ]; then
		log "apt-get update"
		DEBIAN_FRONTEND=noninteractive apt-get update -qq >/dev/null || die "apt-get update failed"
		APT_UPDATED=1
	fi
	log "apt-get install ${missing[*]}"
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null \
		|| die "apt-get install ${missing[*]} failed"
}

# --- processes -------------------------------------------------------------
# Every process the harness starts is recorded as $PID_DIR/<name>.pid next to
# $PID_DIR/<name>.cmd (its binary), so teardown stops exactly those processes
# and never kills a reused PID that now belongs to something else.

# start_proc NAME BINARY ARGS...: start detached, log to $LOG_DIR/NAME.log.
start_proc() {
	local name="$1"
	shift
	mkdir -p "$LOG_DIR" "$PID_DIR"
	info "starting $name (log: $LOG_DIR/$name.log)"
	setsid "$@" >>"$LOG_DIR/$name.log" 2>&1 </dev/null 9>&- &
	echo $! >"$PID_DIR/$name.pid"
	readlink -f "$1" >"$PID_DIR/$name.cmd"
}

# proc_pid NAME: the PID of a running harness process, or nothing.
proc_pid() {
	local name="$1" pid exe
	[ -f "$PID_DIR/$name.pid" ] || return 0
	pid="$(cat "$PID_DIR/$name.pid")"
	[ -n "$pid" ] && [ -d "/proc/$pid" ] || return 0
	exe="$(readlink -f "/proc/$pid/exe" 2>/dev/null || true)"
	# A deleted-and-rebuilt binary shows up as "<path> (deleted)".
	exe="${exe% (deleted)}"
	[ "$exe" = "$(cat "$PID_DIR/$name.cmd" 2>/dev/null)" ] && echo "$pid"
	return 0
}

# stop_proc NAME [GRACE_SECONDS]: SIGTERM, then SIGKILL after the grace time.
stop_proc() {
	local name="$1" grace="${2:-10}" pid i
	pid="$(proc_pid "$name")"
	if [ -n "$pid" ]; then
		info "stopping $name (pid $pid)"
		kill -TERM "$pid" 2>/dev/null || true
		for ((i = 0; i < grace * 10; i++)); do
			[ -d "/proc/$pid" ] || break
			sleep 0.1
		done
		if [ -d "/proc/$pid" ]; then
			info "$name did not exit in ${grace}s; killing it"
			kill -KILL "$pid" 2>/dev/null || true
			sleep 0.2
		fi
	fi
	rm -f "$PID_DIR/$name.pid" "$PID_DIR/$name.cmd"
}

# fail_with_log NAME MESSAGE: print the end of a component's log and exit.
fail_with_log() {
	local name="$1"
	shift
	printf 'ERROR: %s\n' "$*" >&2
	if [ -f "$LOG_DIR/$name.log" ]; then
		printf -- '---- last 40 lines of %s ----\n' "$LOG_DIR/$name.log" >&2
		tail -n 40 "$LOG_DIR/$name.log" >&2
		printf -- '----\n' >&2
	fi
	exit 1
}

# poll TIMEOUT_SECONDS WHAT CMD...: run CMD every second until it succeeds
# (0, saying how long WHAT took) or the time is up (1). With POLL_WHILE set,
# a command that must keep succeeding meanwhile, stop at once when it fails (2).
poll() {
	local timeout="$1" what="$2" start i
	shift 2
	start="$(now_s)"
	for ((i = 0; i < timeout; i++)); do
		if "$@" >/dev/null 2>&1; then
			info "$what ($(elapsed "$start"))"
			return 0
		fi
		[ -z "${POLL_WHILE:-}" ] || $POLL_WHILE || return 2
		sleep 1
	done
	return 1
}

# wait_until NAME TIMEOUT_SECONDS WHAT CMD...: poll CMD; while waiting, fail
# early if the component NAME died.
wait_until() {
	local name="$1" timeout="$2" what="$3" rc=0
	shift 3
	POLL_WHILE="proc_alive $name" poll "$timeout" "$what" "$@" || rc=$?
	case $rc in
	0) return 0 ;;
	2) fail_with_log "$name" "$name exited while waiting until $what" ;;
	*) fail_with_log "$name" "timed out after ${timeout}s waiting until $what" ;;
	esac
}

proc_alive() { [ -n "$(proc_pid "$1")" ]; }

# Binaries, from the cache build-binaries.sh fills.
KUBE_BIN="$(component_dir kubernetes "$KUBE_VERSION")/bin"
ETCD_BIN="$(component_dir etcd "$ETCD_VERSION")/bin"
CONTAINERD_BIN="$(component_dir containerd "$CONTAINERD_VERSION")/bin"
CRICTL_BIN="$(component_dir crictl "$CRICTL_VERSION")/bin"
HELM_BIN="$(component_dir helm "$HELM_VERSION")/bin"
KUBECTL="$KUBE_BIN/kubectl"

# CRI ARGS...: crictl against the cluster's containerd. Its own config file
# (written on first use) stops crictl warning about a missing /etc/crictl.yaml.
CRI() {
	local conf="$CLUSTER_DIR/crictl.yaml"
	[ -f "$conf" ] || { mkdir -p "$CLUSTER_DIR" && printf 'runtime-endpoint: unix://%s\ntimeout: 10\n' "$CONTAINERD_SOCK" >"$conf"; }
	"$CRICTL_BIN/crictl" --config "$conf" "$@"
}

# plugin_containers: IDs of the running containers of the chart's kubelet
# plugin on this node.
plugin_containers() {
	CRI ps -q --state running --label "io.kubernetes.pod.namespace=$RELEASE_NAMESPACE" \
		--label io.kubernetes.container.name=plugin
}

# cluster_lock: one cluster per machine, so scripts that start, stop or test
# it take an exclusive host-wide lock (waiting up to 45 min for another run).
# Nested calls (test-e2e.sh → up.sh) see TANGRAM_CLUSTER_LOCK_HELD and go on.
cluster_lock() {
	[ -n "${TANGRAM_CLUSTER_LOCK_HELD:-}" ] && return 0
	need_root
	# A host-wide path: the ports, /var/lib/kubelet and the bridge are
	# host-wide too, whatever cache directory a run uses.
	local lock=/run/tangram-local-cluster.lock
	exec 9>"$lock"
	if ! flock -n 9; then
		log "another local-cluster run holds $lock; waiting for it"
		flock -w 2700 9 || die "gave up waiting for $lock after 45 min"
	fi
	export TANGRAM_CLUSTER_LOCK_HELD=1
}

# Timed stages of the test scripts (test-e2e.sh, test-e2e-realpath.sh).
STAGES=()
stage() { # stage NAME CMD...: run and time one stage; its exit code is the command's
	local name="$1" start rc
	shift
	start="$(now_s)"
	log "stage $name"
	# make test (hack/test-all.sh) starts the race tests beside the cluster
	# stages when it sees test-e2e's specs start.
	[ -z "${TANGRAM_STAGE_MARKS:-}" ] || touch "$TANGRAM_STAGE_MARKS/$name.started" 2>/dev/null || :
	"$@" && rc=0 || rc=$?
	STAGES+=("$(printf '%-16s %5ss  %s' "$name" "$(($(now_s) - start))" "$([ $rc -eq 0 ] && echo ok || echo "FAILED (exit $rc)")")")
	return $rc
}
down_unless_kept() { # down_unless_kept CMD...: run CMD, the teardown, unless KEEP_CLUSTER is set
	if [ -n "${KEEP_CLUSTER:-}" ]; then
		info "KEEP_CLUSTER set: cluster left running (kubeconfig $KUBECONFIG_FILE)"
	else
		"$@"
	fi
}
stage_summary() { # how long each stage took, in order
	log "stage durations"
	local s
	for s in "${STAGES[@]}"; do info "$s"; done
}
