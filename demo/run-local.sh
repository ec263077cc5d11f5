#!/usr/bin/env bash
# `make demo`: Tangram end to end on this machine, no Docker and no registry.
# Brings up the local Kubernetes 1.37 cluster (hack/local-cluster), installs
# the Helm chart with a fake DGX H100 (8 x 80 GiB, NVLink), runs the e2e specs
# labelled demo (test/e2e/demo_test.go), which apply the demo specs one by one,
# check them and narrate what each pod got, then shows the cluster-wide view.
# Exits non-zero when a scenario does not behave as its spec says.
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
	TANGRAM_BIN_DIR="$CLUSTER_DIR/bin"
	;;
kind)
	source "$REPO_ROOT/hack/kind/lib.sh"
	set +o errexit # hack/kind/lib.sh turned it on again
	kind_lock
	KUBECONFIG_FILE="$KIND_KUBECONFIG"
	NODE_NAME="$KIND_CLUSTER-control-plane"
	TANGRAM_BIN_DIR="$KIND_CACHE/demo-bin"
	# Teardown also on failure or interrupt; its own failure fails the demo.
	[ -n "${DEMO_KEEP_CLUSTER:-}" ] ||
		trap 'rc=$?; "$REPO_ROOT/hack/kind/down.sh" || rc=1; exit $rc' EXIT
	;;
*) die "DEMO_CLUSTER=$DEMO_CLUSTER: want local or kind" ;;
esac
PROFILE="${DEMO_PROFILE:-dgx-h100}"
EXTRA_NODE=demo-gpu-node-2
K() { "$KUBECTL" --kubeconfig "$KUBECONFIG_FILE" "$@"; }
H() { "$HELM_BIN/helm" --kubeconfig "$KUBECONFIG_FILE" "$@"; }
total_start="$(now_s)"
DEMO_FAILURES=0
# Ginkgo's report of the scenarios, kept after the cluster is gone.
DEMO_LOG_DIR="$CACHE_ROOT/demo"

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
	"$REPO_ROOT/hack/images/build-images.sh" --import --allow-unpinned-base || die "building or importing images failed"
else
	step "1/4  Local Kubernetes $KUBE_VERSION cluster (hack/local-cluster)"
	make -C "$REPO_ROOT" --no-print-directory cluster-up || die "make cluster-up failed (logs: $LOG_DIR)"
fi
say "cluster ready in $(elapsed "$t")"

# node_devices: the names of the devices the GPU node's slices publish.
node_devices() {
	K get resourceslices --field-selector "spec.nodeName=$NODE_NAME,spec.driver=$DRIVER" \
		-o go-template='{{range .items}}{{range .spec.devices}}{{.name}}{{"\n"}}{{end}}{{end}}'
}
node_publishes_partitions() { node_devices | grep -q -- '-mig-'; }
node_publishes_no_partition() {
	local names
	names="$(node_devices)" && [ -n "$names" ] && ! grep -q -- '-mig-' <<<"$names"
}

# --- 2. chart -----------------------------------------------------------------
step "2/4  helm install tangram (fake GPU profile $([ "$DEMO_CLUSTER" = local ] && echo "mig-h100 for the MIG scenario, then $PROFILE" || echo "$PROFILE"))"
t="$(now_s)"
H version --short >/dev/null 2>&1 || die "helm is missing at $HELM_BIN/helm (hack/local-cluster/build-binaries.sh helm builds it)"
# The local cluster installs the chart the way every test stage does
# (hack/local-cluster/chart.sh: pods on the host network talking to the API
# server on 127.0.0.1, the plugin's state under the cluster directory, the
# controller with its webhook, tangram-scheduler for the packing scenarios).
# Its webhook is opt-in per namespace for the e2e suite; the demo's mistake
# scenario needs it everywhere. Fake GPUs enforce nothing (shareEnforcement
# "advisory"): the default shared class runs shares there and says so, the
# hard class (hard-shared-gpu.tangram.dev) takes none (scenario 11).
# The local cluster starts on the fake profile mig-h100 (values/mig.yaml) for
# the MIG scenario, which step 3 runs first before going back to $PROFILE.
if [ "$DEMO_CLUSTER" = local ]; then
	env -u TANGRAM_FAKE_PROFILE "$REPO_ROOT/hack/local-cluster/chart.sh" install -f "$CHART_VALUES_DIR/mig.yaml" \
		--set-json 'controller.webhook.namespaceSelector={}' || die "installing the chart failed (logs: hack/local-cluster/chart.sh logs plugin)"
	poll 90 "node $NODE_NAME publishes MIG partitions" node_publishes_partitions ||
		die "node $NODE_NAME publishes no MIG partition on profile mig-h100"
