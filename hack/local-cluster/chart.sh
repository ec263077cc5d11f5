#!/usr/bin/env bash
# The one way the local cluster's test stages deploy Tangram: the Helm chart
# (deployments/helm/tangram) with the images cluster-up built and imported,
# and the controls the tests need around the chart's kubelet plugin pod.
#   chart.sh install [HELM_ARGS...]  helm upgrade --install with the local
#       cluster's values (below), then HELM_ARGS (later -f and --set win);
#       waits until the plugin published its slices, the webhook has its CA
#       and tangram-scheduler leads
#   chart.sh kill-plugin     SIGKILL the plugin container's process on this
#       node (a crash: no chance to clean up); the kubelet restarts it
#   chart.sh wait-plugin [TIMEOUT_SECONDS]  return once a live plugin
#       container on this node is Ready (default 120 s)
#   chart.sh health-event FLAGS...  `dra-kubelet-plugin health-event FLAGS`
#       inside the plugin pod (docs/health.md)
#   chart.sh fake-processes FLAGS... `dra-kubelet-plugin fake-processes
#       FLAGS` inside the plugin pod (docs/observability.md)
#   chart.sh uninstall | status | logs [plugin|controller|scheduler]
# The local cluster's values are files of the repository,
# deployments/helm/values/host-network.yaml and local.yaml (every pod on the
# host network talking to the API server on 127.0.0.1, fake GPUs, the
# controller with its GpuConfig webhook opt-in per namespace,
# tangram-scheduler on host port 10359, metrics on 9400 and 9401 for
# prometheus.sh); only the plugin's state directories, under $CLUSTER_DIR
# (down.sh removes them), are set here.
# Settings (environment):
#   TANGRAM_FAKE_PROFILE      fake GPU profile (default: local.yaml's, dgx-h100)
#   TANGRAM_SCHEDULER_POLICY  packing policy of tangram-scheduler (default: the chart's, tangram)
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

K() { "$KUBECTL" --kubeconfig "$KUBECONFIG_FILE" "$@"; }
PLUGIN_SELECTOR=app.kubernetes.io/component=kubelet-plugin
IMAGES=(dra-kubelet-plugin dra-controller tangram-scheduler)

need_cluster() {
	[ -f "$KUBECONFIG_FILE" ] || die "no cluster: $KUBECONFIG_FILE is missing; run 'make cluster-up' first"
}

image_present() { # image_present NAME: localhost/tangram/NAME:dev is in the node's containerd
	"$CONTAINERD_BIN/ctr" --address "$CONTAINERD_SOCK" -n k8s.io images ls -q 2>/dev/null | grep -qx "localhost/tangram/$1:${IMAGE_TAG:-dev}"
}

# ensure_images: cluster-up built and imported every image, skipping the
# ones whose command did not build; build those again here, where a failure
# is fatal and shows the compiler's message.
ensure_images() {
	local name missing=()
	for name in "${IMAGES[@]}"; do image_present "$name" || missing+=(--only "$name"); done
	[ "${#missing[@]}" -eq 0 ] && return 0
	log "building and importing the missing images (${missing[*]})"
	"$REPO_ROOT/hack/images/build-images.sh" --import --allow-unpinned-base "${missing[@]}" ||
		die "building the chart's images failed (hack/images/build-images.sh)"
}

slices_published() {
	[ -n "$(K get resourceslices --field-selector "spec.nodeName=$NODE_NAME,spec.driver=gpu.tangram.dev" -o name 2>/dev/null)" ]
}

ca_bundle_set() {
	[ -n "$(K get validatingwebhookconfiguration "$RELEASE-controller-gpuconfig" -o jsonpath='{.webhooks[0].clientConfig.caBundle}' 2>/dev/null)" ]
}

scheduler_leads() {
	[ -n "$(K -n "$RELEASE_NAMESPACE" get lease "$RELEASE-scheduler" -o jsonpath='{.spec.holderIdentity}' 2>/dev/null)" ]
}

