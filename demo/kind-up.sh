#!/usr/bin/env bash
# The Tangram demo on kind (`make kind-demo`).
#   demo/kind-up.sh [--no-specs]
# Two paths:
# - offline (KIND_OFFLINE=1, or unset and no Docker engine answers `docker info`):
#   the demo/run-local.sh scenarios on a one-node kind cluster whose node
#   image is built from source, on a private Docker engine that this starts
#   and stops (hack/kind, docs/demo.md). Root only. --no-specs is ignored.
# - online (a Docker engine and internet), the rest of this script:
# Creates (or reuses) the kind cluster of demo/kind-config.yaml, builds our
# images as OCI archives (hack/images, no registry), loads them into every
# node with `kind load image-archive` and installs the Helm chart (kubelet
# plugin only) with fake DGX H100s on the workers; then it says how to apply
# demo/specs by hand (--no-specs: it does not).
#
# Needs: docker, kind, kubectl, helm (v3.8+ or v4) and go on PATH.
# Settings (environment):
#   KIND_CLUSTER_NAME   cluster name (default tangram)
#   KIND_NODE_IMAGE     node image of Kubernetes >= 1.37 (default: kind's own)
#   DEMO_PROFILE        fake GPU profile (default dgx-h100)
set -o errexit -o nounset -o pipefail
REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$REPO_ROOT/demo/lib.sh"

CLUSTER="${KIND_CLUSTER_NAME:-tangram}"
PROFILE="${DEMO_PROFILE:-dgx-h100}"
run_specs=1
[ "${1:-}" = "--no-specs" ] && run_specs=""

die() { printf 'ERROR: %s\n' "$*" >&2; exit 1; }
# KIND_OFFLINE=1 forces the offline path, KIND_OFFLINE=0 the online one.
offline="${KIND_OFFLINE:-}"
if [ -z "$offline" ]; then
	offline=1
	command -v docker >/dev/null && docker info >/dev/null 2>&1 && offline=0
fi
if [ "$offline" = 1 ]; then
	printf '==> no Docker engine of this machine answers (or KIND_OFFLINE is set): the offline kind demo (hack/kind)\n'
	DEMO_CLUSTER=kind exec "$REPO_ROOT/demo/run-local.sh"
fi
for tool in docker kind kubectl helm go; do
	command -v "$tool" >/dev/null || die "$tool is not on PATH; kind-up.sh needs docker, kind, kubectl, helm and go"
done
docker info >/dev/null 2>&1 || die "the Docker engine is not reachable (docker info failed); start it, or use 'make demo' on a machine without Docker"

KUBECONFIG_FILE="${KUBECONFIG_FILE:-$HOME/.kube/kind-$CLUSTER}"
K() { kubectl --kubeconfig "$KUBECONFIG_FILE" "$@"; }
H() { helm --kubeconfig "$KUBECONFIG_FILE" "$@"; }

step "kind cluster $CLUSTER"
if kind get clusters 2>/dev/null | grep -qx "$CLUSTER"; then
	say "reusing the existing cluster"
	kind export kubeconfig --name "$CLUSTER" --kubeconfig "$KUBECONFIG_FILE" >/dev/null
else
	mkdir -p "$(dirname "$KUBECONFIG_FILE")"
	kind create cluster --name "$CLUSTER" --config "$REPO_ROOT/demo/kind-config.yaml" \
		--kubeconfig "$KUBECONFIG_FILE" ${KIND_NODE_IMAGE:+--image "$KIND_NODE_IMAGE"} --wait 3m
fi
minor="$(K version -o json | sed -n 's/.*"minor": *"\([0-9]*\).*/\1/p' | tail -n 1)"
[ "${minor:-0}" -ge 37 ] || die "the cluster runs Kubernetes 1.${minor:-?}; Tangram's demo needs 1.37 or newer (set KIND_NODE_IMAGE to a 1.37 node image, e.g. one built with 'kind build node-image v1.37.0')"

step "images (hack/images → kind load image-archive)"
IMAGE_DIR="${TANGRAM_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/tangram}/images"
"$REPO_ROOT/hack/images/build-images.sh" --allow-unpinned-base
for archive in "$IMAGE_DIR"/dra-kubelet-plugin.tar "$IMAGE_DIR"/dra-controller.tar "$IMAGE_DIR"/gpu-info.tar; do
	[ -f "$archive" ] || continue
	say "kind load image-archive $(basename "$archive")"
	kind load image-archive "$archive" --name "$CLUSTER" >/dev/null
done

step "helm install tangram (fake GPU profile $PROFILE on the workers)"
# deployments/helm/values/kind.yaml: the plugin on the workers labelled
# tangram.dev/fake-gpus, fake DGX H100s (DEMO_PROFILE replaces the profile).
demo_install_chart -f "$CHART_VALUES_DIR/kind.yaml" ${DEMO_PROFILE:+--set "fakeGPU.profile=$DEMO_PROFILE"}
demo_wait_slices 120

if [ -z "$run_specs" ]; then
	say "cluster ready; try: kubectl --kubeconfig $KUBECONFIG_FILE apply -f demo/specs/"
	exit 0
fi

step "demo specs"
say "the chart runs the kubelet plugin only; apply the specs by hand, e.g.:"
say "  kubectl --kubeconfig $KUBECONFIG_FILE apply -f demo/specs/00-namespace.yaml -f demo/specs/01-whole-card.yaml"
say "the narrated, checked scenarios (test/e2e/demo_test.go) need the controller and tangram-scheduler:"
say "  the offline path (KIND_OFFLINE=1) and make demo run them"
cat <<MSG

   Look around:   export KUBECONFIG=$KUBECONFIG_FILE
                  kubectl -n $DEMO_NAMESPACE get pods,resourceclaims -o wide
                  kubectl tangram status   (go build -o ~/bin/kubectl-tangram ./cmd/kubectl-tangram)
   Tear down:     kind delete cluster --name $CLUSTER
MSG
