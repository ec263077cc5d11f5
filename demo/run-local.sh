#!/usr/bin/env bash
# `make demo`: Tangram end to end on this machine, no Docker and no registry.
# Brings up the local Kubernetes 1.37 cluster (hack/local-cluster), installs
# the Helm chart with a fake DGX H100 (8 x 80 GiB, NVLink), applies the demo
# specs one by one and shows what each pod got. Exits non-zero when a
# scenario does not behave as its spec says.
#
# With DEMO_CLUSTER=kind the same scenarios run on a one-node kind cluster
# built offline (hack/kind/up.sh: private Docker engine, node image built
# from source), torn down again at the end (`make kind-demo` on a machine
# without a Docker engine of its own, see docs/demo.md).
#
# Settings (environment):
#   DEMO_CLUSTER=local|kind  where to run (default local)
#   DEMO_REUSE_CLUSTER=1   keep a running cluster instead of recreating it
#   DEMO_KEEP_CLUSTER=1    kind only: leave the kind cluster running at the end
#   KIND_GPUS=mock         kind only: the mock NVIDIA driver root, not a fake profile
#   DEMO_PROFILE=NAME      fake GPU profile (default dgx-h100)
source "$(dirname "${BASH_SOURCE[0]}")/../hack/local-cluster/lib.sh"
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
set +o errexit # scenarios report their own failures; fatal steps use die

need_root
DEMO_CLUSTER="${DEMO_CLUSTER:-local}"
case "$DEMO_CLUSTER" in
local)
	# One cluster per machine: hold the harness's lock for the whole demo, so an
	# e2e run does not tear the cluster down under it (and waits its turn).
	cluster_lock
	# The local API server listens on loopback only.
	API_ENV="$LOOPBACK_API_ENV"
	TANGRAM_BIN_DIR="$CLUSTER_DIR/bin"
	;;
kind)
	source "$REPO_ROOT/hack/kind/lib.sh"
	set +o errexit # hack/kind/lib.sh turned it on again
	kind_lock
	KUBECONFIG_FILE="$KIND_KUBECONFIG"
	NODE_NAME="$KIND_CLUSTER-control-plane"
	# Without kube-proxy no Service IP leads anywhere: the pods on the node's
	# network reach the API server on the node's loopback.
	API_ENV='[{"name":"KUBERNETES_SERVICE_HOST","value":"127.0.0.1"},{"name":"KUBERNETES_SERVICE_PORT","value":"6443"}]'
	TANGRAM_BIN_DIR="$KIND_CACHE/demo-bin"
	# Teardown also on failure or interrupt; its own failure fails the demo.
	[ -n "${DEMO_KEEP_CLUSTER:-}" ] ||
		trap 'rc=$?; "$REPO_ROOT/hack/kind/down.sh" || rc=1; exit $rc' EXIT
	;;
*) die "DEMO_CLUSTER=$DEMO_CLUSTER: want local or kind" ;;
esac
PROFILE="${DEMO_PROFILE:-dgx-h100}"
# tangram-scheduler runs on the host network next to the default scheduler,
# which has 10259.
SCHEDULER_PORT=10359
EXTRA_NODE=demo-gpu-node-2
K() { "$KUBECTL" --kubeconfig "$KUBECONFIG_FILE" "$@"; }
H() { "$HELM_BIN/helm" --kubeconfig "$KUBECONFIG_FILE" "$@"; }
total_start="$(now_s)"
DEMO_FAILURES=0
shares_card=""

cluster_healthy() {
	[ -f "$KUBECONFIG_FILE" ] && K get --raw /readyz >/dev/null 2>&1 &&
		K wait --for=condition=Ready "node/$NODE_NAME" --timeout=1s >/dev/null 2>&1
}

