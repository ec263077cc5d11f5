#!/usr/bin/env bash
# The offline kind cluster of `make kind-demo`, with no internet and no
# registry:
#   hack/kind/up.sh      prints nothing on stdout; the kubeconfig is $KIND_KUBECONFIG
# 1. starts the private Docker engine (dockerd.sh), 2. builds kind and the
# node image from source (cached), 3. creates the one-node cluster of
# kind-config-offline.yaml (an old one of the same name is deleted first),
# 4. loads Tangram's images (hack/images, OCI archives) into the node.
# hack/kind/down.sh removes all of it again. Root only.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
need_root
export DOCKER_HOST="unix://$TANGRAM_DOCKER_SOCK"

start="$(now_s)"
mkdir -p "$KIND_CACHE"
# What down.sh compares the firewall against.
iptables-save 2>/dev/null | grep -v '^#' >"$KIND_IPTABLES_SNAPSHOT" || true

"$REPO_ROOT/hack/kind/dockerd.sh" start
ensure_kind
log "node image (hack/kind/build-node-image.sh)"
image="$("$REPO_ROOT/hack/kind/build-node-image.sh")" || die "building the kind node image failed"

config="$REPO_ROOT/hack/kind/kind-config-offline.yaml"
case "$KIND_GPUS" in
fake) ;;
mock)
	log "mock NVIDIA driver root $KIND_MOCK_DRIVER_ROOT (hack/mock-driver-root, node $KIND_CLUSTER-control-plane)"
	TANGRAM_MOCK_NVML_NODE_NAME="$KIND_CLUSTER-control-plane" TANGRAM_MOCK_NVML_STATE_DIR="$KIND_MOCK_NVML_STATE_DIR" \
		"$REPO_ROOT/hack/mock-driver-root/create.sh" "$KIND_MOCK_DRIVER_ROOT" >/dev/null || die "creating the mock driver root failed"
	# The offline config plus the mount (its last lines are the one node's).
	config="$KIND_CACHE/kind-config-mock.yaml"
	{
		cat "$REPO_ROOT/hack/kind/kind-config-offline.yaml"
		printf '    extraMounts:\n      - hostPath: %s\n        containerPath: %s\n' "$KIND_MOCK_DRIVER_ROOT" "$KIND_MOCK_DRIVER_ROOT"
	} >"$config"
	;;
*) die "KIND_GPUS=$KIND_GPUS: want fake (a fake profile) or mock (the mock driver root)" ;;
esac

if kind get clusters 2>/dev/null | grep -qx "$KIND_CLUSTER"; then
	log "deleting the kind cluster $KIND_CLUSTER an earlier run left"
	kind delete cluster --name "$KIND_CLUSTER" >/dev/null 2>&1 || die "kind delete cluster --name $KIND_CLUSTER failed"
fi
log "kind create cluster --name $KIND_CLUSTER --image $image"
mkdir -p "$(dirname "$KIND_KUBECONFIG")"
t="$(now_s)"
# --retain: a node that fails to come up stays until down.sh, so its logs
# can be exported first.
kind create cluster --name "$KIND_CLUSTER" --image "$image" --config "$config" \
	--kubeconfig "$KIND_KUBECONFIG" --retain --wait 5m >&2 ||
	{
		rm -rf "$KIND_CACHE/logs"
		kind export logs "$KIND_CACHE/logs" --name "$KIND_CLUSTER" >/dev/null 2>&1 || true
		die "kind create cluster failed (the node's logs: $KIND_CACHE/logs)"
	}
info "cluster created in $(elapsed "$t")"

log "Tangram's images (hack/images/build-images.sh → kind load image-archive)"
# Into a directory of their own: the local cluster's archives in
# $CACHE_ROOT/images may be rebuilt from another checkout meanwhile.
"$REPO_ROOT/hack/images/build-images.sh" --allow-unpinned-base --out "$KIND_CACHE/images" --only dra-kubelet-plugin --only dra-controller \
	--only tangram-scheduler --only gpu-info || die "building Tangram's images failed"
for name in dra-kubelet-plugin dra-controller tangram-scheduler gpu-info; do
	archive="$KIND_CACHE/images/$name.tar"
	kind load image-archive "$archive" --name "$KIND_CLUSTER" >/dev/null 2>&1 ||
		die "kind load image-archive $archive failed"
	info "loaded $name"
done
log "kind cluster $KIND_CLUSTER ready in $(elapsed "$start") (kubeconfig $KIND_KUBECONFIG)"