else
	# kind: the same cluster shape as the local one (the node's loopback
	# API, no kube-proxy: host-network.yaml), without the local cluster's
	# host state directories. GPUs: a fake profile, or with KIND_GPUS=mock
	# the real-GPU code path (NVML, nvcdi, MPS control) over the mock driver
	# root mounted into the node (mock-driver-root.yaml).
	gpu_args=(--set "fakeGPU.profile=$PROFILE")
	if [ "$KIND_GPUS" = mock ]; then
		gpu_args=(-f "$CHART_VALUES_DIR/mock-driver-root.yaml" --set "driverRoot=$KIND_MOCK_DRIVER_ROOT"
			--set-json "kubeletPlugin.extraEnv=${LOOPBACK_API_ENV%]},{\"name\":\"TANGRAM_MOCK_NVML_STATE_DIR\",\"value\":\"$KIND_MOCK_NVML_STATE_DIR\"}]")
	fi
	demo_install_chart -f "$CHART_VALUES_DIR/host-network.yaml" "${gpu_args[@]}" ||
		{
			K -n "$RELEASE_NAMESPACE" get pods -o wide >&2
			K -n "$RELEASE_NAMESPACE" logs -l app.kubernetes.io/component=kubelet-plugin --tail=40 >&2
			die "installing the chart failed"
		}
fi
say "$(H list -n "$RELEASE_NAMESPACE" --filter "^$RELEASE\$" --short) installed; its pods:"
K -n "$RELEASE_NAMESPACE" get pods -o wide | sed 's/^/     /'
demo_wait_slices 90 || die "the kubelet plugin published no GPUs"
say "chart ready in $(elapsed "$t")"

# --- 3. scenarios -------------------------------------------------------------
# First MIG (local cluster only, where step 2 installed the chart on the fake
# profile mig-h100; the kind demo leaves it out): the e2e spec labelled mig
# (test/e2e/mig_test.go) narrating what each pod got, then the chart back on
# $PROFILE for the other scenarios, once the node's slices no longer carry
# partitions: one plugin restart more than without MIG.
mkdir -p "$TANGRAM_BIN_DIR" "$DEMO_LOG_DIR"
(cd "$REPO_ROOT" && go_static test -c -tags e2e -o "$TANGRAM_BIN_DIR/e2e.test" ./test/e2e) || die "building the e2e suite (test/e2e) failed"
# The suite finds the chart and demo/specs from its working directory
# (internal/reporoot), wherever this script was started.
cd "$REPO_ROOT"
if [ "$DEMO_CLUSTER" = local ]; then
	step "3/4  MIG partitions (fake profile mig-h100; checked by test/e2e/mig_test.go)"
	t="$(now_s)"
	mig_rc=0
	"$TANGRAM_BIN_DIR/e2e.test" --kubeconfig "$KUBECONFIG_FILE" --gpu-node "$NODE_NAME" \
		--release-namespace "$RELEASE_NAMESPACE" --helm-release "$RELEASE" \
		--health-event-cmd "$REPO_ROOT/hack/local-cluster/chart.sh health-event" --demo-narrate \
		-ginkgo.label-filter=mig -ginkgo.v -ginkgo.no-color -ginkgo.timeout=10m >"$DEMO_LOG_DIR/demo-mig-e2e.log" || mig_rc=$?
	if [ "$mig_rc" -ne 0 ]; then
		DEMO_FAILURES=$((DEMO_FAILURES + 1))
		sed -n '/^Summarizing/,$p' "$DEMO_LOG_DIR/demo-mig-e2e.log" | sed 's/^/     /'
		say "the suite's whole report: $DEMO_LOG_DIR/demo-mig-e2e.log"
	fi
	say "the chart back on fake profile $PROFILE for the other scenarios"
	TANGRAM_FAKE_PROFILE="$PROFILE" "$REPO_ROOT/hack/local-cluster/chart.sh" install \
		--set-json 'controller.webhook.namespaceSelector={}' || die "installing the chart back on profile $PROFILE failed"
	poll 90 "node $NODE_NAME publishes whole cards only" node_publishes_no_partition ||
		die "node $NODE_NAME still publishes MIG partitions after going back to profile $PROFILE"
	say "MIG done in $(elapsed "$t")"