# --- 1. cluster ---------------------------------------------------------------
t="$(now_s)"
if [ "$DEMO_CLUSTER" = kind ]; then
	step "1/4  kind cluster with Kubernetes $KUBE_VERSION, node image built from source (hack/kind)"
	if [ -n "${DEMO_REUSE_CLUSTER:-}" ] && cluster_healthy; then
		say "reusing the running kind cluster (DEMO_REUSE_CLUSTER=1)"
	else
		"$REPO_ROOT/hack/kind/up.sh" || die "hack/kind/up.sh failed"
	fi
elif [ -n "${DEMO_REUSE_CLUSTER:-}" ] && cluster_healthy; then
	step "1/4  Local Kubernetes $KUBE_VERSION cluster (hack/local-cluster)"
	say "reusing the running cluster (DEMO_REUSE_CLUSTER=1)"
	# What an e2e run (KEEP_CLUSTER=1) leaves would clash with the chart's
	# plugin, controller and scheduler: the host-process plugin and
	# controller hold the same host ports, and scheduler.sh's objects have
	# the chart's names but no Helm owner, so helm would refuse to install.
	"$REPO_ROOT/hack/local-cluster/plugin.sh" stop >/dev/null 2>&1
	"$REPO_ROOT/hack/local-cluster/controller.sh" stop >/dev/null 2>&1
	if K -n "$RELEASE_NAMESPACE" get deployment "$RELEASE-scheduler" >/dev/null 2>&1 &&
		[ -z "$(K -n "$RELEASE_NAMESPACE" get deployment "$RELEASE-scheduler" -o jsonpath='{.metadata.annotations.meta\.helm\.sh/release-name}')" ]; then
		say "removing the tangram-scheduler that hack/local-cluster/scheduler.sh deployed"
		"$REPO_ROOT/hack/local-cluster/scheduler.sh" stop >/dev/null 2>&1
	fi
	"$REPO_ROOT/hack/images/build-images.sh" --import --allow-unpinned-base || die "building or importing images failed"
else
	step "1/4  Local Kubernetes $KUBE_VERSION cluster (hack/local-cluster)"
	make -C "$REPO_ROOT" --no-print-directory cluster-up || die "make cluster-up failed (logs: $LOG_DIR)"
fi
say "cluster ready in $(elapsed "$t")"

# --- 2. chart -----------------------------------------------------------------
step "2/4  helm install tangram (fake GPU profile $PROFILE)"
t="$(now_s)"
H version --short >/dev/null 2>&1 || die "helm is missing at $HELM_BIN/helm (hack/local-cluster/build-binaries.sh helm builds it)"
# The plugin, controller and scheduler pods use the node's network and talk
# to the API server on 127.0.0.1 ($API_ENV). tangram-scheduler (the GPU packing
# scheduler) is enabled for the packing scenarios. On the local cluster the plugin's
# state lives under the cluster directory so that `make cluster-down` removes
# it with the cluster.
state_args=()
[ "$DEMO_CLUSTER" != local ] || state_args=(
	--set "kubeletPlugin.hostPaths.stateDir=$CLUSTER_DIR/plugin/state"
	--set "kubeletPlugin.hostPaths.mpsRoot=$CLUSTER_DIR/plugin/mps")
# GPUs: a fake profile, or on kind with KIND_GPUS=mock the real-GPU code path
# (NVML, nvcdi, MPS control) over the mock driver root mounted into the node.
gpu_args=(--set "fakeGPU.profile=$PROFILE")
if [ "$DEMO_CLUSTER" = kind ] && [ "$KIND_GPUS" = mock ]; then
	gpu_args=(--set "driverRoot=$KIND_MOCK_DRIVER_ROOT" --set kubeletPlugin.sysfsRoot=/driver-root/sys)
	API_ENV="${API_ENV%]},{\"name\":\"TANGRAM_MOCK_NVML_STATE_DIR\",\"value\":\"$KIND_MOCK_NVML_STATE_DIR\"}]"
