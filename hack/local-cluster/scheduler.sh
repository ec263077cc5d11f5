#!/usr/bin/env bash
# Runs tangram-scheduler (kube-scheduler 1.37 + the TangramPacking score
# plugin) in the local cluster as a second scheduler, from the Helm chart's own
# scheduler templates (scheduler.enabled=true) and the image
# localhost/tangram/tangram-scheduler:dev that cluster-up imported. Only the
# scheduler's objects are applied, so the host-process kubelet plugin and
# controller of the e2e run stay as they are.
#   scheduler.sh start|stop|status|logs
# Settings (environment):
#   TANGRAM_SCHEDULER_PORT   its secure port on the host (default 10359; the
#                            default kube-scheduler already has 10259)
#   TANGRAM_SCHEDULER_POLICY packing policy (chart value scheduler.policy,
#                            default tangram)
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

NAMESPACE=tangram-system
RELEASE=tangram
DEPLOYMENT="$RELEASE-scheduler"
IMAGE=localhost/tangram/tangram-scheduler:dev
SECURE_PORT="${TANGRAM_SCHEDULER_PORT:-10359}"
POLICY="${TANGRAM_SCHEDULER_POLICY:-tangram}"
K() { "$KUBECTL" --kubeconfig "$KUBECONFIG_FILE" "$@"; }

# render prints the chart's scheduler objects. The API server listens on
# loopback only, so the pod uses the host's network and talks to 127.0.0.1.
render() {
	"$HELM_BIN/helm" template "$RELEASE" "$REPO_ROOT/deployments/helm/tangram" --namespace "$NAMESPACE" \
		--set scheduler.enabled=true \
		--set scheduler.hostNetwork=true \
		--set "scheduler.securePort=$SECURE_PORT" \
		--set "scheduler.policy=$POLICY" \
		--set-json "scheduler.extraEnv=$LOOPBACK_API_ENV" \
		--show-only templates/scheduler.yaml --show-only templates/scheduler-rbac.yaml
}

image_present() {
	"$CONTAINERD_BIN/ctr" --address "$CONTAINERD_SOCK" -n k8s.io images ls -q 2>/dev/null | grep -qx "$IMAGE"
}

# diagnose prints what the cluster knows about a scheduler that is not ready.
diagnose() {
	K -n "$NAMESPACE" get pods -l app.kubernetes.io/component=scheduler -o wide >&2 || true
	K -n "$NAMESPACE" describe pods -l app.kubernetes.io/component=scheduler 2>/dev/null | tail -n 25 >&2 || true
	K -n "$NAMESPACE" logs "deployment/$DEPLOYMENT" --tail=40 >&2 || true
}

start() {
	need_root
	[ -f "$KUBECONFIG_FILE" ] || die "no cluster: $KUBECONFIG_FILE is missing; run 'make cluster-up' first"
	[ -x "$HELM_BIN/helm" ] || die "helm is missing at $HELM_BIN/helm (hack/local-cluster/build-binaries.sh helm builds it)"
	if ! image_present; then
		log "image $IMAGE is not in the cluster's containerd; building and importing the images"
		"$REPO_ROOT/hack/images/build-images.sh" --import --allow-unpinned-base || die "building the images failed"
		image_present || die "image $IMAGE is still missing after hack/images/build-images.sh --import"
	fi
	local manifest
	manifest="$(render)" || die "helm template of the chart's scheduler failed"
	log "deploying tangram-scheduler from the chart (schedulerName tangram, policy $POLICY, host port $SECURE_PORT)"
	K create namespace "$NAMESPACE" --dry-run=client -o yaml | K apply -f - >/dev/null ||
		die "creating namespace $NAMESPACE failed (is the API server up? 'make cluster-up' starts it)"
	K apply -f - <<<"$manifest" >&2 || die "applying the chart's scheduler objects failed"
	if ! K -n "$NAMESPACE" rollout status "deployment/$DEPLOYMENT" --timeout=180s >&2; then
		diagnose
		die "tangram-scheduler did not become ready within 180s"
	fi
	# Ready means its informers synced; it schedules once it holds its Lease.
	local i holder=""
	for ((i = 0; i < 60; i++)); do
		holder="$(K -n "$NAMESPACE" get lease "$DEPLOYMENT" -o jsonpath='{.spec.holderIdentity}' 2>/dev/null || true)"
		[ -n "$holder" ] && break
		sleep 1
	done
	[ -n "$holder" ] || { diagnose; die "tangram-scheduler holds no Lease $NAMESPACE/$DEPLOYMENT after 60s"; }
	info "tangram-scheduler is ready and leads ($holder)"
}

stop() {
	[ -f "$KUBECONFIG_FILE" ] || return 0
	render | K delete --ignore-not-found --wait=true --timeout=60s -f - >&2 || true
	K -n "$NAMESPACE" delete lease "$DEPLOYMENT" --ignore-not-found >/dev/null 2>&1 || true
}

case "${1:-}" in
start) start ;;
stop) stop ;;
status) K -n "$NAMESPACE" get deployment "$DEPLOYMENT" -o wide ;;
logs) exec "$KUBECTL" --kubeconfig "$KUBECONFIG_FILE" -n "$NAMESPACE" logs "deployment/$DEPLOYMENT" --tail="${LINES:-100}" ;;
*) die "usage: $0 start|stop|status|logs" ;;
esac