# diagnose: what the cluster knows about the release's pods.
diagnose() {
	K -n "$RELEASE_NAMESPACE" get pods -o wide >&2 || true
	K -n "$RELEASE_NAMESPACE" describe pods 2>/dev/null | grep -A12 '^Events:' | tail -n 40 >&2 || true
	K -n "$RELEASE_NAMESPACE" logs -l "$PLUGIN_SELECTOR" --tail=40 >&2 || true
}

install() {
	need_root
	need_cluster
	[ -x "$HELM_BIN/helm" ] || die "helm is missing at $HELM_BIN/helm (hack/local-cluster/build-binaries.sh helm builds it)"
	ensure_images
	mkdir -p "$PLUGIN_STATE_DIR" "$PLUGIN_MPS_ROOT" "$CDI_DIR"
	local env_sets=()
	[ -z "${TANGRAM_FAKE_PROFILE:-}" ] || env_sets+=(--set "fakeGPU.profile=$TANGRAM_FAKE_PROFILE")
	[ -z "${TANGRAM_SCHEDULER_POLICY:-}" ] || env_sets+=(--set "scheduler.policy=$TANGRAM_SCHEDULER_POLICY")
	log "helm upgrade --install $RELEASE (namespace $RELEASE_NAMESPACE, values host-network.yaml local.yaml${env_sets[*]:+ ${env_sets[*]}}${*:+, extra: $*})"
	# helm's --wait (v4: the watcher) returns once every object is current,
	# the plugin DaemonSet rolled out on every node and the Deployments ready.
	if ! "$HELM_BIN/helm" --kubeconfig "$KUBECONFIG_FILE" upgrade --install "$RELEASE" "$CHART_DIR" \
		--namespace "$RELEASE_NAMESPACE" --create-namespace --wait --timeout 5m \
		-f "$CHART_VALUES_DIR/host-network.yaml" -f "$CHART_VALUES_DIR/local.yaml" \
		--set "kubeletPlugin.hostPaths.stateDir=$PLUGIN_STATE_DIR" \
		--set "kubeletPlugin.hostPaths.mpsRoot=$PLUGIN_MPS_ROOT" \
		"${env_sets[@]}" \
		"$@" >/dev/null; then
		diagnose
		die "helm upgrade --install of the chart failed"
	fi
	poll 90 "the plugin published its ResourceSlices" slices_published ||
		{ diagnose; die "no ResourceSlice from node $NODE_NAME after 90s"; }
	# Objects that exist only with the controller and the scheduler enabled
	# (a caller may turn them off).
	if K -n "$RELEASE_NAMESPACE" get deployment "$RELEASE-controller" >/dev/null 2>&1 &&
		K get validatingwebhookconfiguration "$RELEASE-controller-gpuconfig" >/dev/null 2>&1; then
		poll 60 "the controller set the webhook's caBundle" ca_bundle_set ||
			{ diagnose; die "the controller did not set the caBundle of $RELEASE-controller-gpuconfig within 60s"; }
	fi
	if K -n "$RELEASE_NAMESPACE" get deployment "$RELEASE-scheduler" >/dev/null 2>&1; then
		# Ready means its informers synced; it schedules once it holds its Lease.
		poll 60 "tangram-scheduler leads (Lease $RELEASE_NAMESPACE/$RELEASE-scheduler)" scheduler_leads ||
			{ diagnose; die "tangram-scheduler holds no Lease after 60s"; }
	fi
}

kill_plugin() {
	need_root
	local ids id pid i
	ids="$(plugin_containers)" || die "crictl cannot list containers (is the cluster up?)"
	[ -n "$ids" ] || die "no running plugin container on $NODE_NAME to kill"
	for id in $ids; do
		pid="$(CRI inspect -o go-template --template '{{.info.pid}}' "$id")" || die "crictl inspect $id failed"
		[ -n "$pid" ] && [ "$pid" -gt 1 ] || die "no process ID for plugin container $id"
		info "killing the kubelet plugin (container ${id:0:13}, pid $pid) with SIGKILL"
		kill -KILL "$pid" 2>/dev/null || true
	done
	# Gone before returning, so wait-plugin cannot mistake it for the live one.
	for ((i = 0; i < 100; i++)); do
		[ -z "$(plugin_containers | grep -Fx -f <(echo "$ids") || true)" ] && return 0
		sleep 0.1
	done
	die "the killed plugin container is still running after 10s"
}