fi
# Fake GPUs enforce nothing (shareEnforcement "advisory"), so the shared
# class must accept advisory nodes; on real GPUs leave the default (true).
demo_install_chart \
	"${gpu_args[@]}" \
	--set sharing.requireHardEnforcement=false \
	--set kubeletPlugin.hostNetwork=true \
	--set-json "kubeletPlugin.extraEnv=$API_ENV" \
	"${state_args[@]}" \
	--set controller.enabled=true \
	--set controller.webhook.enabled=true \
	--set controller.hostNetwork=true \
	--set controller.metricsPort=9401 \
	--set-json "controller.extraEnv=$API_ENV" \
	--set scheduler.enabled=true \
	--set scheduler.hostNetwork=true \
	--set "scheduler.securePort=$SCHEDULER_PORT" \
	--set-json "scheduler.extraEnv=$API_ENV" ||
	{
		K -n "$RELEASE_NAMESPACE" get pods -o wide >&2
		K -n "$RELEASE_NAMESPACE" logs -l app.kubernetes.io/component=kubelet-plugin --tail=40 >&2
		die "installing the chart failed"
	}
say "$(H list -n "$RELEASE_NAMESPACE" --filter "^$RELEASE\$" --short) installed; its pods:"
K -n "$RELEASE_NAMESPACE" get pods -o wide | sed 's/^/     /'
demo_wait_slices 90 || die "the kubelet plugin published no GPUs"
say "chart ready in $(elapsed "$t")"
say "admission policy (dry run, impersonating the plugin's service account):"
demo_check_slice_policy "$NODE_NAME"

# --- 3. scenarios -------------------------------------------------------------
step "3/4  Demo scenarios (demo/specs)"
t="$(now_s)"
if K get namespace "$DEMO_NAMESPACE" >/dev/null 2>&1; then
	say "removing the previous demo namespace"
	# A pod an interrupted demo left bound to the API-only node would hold
	# the namespace deletion forever: no kubelet ever confirms it is gone.
	K -n "$DEMO_NAMESPACE" delete pods --field-selector "spec.nodeName=$EXTRA_NODE" \
		--grace-period=0 --force --ignore-not-found >/dev/null 2>&1
	K delete namespace "$DEMO_NAMESPACE" --wait --timeout=180s >/dev/null || die "could not delete namespace $DEMO_NAMESPACE"
fi
K apply -f "$SPEC_DIR/00-namespace.yaml" >/dev/null || die "creating namespace $DEMO_NAMESPACE failed"

# scenario FILE LABEL TITLE [one-by-one|gang-first GANG]: print the spec's
# story, apply it (all at once unless asked otherwise, see demo/lib.sh).
scenario() {
	step "$3  ($(basename "$1"))"
	demo_describe_spec "$1"
	case "${4:-}" in
	one-by-one) demo_apply_pods_one_by_one "$1" 60 ;;
	gang-first) demo_apply_gang_then_members "$1" "$2" "$5" ;;
	*) K apply -f "$1" >/dev/null ;;
	esac || { fail "kubectl apply -f $1 failed"; return 1; }
}

devices_of() { demo_claim_devices "$1" | awk '{print $2}' | sort; }
attr_of() { # attr_of POOL/DEVICE ATTRIBUTE
	K get resourceslices --field-selector "spec.driver=$DRIVER" -o go-template="{{range .items}}{{if eq .spec.pool.name \"${1%%/*}\"}}{{range .spec.devices}}{{if eq .name \"${1#*/}\"}}{{with or (index .attributes \"$2\") (index .attributes \"$DRIVER/$2\")}}{{or .string .int .bool .version}}{{end}}{{end}}{{end}}{{end}}{{end}}"
}

scenario "$SPEC_DIR/01-whole-card.yaml" whole-card "Whole card"
if demo_wait_pods whole-card 120; then
	demo_show_pods whole-card
	[ "$(devices_of whole-card | wc -l)" -eq 1 ] && pass "one whole card" || fail "expected exactly one device"
else
	demo_show_pods whole-card
	fail "whole-card pod did not become Ready"
fi

