#!/usr/bin/env bash
# make gpu-acceptance: the acceptance test of a real GPU node
# (docs/nvml.md#acceptance-on-a-gpu-node). Run it on the GPU node itself,
# with kubectl pointing at a cluster where the chart is installed with the
# cgo plugin image and no fake profile. It
#   1. compares what the plugin publishes (`dra-kubelet-plugin slices`, cgo
#      build, through NVML) with `nvidia-smi -q -x`, card by card;
#   2. runs a pod per claim shape on this node (whole card, memory share,
#      and an NVLink pair when two cards share NVLink) with cuda-alloc/cuda-alloc.c,
#      which loads libcuda.so.1 and allocates: a whole card gets 90 % of its
#      memory, a share must be refused before it holds more than its share;
#   3. prints a report and keeps it under ~/.cache/tangram/gpu-acceptance.
# Without an NVIDIA GPU it fails at once, before building anything.
# Settings (environment):
#   NODE_NAME        the Node object of this machine (default: hostname)
#   WORKLOAD_IMAGE   image the pods run cuda-alloc in; needs glibc
#                    (default localhost/tangram/dra-kubelet-plugin:dev)
#   SHARE_MIB        memory of the share (default: a quarter of card 0)
#   PLUGIN_FLAGS     extra flags for `dra-kubelet-plugin slices`
#   NAMESPACE        namespace of the pods (default tangram-acceptance; deleted at the end)
#   NVIDIA_SMI       the nvidia-smi to run (default nvidia-smi)
source "$(dirname "${BASH_SOURCE[0]}")/../local-cluster/lib.sh"

NVIDIA_SMI="${NVIDIA_SMI:-nvidia-smi}"

# --- preflight: a GPU node, or stop now ---------------------------------
command -v "$NVIDIA_SMI" >/dev/null 2>&1 \
	|| die "make gpu-acceptance needs a node with an NVIDIA GPU and its driver, but $NVIDIA_SMI is not on PATH: this machine has no NVIDIA driver. Run it on a GPU node (docs/nvml.md#acceptance-on-a-gpu-node); without GPUs, make demo shows the same flows on fake GPUs."
gpu_list="$("$NVIDIA_SMI" -L 2>&1)" \
	|| die "make gpu-acceptance needs a working NVIDIA driver, but '$NVIDIA_SMI -L' failed: $gpu_list"
grep -q '^GPU [0-9]' <<<"$gpu_list" \
	|| die "make gpu-acceptance needs an NVIDIA GPU, but '$NVIDIA_SMI -L' lists none: $gpu_list"
for tool in go gcc kubectl; do
	command -v "$tool" >/dev/null || die "make gpu-acceptance needs $tool on PATH"
done

NODE_NAME="${NODE_NAME:-$(hostname | tr '[:upper:]' '[:lower:]')}"
WORKLOAD_IMAGE="${WORKLOAD_IMAGE:-localhost/tangram/dra-kubelet-plugin:dev}"
NAMESPACE="${NAMESPACE:-tangram-acceptance}"
work="$(mktemp -d)"
report_dir="$CACHE_ROOT/gpu-acceptance"
report="$report_dir/report-$(date -u +%Y%m%dT%H%M%SZ).txt"
mkdir -p "$report_dir"
cleanup() {
	kubectl delete namespace "$NAMESPACE" --ignore-not-found --wait=false >/dev/null 2>&1 || true
	rm -rf "$work"
}
trap cleanup EXIT

failed=0
# section TITLE: a heading in the report.
section() { printf '\n== %s\n' "$1" | tee -a "$report"; }
# record CMD...: run a check that prints report rows; count its failure.
record() {
	local rc=0
	"$@" 2>&1 | tee -a "$report" || rc=$?
	[ "$rc" -eq 0 ] || failed=$((failed + 1))
}
fail_row() { printf 'FAIL   %s\n' "$*" | tee -a "$report"; failed=$((failed + 1)); }

{
	echo "Tangram GPU acceptance on node $NODE_NAME, $(date -u +%Y-%m-%dT%H:%M:%SZ)"
	echo "commit $(git -C "$REPO_ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)"
	"$NVIDIA_SMI" -L
} | tee "$report"

log "building dra-kubelet-plugin (cgo, as its image) and gpu-acceptance"
(cd "$REPO_ROOT" && go_node build -o "$work/dra-kubelet-plugin" ./cmd/dra-kubelet-plugin &&
	go_static build -o "$work/gpu-acceptance" ./hack/gpu-acceptance) || die "go build failed"

# --- 1. the plugin's slices against nvidia-smi ----------------------------
section "ResourceSlices (dra-kubelet-plugin slices, NVML) against nvidia-smi -q -x"
"$NVIDIA_SMI" -q -x >"$work/smi.xml" || die "$NVIDIA_SMI -q -x failed"
# shellcheck disable=SC2086 # PLUGIN_FLAGS is a list of flags
if "$work/dra-kubelet-plugin" slices --node-name "$NODE_NAME" -o json ${PLUGIN_FLAGS:-} >"$work/slices.json" 2>"$work/slices.err"; then
	record "$work/gpu-acceptance" compare --slices "$work/slices.json" --smi "$work/smi.xml"
else
	fail_row "dra-kubelet-plugin slices failed: $(tail -n 3 "$work/slices.err")"
fi

