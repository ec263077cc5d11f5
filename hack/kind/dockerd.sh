#!/usr/bin/env bash
# Starts or stops Tangram's private Docker engine for the offline kind demo.
#   hack/kind/dockerd.sh start|stop|status
# start installs what is missing (docker.io and jq from Debian, the runc
# wrapper), then runs dockerd with its own socket ($TANGRAM_DOCKER_SOCK),
# data root, exec root and pid file, no default bridge, and without touching
# iptables or sysctls, so the local cluster on the same host keeps working.
# Use it with: DOCKER_HOST=unix:///run/tangram-kind/docker.sock docker ...
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

# dockerd_pid: the PID of the running private dockerd, or nothing.
dockerd_pid() {
	local pid
	[ -f "$TANGRAM_DOCKER_PIDFILE" ] || return 0
	pid="$(cat "$TANGRAM_DOCKER_PIDFILE")"
	[ -n "$pid" ] && [ "$(readlink -f "/proc/$pid/exe" 2>/dev/null)" = "$(readlink -f "$(command -v dockerd)")" ] && echo "$pid"
	return 0
}

dockerd_start() {
	need_root
	if [ -n "$(dockerd_pid)" ] && tdocker info >/dev/null 2>&1; then
		info "the private Docker engine is already running ($TANGRAM_DOCKER_SOCK)"
		return 0
	fi
	if ! command -v dockerd >/dev/null; then
		log "installing Debian's docker.io (the Docker engine; its services are not started)"
		# The package would start docker.service, a dockerd with the stock
		# settings (iptables, FORWARD policy DROP): a policy-rc.d that denies
		# every service start prevents it, unless the machine has one.
		local policy=/usr/sbin/policy-rc.d own_policy=""
		if [ ! -e "$policy" ]; then
			printf '#!/bin/sh\n# hack/kind/dockerd.sh: no service starts while docker.io installs\nexit 101\n' >"$policy"
			chmod 0755 "$policy"
			own_policy=1
		fi
		apt_install docker.io jq || { [ -z "$own_policy" ] || rm -f "$policy"; exit 1; }
		[ -z "$own_policy" ] || rm -f "$policy"
	fi
	apt_install jq
	command -v dockerd >/dev/null || die "dockerd is missing after installing docker.io"
	command -v docker >/dev/null || die "the docker client is missing after installing docker.io"
	mkdir -p "$TANGRAM_DOCKER_RUN" "$TANGRAM_DOCKER_DATA" "$(dirname "$TANGRAM_RUNC_WRAPPER")"
	install -m 0755 "$(dirname "${BASH_SOURCE[0]}")/runc-drop-sys-resource" "$TANGRAM_RUNC_WRAPPER"
	log "starting the private Docker engine (socket $TANGRAM_DOCKER_SOCK, data $TANGRAM_DOCKER_DATA, log $TANGRAM_DOCKER_LOG)"
	# --bridge=none: no docker0; kind creates its own network from the pool.
	# --iptables/--ip6tables/--ip-forward=false: the host firewall and sysctls
	# stay as they are. The managed containerd lives under the exec root with
	# its own socket, apart from the local cluster's containerd.
	setsid dockerd \
		--host "unix://$TANGRAM_DOCKER_SOCK" \
		--data-root "$TANGRAM_DOCKER_DATA" \
		--exec-root "$TANGRAM_DOCKER_RUN/exec" \
		--pidfile "$TANGRAM_DOCKER_PIDFILE" \
		--bridge none \
		--iptables=false --ip6tables=false --ip-forward=false --ip-masq=false \
		--default-address-pool "base=$TANGRAM_DOCKER_POOL,size=24" \
		--add-runtime "tangram-runc=$TANGRAM_RUNC_WRAPPER" \
		--default-runtime tangram-runc \
		--storage-driver overlay2 \
		>>"$TANGRAM_DOCKER_LOG" 2>&1 </dev/null 8>&- 9>&- &
	local i
	for ((i = 0; i < 60; i++)); do
		tdocker info >/dev/null 2>&1 && { info "Docker engine ready ($(tdocker version --format '{{.Server.Version}}'))"; return 0; }
		[ -d "/proc/$!" ] || break
		sleep 1
	done
	tail -n 20 "$TANGRAM_DOCKER_LOG" >&2
	die "the private Docker engine did not come up (log: $TANGRAM_DOCKER_LOG)"
}

dockerd_stop() {
	local pid i
	pid="$(dockerd_pid)"
	if [ -z "$pid" ]; then
		info "the private Docker engine is not running"
		return 0
	fi
	log "stopping the private Docker engine (pid $pid)"
	kill -TERM "$pid" 2>/dev/null || true
	for ((i = 0; i < 30; i++)); do
		[ -d "/proc/$pid" ] || break
		sleep 1
	done
	if [ -d "/proc/$pid" ]; then
		info "dockerd did not stop in 30s; killing it"
		kill -KILL "$pid" 2>/dev/null || true
	fi
	rm -f "$TANGRAM_DOCKER_PIDFILE" "$TANGRAM_DOCKER_SOCK"
}

case "${1:-}" in
start) dockerd_start ;;
stop) dockerd_stop ;;
status) if [ -n "$(dockerd_pid)" ]; then echo "running (pid $(dockerd_pid), $TANGRAM_DOCKER_SOCK)"; else echo "stopped"; exit 1; fi ;;
*) die "usage: $0 start|stop|status" ;;
esac