scenario "$SPEC_DIR/02-memory-shares.yaml" memory-shares "Memory fractions packed onto one card" one-by-one
if demo_wait_pods memory-shares 120; then
	demo_show_pods memory-shares
	cards="$(devices_of memory-shares | sort -u)"
	whole="$(devices_of whole-card)"
	if [ "$(wc -l <<<"$cards")" -eq 1 ] && [ "$cards" != "$whole" ]; then
		shares_card="$cards"
		pass "all three shares on ${cards#*/}; the other cards stay whole"
	else
		fail "shares landed on: $(echo $cards) (want one card other than $whole)"
	fi
else
	demo_show_pods memory-shares
	fail "share pods did not become Ready"
fi

# The node's MPS daemon runs in a pod of its own (kubeletPlugin.mps.daemon=pod),
# so replacing the plugin's pod must leave it, and the shares, alone.
step "The plugin's pod is replaced; the MPS daemon pod and the shares stay"
# Found by the labels the plugin sets on it (its name is <fullname>-mps-<node>).
MPS_SELECTOR="app.kubernetes.io/component=mps-daemon,gpu.tangram.dev/node=$NODE_NAME"
# The daemon pods have a namespace of their own (kubeletPlugin.mps.namespace).
MPS_NAMESPACE="$RELEASE_NAMESPACE-mps"
pod_field() { K -n "$1" get pod "$2" -o jsonpath="$3" 2>/dev/null; }
share_restarts() { for p in share-a share-b share-c; do printf '%s=%s/%s ' "$p" "$(pod_field "$DEMO_NAMESPACE" "$p" '{.status.phase}')" "$(pod_field "$DEMO_NAMESPACE" "$p" '{.status.containerStatuses[0].restartCount}')"; done; }
MPS_POD=""
for ((i = 0; i < 60; i++)); do
	MPS_POD="$(K -n "$MPS_NAMESPACE" get pods -l "$MPS_SELECTOR" -o jsonpath='{.items[*].metadata.name}' 2>/dev/null)"
	[ -n "$MPS_POD" ] && [ "$(pod_field "$MPS_NAMESPACE" "$MPS_POD" '{.status.phase}')" = Running ] && break
	sleep 1
done
mps_uid="$(pod_field "$MPS_NAMESPACE" "$MPS_POD" '{.metadata.uid}')"
if [ -z "$MPS_POD" ] || [ "$(pod_field "$MPS_NAMESPACE" "$MPS_POD" '{.status.phase}')" != Running ]; then
	K -n "$MPS_NAMESPACE" get pods -o wide | sed 's/^/     /'
	fail "MPS daemon pod ${MPS_POD:-(none labelled $MPS_SELECTOR)} is not Running"