fi

# The scenarios are the e2e specs labelled demo (test/e2e/demo_test.go): they
# apply demo/specs one by one, check each with Gomega and narrate on stderr.
# Ginkgo's own report (every step, and a failure's details) goes to a log.
step "3/4  Demo scenarios (demo/specs, checked by test/e2e/demo_test.go)"
t="$(now_s)"
report="$DEMO_LOG_DIR/demo-e2e.log"
scenarios_rc=0
# On the local cluster the suite runs on the GPU node, so the pods' PIDs it
# reads are the plugin's: the fake cards can report them as running.
local_args=()
if [ "$DEMO_CLUSTER" = local ]; then
	local_args+=(--fake-processes-cmd "$REPO_ROOT/hack/local-cluster/chart.sh fake-processes")
fi
"$TANGRAM_BIN_DIR/e2e.test" --kubeconfig "$KUBECONFIG_FILE" --gpu-node "$NODE_NAME" \
	--release-namespace "$RELEASE_NAMESPACE" --helm-release "$RELEASE" \
	--demo-specs "$SPEC_DIR" --demo-extra-node "$EXTRA_NODE" --demo-extra-profile "$PROFILE" \
	--demo-keep --demo-narrate "${local_args[@]}" \
	-ginkgo.label-filter=demo -ginkgo.v -ginkgo.no-color -ginkgo.timeout=20m >"$report" || scenarios_rc=$?
if [ "$scenarios_rc" -ne 0 ]; then
	DEMO_FAILURES=$((DEMO_FAILURES + 1))
	sed -n '/^Summarizing/,$p' "$report" | sed 's/^/     /'
	say "the suite's whole report: $report"
fi
say "scenarios done in $(elapsed "$t")"

# --- 4. cluster view ----------------------------------------------------------
step "4/4  Cluster-wide view: kubectl tangram status"
mkdir -p "$TANGRAM_BIN_DIR"
ln -sf "$KUBECTL" "$TANGRAM_BIN_DIR/kubectl"
(cd "$REPO_ROOT" && go_static build -o "$TANGRAM_BIN_DIR/kubectl-tangram" ./cmd/kubectl-tangram) ||
	die "building kubectl-tangram failed"
# kubectl passes no flags to plugins placed before the plugin's name.
PATH="$TANGRAM_BIN_DIR:$PATH" KUBECONFIG="$KUBECONFIG_FILE" kubectl tangram status ||
	fail "kubectl tangram status failed"

if [ "$DEMO_FAILURES" -eq 0 ]; then
	step "Done in $(elapsed "$total_start"): every scenario behaved as its spec says"
else
	step "Done in $(elapsed "$total_start"): $DEMO_FAILURES step(s) FAILED (scenarios marked ✘ above)"
fi
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
