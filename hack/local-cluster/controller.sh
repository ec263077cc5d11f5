#!/usr/bin/env bash
# Runs the Tangram dra-controller as a host process next to the local
# cluster's control plane (no image, no Deployment): applies the GpuGang CRD,
# registers its admission webhook by URL on loopback and waits until the
# controller has put its CA into that registration.
#   controller.sh start|stop|status|logs
# Settings (environment):
#   TANGRAM_CONTROLLER_WEBHOOK_PORT  loopback port of the webhook (default 9443)
#   TANGRAM_CONTROLLER_VERBOSITY     klog -v (default 2)
#
# The webhook only sees namespaces labelled tangram.dev/gpuconfig-webhook=enabled
# (and cluster-scoped DeviceClasses): the "Bad input" e2e scenario must get a
# bad GpuConfig past admission to check what the plugin does with it at
# prepare time, while the admission scenario labels its namespace.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

NAME=tangram-controller
CONTROLLER_BIN="$CLUSTER_DIR/bin/dra-controller"
WEBHOOK_PORT="${TANGRAM_CONTROLLER_WEBHOOK_PORT:-9443}"
WEBHOOK_CONFIG=tangram-gpuconfig
WEBHOOK_NAMESPACE=tangram
WEBHOOK_NS_LABEL=tangram.dev/gpuconfig-webhook
K() { "$KUBECTL" --kubeconfig "$KUBECONFIG_FILE" "$@"; }

build() {
	info "go build ./cmd/dra-controller"
	mkdir -p "$(dirname "$CONTROLLER_BIN")"
	(cd "$REPO_ROOT" && go build -o "$CONTROLLER_BIN.new" ./cmd/dra-controller) \
		|| die "building the controller failed (go build ./cmd/dra-controller)"
	mv "$CONTROLLER_BIN.new" "$CONTROLLER_BIN"
}

# webhook_config prints the ValidatingWebhookConfiguration; the controller
# fills in caBundle. The match conditions are the chart's (release tangram):
# only objects with a gpu.tangram.dev config are sent, the chart's own
# DeviceClasses are not.
webhook_config() {
	local ours="exists(c, c.?opaque.?driver.orValue('') == 'gpu.tangram.dev')"
	cat <<YAML
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingWebhookConfiguration
metadata:
  name: $WEBHOOK_CONFIG
webhooks:
  - name: gpuconfig.tangram.dev
    admissionReviewVersions: ["v1"]
    sideEffects: None
    failurePolicy: Fail
    matchPolicy: Equivalent
    timeoutSeconds: 5
    clientConfig:
      url: https://127.0.0.1:$WEBHOOK_PORT/validate
    namespaceSelector:
      matchLabels:
        $WEBHOOK_NS_LABEL: enabled
    rules:
      - apiGroups: ["resource.k8s.io"]
        apiVersions: ["*"]
        operations: ["CREATE", "UPDATE"]
        resources: ["resourceclaims", "resourceclaimtemplates", "deviceclasses"]
    matchConditions:
      - name: not-this-release-deviceclass
        expression: >-
          !(request.resource.resource == 'deviceclasses' &&
          object.metadata.?labels[?'app.kubernetes.io/instance'].orValue('') == "tangram" &&
          object.metadata.?labels[?'app.kubernetes.io/name'].orValue('') == "tangram")
      - name: has-gpu-tangram-dev-config
        expression: >-
          request.resource.resource == 'deviceclasses' ?
          object.spec.?config.orValue([]).$ours :
          request.resource.resource == 'resourceclaimtemplates' ?
          object.spec.spec.?devices.?config.orValue([]).$ours :
          object.spec.?devices.?config.orValue([]).$ours
YAML
}

ca_bundle_set() {
	[ -n "$(K get validatingwebhookconfiguration "$WEBHOOK_CONFIG" -o jsonpath='{.webhooks[0].clientConfig.caBundle}' 2>/dev/null)" ]
}

webhook_serves() {
	curl -ks --max-time 2 -o /dev/null "https://127.0.0.1:$WEBHOOK_PORT/validate"
}

start() {
	need_root
	[ -f "$KUBECONFIG_FILE" ] || die "no cluster: $KUBECONFIG_FILE is missing; run 'make cluster-up' first"
	if [ -n "$(proc_pid "$NAME")" ]; then
		info "$NAME already running (pid $(proc_pid "$NAME"))"
		return 0
	fi
	build
	info "applying the GpuGang CRD and the webhook registration"
	K apply -f "$REPO_ROOT/deployments/helm/tangram/crds/" >&2
	K wait --for=condition=Established --timeout=60s crd/gpugangs.tangram.dev >&2 \
		|| die "the GpuGang CRD did not become Established"
	K create namespace "$WEBHOOK_NAMESPACE" --dry-run=client -o yaml | K apply -f - >&2
	webhook_config | K apply -f - >&2
	log "starting the Tangram controller (webhook https://127.0.0.1:$WEBHOOK_PORT/validate)"
	start_proc "$NAME" "$CONTROLLER_BIN" \
		--kubeconfig "$KUBECONFIG_FILE" \
		--identity "$NAME" \
		--metrics-address 127.0.0.1:19090 \
		--healthz-address 127.0.0.1:51516 \
		--webhook-address "127.0.0.1:$WEBHOOK_PORT" \
		--webhook-namespace "$WEBHOOK_NAMESPACE" \
		--webhook-service tangram-controller-webhook \
		--webhook-config-name "$WEBHOOK_CONFIG" \
		-v "${TANGRAM_CONTROLLER_VERBOSITY:-2}"
	wait_until "$NAME" 60 "the controller is ready (/readyz)" curl -sf --max-time 2 http://127.0.0.1:51516/readyz
	wait_until "$NAME" 60 "the webhook serves on 127.0.0.1:$WEBHOOK_PORT" webhook_serves
	wait_until "$NAME" 60 "the controller set the webhook's caBundle" ca_bundle_set
}

# stop also removes the webhook registration, so a cluster left running
# (KEEP_CLUSTER) does not refuse claims while nobody answers.
stop() {
	stop_proc "$NAME" 10
	if [ -f "$KUBECONFIG_FILE" ]; then
		K delete validatingwebhookconfiguration "$WEBHOOK_CONFIG" --ignore-not-found --timeout=10s >/dev/null 2>&1 || true
	fi
}

case "${1:-}" in
start) start ;;
stop) stop ;;
status)
	pid="$(proc_pid "$NAME")"
	if [ -n "$pid" ]; then echo "running (pid $pid)"; else echo "not running"; exit 1; fi
	;;
logs) exec tail -n "${LINES:-100}" "$LOG_DIR/$NAME.log" ;;
*) die "usage: $0 start|stop|status|logs" ;;
esac