else
	say "MPS daemon pod $MPS_POD (uid $mps_uid); its log: $(K -n "$MPS_NAMESPACE" logs "$MPS_POD" --tail=1 2>/dev/null | sed 's/^[^]]*] //' | cut -c1-100)"
	shares_before="$(share_restarts)"
	old_plugin="$(K -n "$RELEASE_NAMESPACE" get pods -l app.kubernetes.io/component=kubelet-plugin -o jsonpath='{.items[*].metadata.name}')"
	say "deleting the plugin pod $old_plugin; shares before: $shares_before"
	K -n "$RELEASE_NAMESPACE" delete pod -l app.kubernetes.io/component=kubelet-plugin --wait=true --timeout=90s >/dev/null ||
		fail "deleting the plugin pod did not finish within 90s"
	new_plugin=""
	for ((i = 0; i < 120; i++)); do
		new_plugin="$(K -n "$RELEASE_NAMESPACE" get pods -l app.kubernetes.io/component=kubelet-plugin \
			-o jsonpath='{range .items[?(@.status.containerStatuses[0].ready==true)]}{.metadata.name}{end}' 2>/dev/null)"
		[ -n "$new_plugin" ] && [ "$new_plugin" != "$old_plugin" ] && break
		new_plugin=""
		sleep 1
	done
	# The new plugin replays its checkpoint: the shares are accounted again
	# and the daemon pod is adopted, not recreated.
	adopted=""
	for ((i = 0; i < 30; i++)); do
		[ -n "$new_plugin" ] && K -n "$RELEASE_NAMESPACE" logs "$new_plugin" 2>/dev/null | grep -q 'Adopting the MPS daemon pod' && { adopted=1; break; }
		sleep 1
	done
	mps_now="$(pod_field "$MPS_NAMESPACE" "$MPS_POD" '{.metadata.uid}')/$(pod_field "$MPS_NAMESPACE" "$MPS_POD" '{.status.phase}')/$(pod_field "$MPS_NAMESPACE" "$MPS_POD" '{.status.containerStatuses[0].restartCount}')"
	shares_after="$(share_restarts)"
	say "new plugin pod ${new_plugin:-(none Ready)}; MPS pod uid/phase/restarts $mps_now; shares after: $shares_after"
	if [ -z "$new_plugin" ]; then
		fail "the DaemonSet brought no Ready plugin pod within 120s"
	elif [ "$mps_now" != "$mps_uid/Running/0" ]; then
		fail "MPS daemon pod changed: $mps_now, want $mps_uid/Running/0"
	elif [ "$shares_after" != "$shares_before" ] || [[ "$shares_after" != *"share-c=Running/"* ]]; then
		fail "share pods changed: before $shares_before, after $shares_after"
	elif [ -z "$adopted" ]; then
		fail "the new plugin pod did not log that it adopted $MPS_POD"
	else
		pass "$new_plugin adopted $MPS_POD (same uid, 0 restarts); share-a/b/c kept running, no restarts"
	fi
fi

scenario "$SPEC_DIR/03-nvlink-pair.yaml" nvlink-pair "NVLink pair in one claim"
if demo_wait_pods nvlink-pair 120; then
	demo_show_pods nvlink-pair
	pair=($(devices_of nvlink-pair))
	if [ "${#pair[@]}" -eq 2 ]; then
		d0="$(attr_of "${pair[0]}" nvlinkDomain)" d1="$(attr_of "${pair[1]}" nvlinkDomain)"
		if [ -n "$d0" ] && [ "$d0" = "$d1" ]; then
			pass "${pair[0]#*/} and ${pair[1]#*/} share NVLink domain $d0"
		else
			fail "the pair's NVLink domains differ: '$d0' vs '$d1'"
		fi
	else
		fail "expected two devices in one claim, got ${#pair[@]}"
	fi
else
	demo_show_pods nvlink-pair
	fail "nvlink-pair pod did not become Ready"
fi

scenario "$SPEC_DIR/04-podgroup-gang.yaml" podgroup-gang "PodGroup gang: all or nothing"
if demo_wait_pods podgroup-gang 180; then
	demo_show_pods podgroup-gang
	if [ "$(devices_of podgroup-gang | sort -u | wc -l)" -eq 3 ]; then
		pass "all three members bound together, each with its own card"
	else
		fail "gang members do not hold three distinct cards"
	fi
else
	demo_show_pods podgroup-gang
	fail "the gang did not start"
fi

# The chart's GpuConfig webhook refuses the bad template when it is applied;
# the pod in the same file is created anyway and would wait for a template
# that never comes, so the demo removes it.
MISTAKE="$SPEC_DIR/05-mistake-bad-config.yaml"
step "A mistake: invalid GpuConfig  ($(basename "$MISTAKE"))"
demo_describe_spec "$MISTAKE"
if out="$(K apply -f "$MISTAKE" 2>&1)"; then
	fail "kubectl apply accepted the invalid GpuConfig (is the controller's webhook running?)"
	K delete -f "$MISTAKE" --ignore-not-found --wait=false >/dev/null 2>&1
