#!/usr/bin/env bash
# Shared settings and helpers of hack/kind (the offline kind demo). Sourced.
# Builds on hack/local-cluster/lib.sh (cache root, logging, apt_install).
#
# Everything is cached under $KIND_CACHE (~/.cache/tangram/kind), keyed by
# version. The Docker engine this starts is private to Tangram: its own
# socket, data root, exec root, pid file and address pool under tangram paths,
# no default bridge, and --iptables=false/--ip6tables=false so it never
# touches the host's firewall (Docker would otherwise set the FORWARD policy
# to DROP and break the local cluster's pod network).
source "$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/local-cluster/lib.sh"

KIND_VERSION="${KIND_VERSION:-v0.33.0}"
KIND_CACHE="${KIND_CACHE:-$CACHE_ROOT/kind}"
KIND_BIN_DIR="$KIND_CACHE/kind-$KIND_VERSION/bin"
# The rootfs suite of the node image (Debian, fetched with debootstrap).
KIND_NODE_SUITE="${KIND_NODE_SUITE:-bookworm}"
KIND_NODE_MIRROR="${KIND_NODE_MIRROR:-http://deb.debian.org/debian}"

# The private Docker engine.
TANGRAM_DOCKER_RUN=/run/tangram-kind
TANGRAM_DOCKER_SOCK="$TANGRAM_DOCKER_RUN/docker.sock"
TANGRAM_DOCKER_DATA="$KIND_CACHE/docker"
TANGRAM_DOCKER_PIDFILE="$TANGRAM_DOCKER_RUN/dockerd.pid"
TANGRAM_DOCKER_LOG="$KIND_CACHE/dockerd.log"
TANGRAM_DOCKER_POOL="${TANGRAM_DOCKER_POOL:-172.31.0.0/16}"
# The runc wrapper registered as the engine's default runtime.
TANGRAM_RUNC_WRAPPER="$KIND_CACHE/bin/runc-drop-sys-resource"

# tdocker ARGS...: docker against the private engine.
tdocker() { DOCKER_HOST="unix://$TANGRAM_DOCKER_SOCK" docker "$@"; }

# ensure_kind: kind $KIND_VERSION from the Go module proxy, built once into
# $KIND_BIN_DIR and put first on PATH.
ensure_kind() {
	if [ ! -x "$KIND_BIN_DIR/kind" ]; then
		local start; start="$(now_s)"
		log "building kind $KIND_VERSION (go install sigs.k8s.io/kind@$KIND_VERSION, ~1 min cold)"
		mkdir -p "$KIND_BIN_DIR.tmp"
		CGO_ENABLED=0 GOBIN="$KIND_BIN_DIR.tmp" go install -trimpath -ldflags "-s -w" "sigs.k8s.io/kind@$KIND_VERSION" \
			>"$KIND_CACHE/kind-build.log" 2>&1 || { tail -n 20 "$KIND_CACHE/kind-build.log" >&2; die "go install sigs.k8s.io/kind@$KIND_VERSION failed (log: $KIND_CACHE/kind-build.log)"; }
		rm -rf "$KIND_BIN_DIR"
		mv "$KIND_BIN_DIR.tmp" "$KIND_BIN_DIR"
		info "built kind in $(elapsed "$start")"
	fi
	PATH="$KIND_BIN_DIR:$PATH"
}

# The demo's kind cluster.
KIND_CLUSTER="${KIND_CLUSTER_NAME:-tangram}"
KIND_KUBECONFIG="${KIND_KUBECONFIG:-$KIND_CACHE/kubeconfig}"
KIND_IPTABLES_SNAPSHOT="$TANGRAM_DOCKER_RUN/iptables-before.txt"

# kind_lock: one kind demo per machine (one private engine, one cluster name);
# held on fd 8 until the caller exits. The local cluster has a lock of its
# own: the two run side by side.
kind_lock() {
	[ -n "${TANGRAM_KIND_LOCK_HELD:-}" ] && return 0
	need_root
	local lock=/run/tangram-kind.lock
	exec 8>"$lock"
	if ! flock -n 8; then
		log "another kind demo holds $lock; waiting for it"
		flock -w 2700 8 || die "gave up waiting for $lock after 45 min"
	fi
	export TANGRAM_KIND_LOCK_HELD=1
}

# KIND_GPUS=mock: the mock NVIDIA driver root (hack/mock-driver-root) instead
# of a fake profile, bind-mounted into the kind node at the same path, the
# way NVIDIA's mock-GPU kind CI mounts its mock driver; the mock library
# keeps its state inside the node (gone with it).
KIND_GPUS="${KIND_GPUS:-fake}"
KIND_MOCK_DRIVER_ROOT="$KIND_CACHE/mock-driver-root"
KIND_MOCK_NVML_STATE_DIR=/var/lib/tangram/mock-nvml
