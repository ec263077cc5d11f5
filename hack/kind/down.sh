#!/usr/bin/env bash
# Removes everything hack/kind/up.sh started: the kind cluster (its node
# container and volumes), the kind network, and the private Docker engine;
# then checks the host firewall is as up.sh found it. The cached node image
# stays in the engine's data root for the next run. Idempotent.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
need_root
export DOCKER_HOST="unix://$TANGRAM_DOCKER_SOCK"
rc=0

if "$REPO_ROOT/hack/kind/dockerd.sh" status >/dev/null 2>&1; then
	PATH="$KIND_BIN_DIR:$PATH"
	if command -v kind >/dev/null && kind get clusters 2>/dev/null | grep -qx "$KIND_CLUSTER"; then
		log "kind delete cluster --name $KIND_CLUSTER"
		kind delete cluster --name "$KIND_CLUSTER" >/dev/null 2>&1 || { info "kind delete cluster failed"; rc=1; }
	fi
	# Anything else left on the private engine (a half-created node).
	leftover="$(tdocker ps -aq --filter "label=io.x-k8s.kind.cluster=$KIND_CLUSTER")"
	[ -z "$leftover" ] || tdocker rm -f -v $leftover >/dev/null || rc=1
	if tdocker network inspect kind >/dev/null 2>&1; then
		info "docker network rm kind"
		tdocker network rm kind >/dev/null || rc=1
	fi
	tdocker volume prune -f >/dev/null 2>&1 || true
fi
"$REPO_ROOT/hack/kind/dockerd.sh" stop || rc=1

if [ -f "$KIND_IPTABLES_SNAPSHOT" ]; then
	now="$(iptables-save 2>/dev/null | grep -v '^#' || true)"
	# Rules the private engine or kind could have added carry these names;
	# the local cluster's own chains (KUBE-*) may change meanwhile.
	added="$(diff <(cat "$KIND_IPTABLES_SNAPSHOT") <(echo "$now") | grep '^>' | grep -iE 'docker|kind|172\.31\.' || true)"
	if [ -n "$added" ]; then
		printf 'WARNING: the host firewall has rules it did not have before hack/kind/up.sh:\n%s\n' "$added" >&2
		rc=1
	else
		info "host firewall: no docker/kind rules left (iptables-save compared with the snapshot of up.sh)"
	fi
	rm -f "$KIND_IPTABLES_SNAPSHOT"
fi
exit "$rc"