else
	say "kubectl apply says:"
	grep -v ' created$\| unchanged$\| configured$' <<<"$out" | fold -s -w 100 | sed "s/^/     ${BAD}/; s/\$/${R}/"
	# The API server does not read opaque parameters: only the webhook says
	# "invalid gpu.tangram.dev config". Checked before the cleanup below,
	# which would delete a template that got through.
	if grep -q 'invalid gpu.tangram.dev config' <<<"$out" &&
		grep -q 'sharing.backend: Unsupported value: "vcuda"' <<<"$out" &&
		! K -n "$DEMO_NAMESPACE" get resourceclaimtemplate gpu-10gi-bad-backend >/dev/null 2>&1; then
		pass "refused when applied, by the controller's webhook; the message names the field and the valid values"
	else
		fail "the refusal does not come from the GpuConfig webhook or does not name sharing.backend"
	fi
	K delete -f "$MISTAKE" --ignore-not-found --wait=false >/dev/null 2>&1
fi
step "A second GPU node joins: $EXTRA_NODE (API only)"
say "a Node object without a kubelet: eight free 80 GiB H100s (fake $PROFILE), 64 CPUs, 512 GiB;"
say "the scheduler can place pods there, nothing ever starts them"
mkdir -p "$TANGRAM_BIN_DIR"
if (cd "$REPO_ROOT" && go build -o "$TANGRAM_BIN_DIR/dra-kubelet-plugin" ./cmd/dra-kubelet-plugin) &&
	demo_add_api_only_node "$EXTRA_NODE" "$PROFILE" "$TANGRAM_BIN_DIR/dra-kubelet-plugin"; then
	say "node $EXTRA_NODE publishes $(K get resourceslices --field-selector "spec.nodeName=$EXTRA_NODE,spec.driver=$DRIVER" \
		-o go-template='{{range .items}}{{range .spec.devices}}{{.name}} {{end}}{{end}}')"
	extra_node_ok=1
else
	fail "could not add the API-only node $EXTRA_NODE"
	extra_node_ok=""
fi


if [ -n "$extra_node_ok" ]; then
	scenario "$SPEC_DIR/06-packing-stock.yaml" packing-stock "Packing across nodes, part 1: the stock kube-scheduler"
	if stock_node="$(demo_pod_node next-share-stock 90)"; then
		demo_show_pods packing-stock
		if [ "$stock_node" = "$EXTRA_NODE" ]; then
			pass "default-scheduler bound it to $EXTRA_NODE: a fresh card broken on the empty node"
		else
			fail "default-scheduler bound it to $stock_node, not to the empty node $EXTRA_NODE"
		fi
	else
		demo_show_pods packing-stock
		fail "next-share-stock was not scheduled within 90s"
	fi
	# It never starts on an API-only node: remove it at once, then wait until
	# its claim (and with it the share) is gone, so both schedulers face the
	# same cluster.
	stock_claim="$(K -n "$DEMO_NAMESPACE" get pod next-share-stock -o jsonpath='{.status.resourceClaimStatuses[0].resourceClaimName}' 2>/dev/null)"
	K -n "$DEMO_NAMESPACE" delete pod next-share-stock --grace-period=0 --force --wait=true >/dev/null 2>&1
	if [ -n "$stock_claim" ] && ! K -n "$DEMO_NAMESPACE" wait --for=delete "resourceclaim/$stock_claim" --timeout=90s >/dev/null 2>&1; then
		fail "the claim $stock_claim of the deleted pod was not removed within 90s"
	fi
	say "removed next-share-stock; its share on $EXTRA_NODE is free again"

	scenario "$SPEC_DIR/07-packing-tangram.yaml" packing-tangram "Packing across nodes, part 2: tangram-scheduler"
	if demo_wait_pods packing-tangram 120; then
		demo_show_pods packing-tangram
		card="$(devices_of packing-tangram)"
		by="$(K -n "$DEMO_NAMESPACE" get events --field-selector involvedObject.name=next-share-tangram,reason=Scheduled \
			-o jsonpath='{.items[0].reportingComponent}{.items[0].source.component}' 2>/dev/null)"
		if [ "$(demo_pod_node next-share-tangram 1)" = "$NODE_NAME" ] && [ -n "$shares_card" ] && [ "$card" = "$shares_card" ]; then
			pass "${by:-tangram} packed it onto ${card#*/} next to share-a/b/c; $EXTRA_NODE stays whole"
		else
			fail "tangram-scheduler put it on ${card:-nothing} (node $(demo_pod_node next-share-tangram 1)), want ${shares_card:-the card of share-a/b/c} on $NODE_NAME"
		fi
	else
		demo_show_pods packing-tangram
		K -n "$RELEASE_NAMESPACE" logs "deployment/$RELEASE-scheduler" --tail=20 2>/dev/null | sed 's/^/     /'
		fail "next-share-tangram did not become Ready"
	fi