# plugin_ready: the node's plugin pod reports a Ready container that is
# running now (right after a kill the API still shows the dead one as Ready).
plugin_ready() {
	local running ready
	running="$(plugin_containers)" || return 1
	ready="$(K -n "$RELEASE_NAMESPACE" get pods -l "$PLUGIN_SELECTOR" --field-selector "spec.nodeName=$NODE_NAME" \
		-o jsonpath='{range .items[*]}{range .status.containerStatuses[?(@.ready==true)]}{.containerID}{"\n"}{end}{end}')" || return 1
	local id
	for id in $running; do
		grep -q "://$id" <<<"$ready" && return 0
	done
	return 1
}

wait_plugin() {
	need_cluster
	local timeout="${1:-120}"
	poll "$timeout" "the kubelet plugin on $NODE_NAME is Ready" plugin_ready && return 0
	diagnose
	die "the kubelet plugin on $NODE_NAME is not Ready after ${timeout}s"
}

# plugin_pod: the Ready plugin pod on this node.
plugin_pod() {
	K -n "$RELEASE_NAMESPACE" get pods -l "$PLUGIN_SELECTOR" --field-selector "spec.nodeName=$NODE_NAME" \
		-o jsonpath='{range .items[*]}{.metadata.name}{" "}{.status.containerStatuses[0].ready}{"\n"}{end}' |
		awk '$2 == "true" {print $1; exit}'
}

# plugin_exec COMMAND FLAGS...: `dra-kubelet-plugin COMMAND --state-dir
# <the plugin's> FLAGS` in the Ready plugin pod of this node (health-event,
# fake-processes).
plugin_exec() {
	need_cluster
	local pod state_dir command="$1"
	shift
	pod="$(plugin_pod)"
	[ -n "$pod" ] || die "no Ready plugin pod on $NODE_NAME (chart.sh install deploys it)"
	# The state directory has the same path in the pod as on the host.
	state_dir="$(K -n "$RELEASE_NAMESPACE" get pod "$pod" -o jsonpath='{.spec.containers[0].args}' |
		grep -o -- '--state-dir=[^",]*' | cut -d= -f2)"
	[ -n "$state_dir" ] || die "plugin pod $pod has no --state-dir argument"
	exec "$KUBECTL" --kubeconfig "$KUBECONFIG_FILE" -n "$RELEASE_NAMESPACE" exec "$pod" -c plugin -- \
		/dra-kubelet-plugin "$command" --state-dir "$state_dir" "$@"
}

case "${1:-}" in
install)
	shift
	install "$@"
	;;
kill-plugin) kill_plugin ;;
wait-plugin) wait_plugin "${2:-120}" ;;
health-event | fake-processes)
	plugin_exec "$@"
	;;
uninstall)
	need_cluster
	"$HELM_BIN/helm" --kubeconfig "$KUBECONFIG_FILE" uninstall "$RELEASE" --namespace "$RELEASE_NAMESPACE" --wait --timeout 3m
	;;
status)
	need_cluster
	K -n "$RELEASE_NAMESPACE" get pods -o wide
	;;
logs)
	need_cluster
	case "${2:-plugin}" in
	plugin) exec "$KUBECTL" --kubeconfig "$KUBECONFIG_FILE" -n "$RELEASE_NAMESPACE" logs "daemonset/$RELEASE-kubelet-plugin" --tail="${LINES:-100}" ;;
	controller | scheduler) exec "$KUBECTL" --kubeconfig "$KUBECONFIG_FILE" -n "$RELEASE_NAMESPACE" logs "deployment/$RELEASE-$2" --tail="${LINES:-100}" ;;
	*) die "logs of plugin, controller or scheduler, not $2" ;;
	esac
	;;
*) die "usage: $0 install [HELM_ARGS...] | kill-plugin | wait-plugin [TIMEOUT] | health-event FLAGS... | fake-processes FLAGS... | uninstall | status | logs [plugin|controller|scheduler]" ;;
esac