# --- 2. a pod per claim shape ---------------------------------------------
section "Pods on $NODE_NAME, one per claim shape (cuda-alloc in $WORKLOAD_IMAGE)"
card_mib="$("$NVIDIA_SMI" --query-gpu=memory.total --format=csv,noheader,nounits -i 0 | tr -d ' ')"
card_count="$(grep -c '^GPU [0-9]' <<<"$gpu_list")"
share_mib="${SHARE_MIB:-$(((card_mib / 4) / 1024 * 1024))}"
hostname_label="$(kubectl get node "$NODE_NAME" -o jsonpath='{.metadata.labels.kubernetes\.io/hostname}' 2>"$work/kubectl.err")" \
	|| die "kubectl cannot read node $NODE_NAME ($(cat "$work/kubectl.err")); point KUBECONFIG at the cluster and set NODE_NAME to this node's name"
published="$(kubectl get resourceslices --field-selector "spec.driver=gpu.tangram.dev,spec.nodeName=$NODE_NAME" -o name 2>/dev/null | wc -l)"
[ "$published" -gt 0 ] \
	|| die "no ResourceSlice of gpu.tangram.dev for node $NODE_NAME: install the chart with the cgo image and no fake profile (docs/install.md)"

gcc -O2 -Wall -o "$work/cuda-alloc" "$REPO_ROOT/hack/gpu-acceptance/cuda-alloc/cuda-alloc.c" -ldl || die "gcc failed on cuda-alloc.c"
kubectl create namespace "$NAMESPACE" --dry-run=client -o yaml | kubectl apply -f - >/dev/null
kubectl -n "$NAMESPACE" create configmap cuda-alloc --from-file=cuda-alloc="$work/cuda-alloc" --dry-run=client -o yaml |
	kubectl apply -f - >/dev/null

# run_shape SHAPE TRY_MIB CLAIM_SPEC_YAML [SHARE_MIB]: one pod of the shape,
# judged into the report. Whatever goes wrong is a failed row of the report,
# never the end of the script: the other shapes still run.
run_shape() {
	local shape="$1" try="$2" spec="$3" share="${4:-0}" phase="" i
	# The chart's admission policy (admission-policy-shared-gpu.yaml) admits
	# a pod on a strict class's share only when it is locked down (non-root,
	# no privilege escalation, no added capabilities); every shape's pod is,
	# as a numeric user, so that the kubelet need not trust the image's USER.
	if ! kubectl apply -f - >"$work/$shape.apply" 2>&1 <<EOF
apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata: {name: $shape, namespace: $NAMESPACE}
spec:
  spec:
$spec
---
apiVersion: v1
kind: Pod
metadata: {name: $shape, namespace: $NAMESPACE}
spec:
  restartPolicy: Never
  nodeSelector: {kubernetes.io/hostname: "$hostname_label"}
  securityContext: {runAsNonRoot: true, runAsUser: 65534, runAsGroup: 65534}
  containers:
    - name: cuda-alloc
      image: $WORKLOAD_IMAGE
      imagePullPolicy: IfNotPresent
      securityContext: {allowPrivilegeEscalation: false, capabilities: {drop: [ALL]}}
      command: ["/acceptance/cuda-alloc", "$try"]
      volumeMounts: [{name: bin, mountPath: /acceptance}]
      resources: {claims: [{name: gpu}]}
  volumes: [{name: bin, configMap: {name: cuda-alloc, defaultMode: 0755}}]
  resourceClaims: [{name: gpu, resourceClaimTemplateName: $shape}]
EOF
	then
		fail_row "$shape: the claim template or pod was refused: $(tr '\n' ' ' <"$work/$shape.apply")"
		return 0
	fi
	for i in $(seq 1 120); do
		phase="$(kubectl -n "$NAMESPACE" get pod "$shape" -o jsonpath='{.status.phase}' 2>/dev/null || true)"
		case "$phase" in Succeeded | Failed) break ;; esac
		sleep 2
	done
	kubectl -n "$NAMESPACE" logs "$shape" >"$work/$shape.log" 2>&1 || true
	if [ "$phase" != Succeeded ] && [ "$phase" != Failed ]; then
		fail_row "$shape: pod still ${phase:-absent} after 4 minutes: $(kubectl -n "$NAMESPACE" describe pod "$shape" 2>&1 | tail -n 5 | tr '\n' ' ')"
		kubectl -n "$NAMESPACE" delete pod "$shape" --wait=false >/dev/null 2>&1 || true
		return 0
	fi
	record "$work/gpu-acceptance" judge --shape "$shape" --try-mib "$try" --share-mib "$share" --log "$work/$shape.log"
	kubectl -n "$NAMESPACE" delete pod "$shape" --wait=true >/dev/null 2>&1 || true
	return 0
}

run_shape whole-card $((card_mib * 9 / 10)) "    devices:
      requests:
        - name: gpu
          exactly: {deviceClassName: gpu.tangram.dev}"
run_shape memory-share $((share_mib + 2048)) "    devices:
      requests:
        - name: gpu
          exactly:
            deviceClassName: shared-gpu.tangram.dev
            capacity: {requests: {memory: ${share_mib}Mi}}" "$share_mib"
# The pair needs two cards that reach each other over NVLink.
if [ "$card_count" -ge 2 ] && grep -A1 '"nvlinkPeers"' "$work/slices.json" 2>/dev/null | grep -Eq '"int": [1-9]'; then
	run_shape nvlink-pair 256 "    devices:
      requests:
        - name: gpu
          exactly: {deviceClassName: gpu.tangram.dev, count: 2}
      constraints:
        - matchAttribute: gpu.tangram.dev/nvlinkDomain"
else
	printf 'n/a    nvlink-pair: no two cards of this node are joined by NVLink\n' | tee -a "$report"
fi

section "Result"
if [ "$failed" -eq 0 ]; then
	echo "gpu-acceptance: every check passed" | tee -a "$report"
else
	echo "gpu-acceptance: $failed check group(s) failed" | tee -a "$report"
fi
log "report: $report"
[ "$failed" -eq 0 ]