fi
step "The gang of 04 finishes (the demo deletes it): four cards are free for the next one"
K delete -f "$SPEC_DIR/04-podgroup-gang.yaml" --wait=true --timeout=90s >/dev/null 2>&1 ||
	fail "deleting the gang of 04 did not finish within 90s"

scenario "$SPEC_DIR/08-gpugang.yaml" gpugang "GpuGang: a gang in one object, run by the controller" gang-first finetune
gang_phase() { K -n "$DEMO_NAMESPACE" get gpugang finetune -o jsonpath='{.status.phase}' 2>/dev/null; }
if demo_wait_pods gpugang 180; then
	for ((i = 0; i < 30; i++)); do [ "$(gang_phase)" = Running ] && break; sleep 1; done
	demo_show_pods gpugang
	K -n "$DEMO_NAMESPACE" get gpugang finetune -o wide | sed 's/^/     /'
	gang_cards="$(devices_of gpugang | sort -u)"
	domains="$(for d in $gang_cards; do attr_of "$d" nvlinkDomain; echo; done | sort -u | grep -c .)"
	if [ "$(gang_phase)" = Running ] && [ "$(wc -l <<<"$gang_cards")" -eq 4 ] && [ "$domains" -eq 1 ]; then
		pass "GpuGang finetune is Running: two members, four cards, one NVLink domain"
	else
		fail "gang phase $(gang_phase), cards: $(echo $gang_cards), NVLink domains: $domains"
	fi
else
	demo_show_pods gpugang
	K -n "$DEMO_NAMESPACE" get gpugang finetune -o jsonpath='{.status.diagnosis}{"\n"}' | sed 's/^/     diagnosis: /'
	K -n "$RELEASE_NAMESPACE" logs "deployment/$RELEASE-controller" --tail=20 2>/dev/null | sed 's/^/     /'
	fail "the GpuGang's members did not become Ready"
fi

# The other outcome of sharing.requireHardEnforcement: a share that requires
# hard enforcement finds no card on fake (advisory) GPUs and says why.
scenario "$SPEC_DIR/11-hard-enforcement.yaml" hard-enforcement "Hard enforcement required, on advisory nodes"
mkdir -p "$TANGRAM_BIN_DIR"
ln -sf "$KUBECTL" "$TANGRAM_BIN_DIR/kubectl"
if (cd "$REPO_ROOT" && go build -o "$TANGRAM_BIN_DIR/kubectl-tangram" ./cmd/kubectl-tangram); then
	why=""
	for ((i = 0; i < 30; i++)); do
		why="$(PATH="$TANGRAM_BIN_DIR:$PATH" KUBECONFIG="$KUBECONFIG_FILE" kubectl tangram describe pod/needs-hard -n "$DEMO_NAMESPACE" 2>&1)"
		grep -q 'sharing.requireHardEnforcement' <<<"$why" && break
		sleep 1
	done
	phase="$(K -n "$DEMO_NAMESPACE" get pod needs-hard -o jsonpath='{.status.phase}' 2>/dev/null)"
	say "kubectl tangram describe pod/needs-hard:"
	fold -s -w 100 <<<"$why" | sed 's/^/     /'
	if [ "$phase" = Pending ] && grep -q 'shareEnforcement' <<<"$why" && grep -q 'sharing.requireHardEnforcement' <<<"$why"; then
		pass "Pending: the nodes publish shareEnforcement advisory; the reason names the chart value that would accept them"
	else
		fail "pod needs-hard is $phase; the explanation does not name shareEnforcement and sharing.requireHardEnforcement"
	fi
