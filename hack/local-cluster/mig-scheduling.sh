#!/usr/bin/env bash
# MIG partitions on the real 1.37 API server and kube-scheduler, without the
# kubelet plugin (pods are scheduled, never started: nothing prepares MIG
# yet): brings the local cluster up, creates the ResourceSlices the plugin
# publishes for the fake profile mig-h100 (two H100s in MIG mode, one off,
# one pending) and the chart's DeviceClasses, then checks that
#   - the API server accepts the partitions and the counter set slice;
#   - a 1g and a 3g partition of card 0 are allocated side by side, on
#     placements that do not overlap;
#   - a 7g of card 0 stays unschedulable while they exist, and is allocated
#     once their pods are gone;
#   - two whole cards of gpu.tangram.dev are cards 2 and 3, never a card in
#     MIG mode.
# Takes the cluster lock and tears the cluster down at the end (KEEP_CLUSTER=1
# keeps it). docs/resourceslices.md "MIG partitions".
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cluster_lock
cd "$REPO_ROOT"
K="$(component_dir kubernetes "$KUBE_VERSION")/bin/kubectl"
H="$(component_dir helm "$HELM_VERSION")/bin/helm"
export KUBECONFIG="$KUBECONFIG_FILE"
work="$(mktemp -d)"
teardown() {
	rm -rf "$work"
	if [ -z "${KEEP_CLUSTER:-}" ]; then "$REPO_ROOT/hack/local-cluster/down.sh" >/dev/null 2>&1 || true; fi
}
trap teardown EXIT

log "bringing the local cluster up"
"$REPO_ROOT/hack/local-cluster/up.sh" >"$work/up.log" 2>&1 || { tail -30 "$work/up.log"; die "cluster-up failed"; }
node="$("$K" get nodes -o jsonpath='{.items[0].metadata.name}')"

log "creating the slices of fake profile mig-h100 for node $node and the chart's DeviceClasses"
go_node run ./cmd/dra-kubelet-plugin slices --node-name "$node" --fake-profile mig-h100 -o yaml >"$work/slices.yaml"
"$K" apply -f "$work/slices.yaml" >/dev/null
"$H" template t deployments/helm/tangram --show-only templates/deviceclasses.yaml | "$K" apply -f - >/dev/null

pod() { # pod NAME PROFILE: a pod with a claim template for one partition of card 0
	cat <<EOF | "$K" apply -f - >/dev/null
apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata: {name: $1, namespace: default}
spec:
  spec:
    devices:
      requests:
      - name: mig
        exactly:
          deviceClassName: mig.tangram.dev
          selectors:
          - cel: {expression: 'device.attributes["gpu.tangram.dev"].profile == "$2" && device.attributes["gpu.tangram.dev"].parentIndex == 0'}
---
apiVersion: v1
kind: Pod
metadata: {name: $1, namespace: default}
spec:
  containers: [{name: c, image: localhost/tangram/gpu-info:none, imagePullPolicy: Never, resources: {claims: [{name: g}]}}]
  resourceClaims: [{name: g, resourceClaimTemplateName: $1}]
EOF
}
device_of() { # device_of POD: the device its claim was allocated, empty if none
	"$K" get resourceclaims --no-headers \
		-o custom-columns=OWNER:.metadata.ownerReferences[0].name,DEVICE:.status.allocation.devices.results[0].device |
		awk -v p="$1" '$1 == p && $2 != "<none>" {print $2}'
}
wait_device() { # wait_device POD: waits up to 60 s for its allocation
	for _ in $(seq 1 30); do
		d="$(device_of "$1")"
		[ -n "$d" ] && { echo "$d"; return; }
		sleep 2
	done
}
start_of() { echo "${1##*-}"; }

log "a 1g and a 3g partition of card 0"
pod p1g 1g.10gb
pod p3g 3g.40gb
d1="$(wait_device p1g)"; d3="$(wait_device p3g)"
info "1g: ${d1:-none}, 3g: ${d3:-none}"
case "$d1" in gpu-0-mig-19-*) ;; *) die "the 1g pod's claim got ${d1:-nothing}, want a 1g.10gb partition of card 0" ;; esac
case "$d3" in gpu-0-mig-9-*) ;; *) die "the 3g pod's claim got ${d3:-nothing}, want a 3g.40gb partition of card 0" ;; esac
s1="$(start_of "$d1")"; s3="$(start_of "$d3")"
if [ "$s1" -lt $((s3 + 4)) ] && [ "$s3" -lt $((s1 + 1)) ]; then die "$d1 and $d3 overlap"; fi

log "a 7g partition of card 0 while they exist"
pod p7g 7g.80gb
sleep 10
[ -z "$(device_of p7g)" ] || die "the 7g pod's claim got $(device_of p7g) while $d1 and $d3 are allocated"
info "unschedulable, as it must be"

log "the 1g and 3g pods gone"
"$K" delete pod p1g p3g --force --grace-period=0 --wait=false >/dev/null 2>&1
d7="$(wait_device p7g)"
[ "$d7" = gpu-0-mig-0-0 ] || die "the 7g pod's claim got ${d7:-nothing}, want gpu-0-mig-0-0"
info "7g: $d7"

log "two whole cards of gpu.tangram.dev"
cat <<EOF | "$K" apply -f - >/dev/null
apiVersion: resource.k8s.io/v1
kind: ResourceClaim
metadata: {name: whole, namespace: default}
spec: {devices: {requests: [{name: g, exactly: {deviceClassName: gpu.tangram.dev, count: 2}}]}}
---
apiVersion: v1
kind: Pod
metadata: {name: whole, namespace: default}
spec:
  containers: [{name: c, image: localhost/tangram/gpu-info:none, imagePullPolicy: Never, resources: {claims: [{name: g}]}}]
  resourceClaims: [{name: g, resourceClaimName: whole}]
EOF
for _ in $(seq 1 30); do
	whole="$("$K" get resourceclaim whole -o jsonpath='{.status.allocation.devices.results[*].device}')"
	[ -n "$whole" ] && break
	sleep 2
done
[ "$whole" = "gpu-2 gpu-3" ] || die "the whole-card claim got '${whole:-nothing}', want gpu-2 gpu-3 (cards 0 and 1 are in MIG mode)"
info "whole cards: $whole"
log "MIG scheduling checks passed"