else
	fail "building kubectl-tangram failed"
fi
K delete -f "$SPEC_DIR/11-hard-enforcement.yaml" --ignore-not-found --wait=false >/dev/null 2>&1
say "scenarios done in $(elapsed "$t")"

# --- 4. cluster view ----------------------------------------------------------
step "4/4  Cluster-wide view: kubectl tangram status"
if [ -d "$REPO_ROOT/cmd/kubectl-tangram" ] && compgen -G "$REPO_ROOT/cmd/kubectl-tangram/*.go" >/dev/null; then
	mkdir -p "$TANGRAM_BIN_DIR"
	ln -sf "$KUBECTL" "$TANGRAM_BIN_DIR/kubectl"
	(cd "$REPO_ROOT" && go build -o "$TANGRAM_BIN_DIR/kubectl-tangram" ./cmd/kubectl-tangram) ||
		die "building kubectl-tangram failed"
	# kubectl passes no flags to plugins placed before the plugin's name.
	PATH="$TANGRAM_BIN_DIR:$PATH" KUBECONFIG="$KUBECONFIG_FILE" kubectl tangram status ||
		fail "kubectl tangram status failed"
else
	say "kubectl-tangram is not built yet; the claims instead:"
	K get resourceclaims -A
fi

step "Done in $(elapsed "$total_start") with $DEMO_FAILURES failed check(s)"
if [ "$DEMO_CLUSTER" = kind ]; then
	if [ -n "${DEMO_KEEP_CLUSTER:-}" ]; then
		cat <<EOF
   The kind cluster stays (DEMO_KEEP_CLUSTER=1). Look around:
     export PATH=$TANGRAM_BIN_DIR:\$PATH KUBECONFIG=$KUBECONFIG_FILE
     kubectl -n $DEMO_NAMESPACE get pods,resourceclaims -o wide
     kubectl tangram status
     DOCKER_HOST=unix://$TANGRAM_DOCKER_SOCK docker ps   # the kind node
   Tear down:
     hack/kind/down.sh      # the cluster, the kind network and the private Docker engine
EOF
	else
		say "tearing down the kind cluster and the private Docker engine (DEMO_KEEP_CLUSTER=1 keeps them)"
	fi
	[ "$DEMO_FAILURES" -eq 0 ]
	exit
fi
cat <<EOF
   Look around:
     export PATH=$TANGRAM_BIN_DIR:\$PATH KUBECONFIG=$KUBECONFIG_FILE
     kubectl get resourceslices,deviceclasses
     kubectl -n $DEMO_NAMESPACE get pods,resourceclaims -o wide
     kubectl -n $DEMO_NAMESPACE logs share-b          # what a share's container sees
     kubectl tangram status                           # who holds which card
     kubectl tangram describe pod/share-b -n $DEMO_NAMESPACE
     kubectl -n $DEMO_NAMESPACE get gpugangs -o wide     # gangs run by the controller
     kubectl -n $RELEASE_NAMESPACE logs ds/$RELEASE-kubelet-plugin
     kubectl -n $RELEASE_NAMESPACE logs deploy/$RELEASE-scheduler   # tangram-scheduler
     kubectl -n $RELEASE_NAMESPACE logs deploy/$RELEASE-controller  # dra-controller
     kubectl delete node $EXTRA_NODE                    # the API-only node, then its slices:
     kubectl delete resourceslices --field-selector spec.nodeName=$EXTRA_NODE
   Try your own: edit a spec in demo/specs and kubectl apply -f it.
   Tear down:
     kubectl delete namespace $DEMO_NAMESPACE   # the demo pods only
     make cluster-down                          # the whole local cluster
EOF
[ "$DEMO_FAILURES" -eq 0 ]
