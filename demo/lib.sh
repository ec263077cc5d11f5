#!/usr/bin/env bash
# Demo helpers shared by run-local.sh (this machine's local cluster) and
# kind-up.sh (a kind cluster). Sourced, not run. The caller defines:
#   K ARGS...   kubectl against the demo cluster
#   H ARGS...   helm against the demo cluster
# and may set DEMO_NAMESPACE, RELEASE, RELEASE_NAMESPACE.

DEMO_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
CHART_DIR="$(cd "$DEMO_DIR/../deployments/helm/tangram" && pwd)"
SPEC_DIR="$DEMO_DIR/specs"
DEMO_NAMESPACE="${DEMO_NAMESPACE:-tangram-demo}"
RELEASE="${RELEASE:-tangram}"
RELEASE_NAMESPACE="${RELEASE_NAMESPACE:-tangram-system}"
DRIVER=gpu.tangram.dev

if [ -t 1 ]; then
	B=$'\e[1m' DIM=$'\e[2m' OK=$'\e[32m' BAD=$'\e[31m' R=$'\e[0m'
else
	B="" DIM="" OK="" BAD="" R=""
fi

step() { printf '\n%s━━ %s%s\n' "$B" "$*" "$R"; }
say() { printf '   %s\n' "$*"; }
pass() { printf '   %s✔ %s%s\n' "$OK" "$*" "$R"; }
fail() { printf '   %s✘ %s%s\n' "$BAD" "$*" "$R"; DEMO_FAILURES=$((${DEMO_FAILURES:-0} + 1)); }

# demo_install_chart HELM_ARGS...: install or upgrade the chart and wait for
# the plugin DaemonSet. DeviceClasses that exist without a Helm owner (a
# test harness may have applied identical ones) are adopted, not duplicated.
demo_install_chart() {
	local dc
	for dc in gpu.tangram.dev shared-gpu.tangram.dev; do
		if K get deviceclass "$dc" >/dev/null 2>&1 &&
			[ -z "$(K get deviceclass "$dc" -o jsonpath='{.metadata.annotations.meta\.helm\.sh/release-name}')" ]; then
			say "adopting the existing DeviceClass $dc into release $RELEASE"
			K annotate deviceclass "$dc" --overwrite \
				"meta.helm.sh/release-name=$RELEASE" "meta.helm.sh/release-namespace=$RELEASE_NAMESPACE" >/dev/null
			K label deviceclass "$dc" --overwrite app.kubernetes.io/managed-by=Helm >/dev/null
		fi
	done
	H upgrade --install "$RELEASE" "$CHART_DIR" --namespace "$RELEASE_NAMESPACE" --create-namespace \
		--wait --timeout 5m "$@" >/dev/null || return 1
	K -n "$RELEASE_NAMESPACE" rollout status "daemonset/$RELEASE-kubelet-plugin" --timeout=3m >/dev/null
}

# demo_wait_slices TIMEOUT: wait until every node running a plugin pod has
# published its ResourceSlices; prints the devices per node.
demo_wait_slices() {
	local timeout="$1" i nodes n missing
	for ((i = 0; i < timeout; i++)); do
		nodes="$(K -n "$RELEASE_NAMESPACE" get pods -l app.kubernetes.io/component=kubelet-plugin \
			-o jsonpath='{range .items[*]}{.spec.nodeName}{"\n"}{end}' 2>/dev/null | sort -u)"
		missing=""
		for n in $nodes; do
			[ -n "$(K get resourceslices --field-selector "spec.nodeName=$n,spec.driver=$DRIVER" -o name 2>/dev/null)" ] ||
				missing+=" $n"
		done
		if [ -n "$nodes" ] && [ -z "$missing" ]; then
			for n in $nodes; do
				say "node $n publishes $(K get resourceslices --field-selector "spec.nodeName=$n,spec.driver=$DRIVER" \
					-o go-template='{{range .items}}{{range .spec.devices}}{{.name}} {{end}}{{end}}')"
			done
			return 0
		fi
		sleep 1
	done
	echo "ERROR: no ResourceSlices from node(s)${missing:- (no plugin pod scheduled)} after ${timeout}s" >&2
	K -n "$RELEASE_NAMESPACE" logs -l app.kubernetes.io/component=kubelet-plugin --tail=30 >&2 || true
	return 1
}

# demo_add_api_only_node NODE PROFILE PLUGIN_BINARY: a Node object without a
# kubelet, with ample CPU and memory, tainted tangram.dev/demo-api-only so
# only pods that accept it go there, and the ResourceSlices Tangram's plugin
# would publish for fake PROFILE on it (`dra-kubelet-plugin slices`). The
# scheduler places pods there; nothing ever starts them. A node of that name
# left by an earlier demo is replaced.
demo_add_api_only_node() {
	local node="$1" profile="$2" plugin="$3" capacity='{"cpu":"64","memory":"512Gi","pods":"110"}'
	K delete node "$node" --ignore-not-found --wait=true >/dev/null || return 1
	K delete resourceslices --field-selector "spec.nodeName=$node" --ignore-not-found >/dev/null || return 1
	K create -f - >/dev/null <<NODE || return 1
apiVersion: v1
kind: Node
metadata:
  name: $node
  labels:
    kubernetes.io/hostname: $node
    tangram.dev/demo: api-only
spec:
  taints:
    - key: tangram.dev/demo-api-only
      value: "true"
      effect: NoSchedule
NODE
	K patch node "$node" --subresource=status --type=merge \
		-p "{\"status\":{\"capacity\":$capacity,\"allocatable\":$capacity}}" >/dev/null || return 1
	"$plugin" slices --node-name "$node" --fake-profile "$profile" -o yaml | K create -f - >/dev/null
}

# demo_remove_api_only_node NODE: the node and its ResourceSlices.
demo_remove_api_only_node() {
	K delete node "$1" --ignore-not-found --wait=true >/dev/null
	K delete resourceslices --field-selector "spec.nodeName=$1" --ignore-not-found >/dev/null
}

# demo_pod_node POD TIMEOUT: print the pod's node once it is bound (polling
# up to TIMEOUT seconds); fails when it is not bound by then.
demo_pod_node() {
	local i node
	for ((i = 0; i < $2; i++)); do
		node="$(K -n "$DEMO_NAMESPACE" get pod "$1" -o jsonpath='{.spec.nodeName}' 2>/dev/null)"
		[ -n "$node" ] && { echo "$node"; return 0; }
		sleep 1
	done
	return 1
}

# demo_apply_pods_one_by_one FILE TIMEOUT: the objects without a demo label
# (templates) first, then each Pod of FILE in order, waiting up to TIMEOUT
# seconds until it is scheduled before creating the next. Pods applied
# together race in the scheduler: the DRA plugin may allocate a share before
# the previous pod's share is counted, and the shares land on two cards.
demo_apply_pods_one_by_one() {
	local file="$1" timeout="$2" docs doc name
	K apply -f "$file" -l '!demo' >/dev/null || return 1
	docs="$(mktemp -d)"
	awk -v dir="$docs" 'BEGIN { n = 0 } /^---$/ { n++; next } { print > (dir "/" sprintf("%03d", n) ".yaml") }' "$file"
	for doc in "$docs"/*.yaml; do
		grep -q '^kind: Pod$' "$doc" || continue
		name="$(awk '/^metadata:/ { m = 1; next } m && /^  name:/ { print $2; exit }' "$doc")"
		K apply -f "$doc" >/dev/null || { rm -rf "$docs"; return 1; }
		demo_pod_node "$name" "$timeout" >/dev/null
	done
	rm -rf "$docs"
}

# demo_apply_gang_then_members FILE LABEL GANG: the GpuGang (and anything
# else without a demo label) first; its members only once the controller has
# created the PodGroup they name, so the scheduler never sees a member of a
# group that does not exist yet (it would park it as unschedulable).
demo_apply_gang_then_members() {
	local file="$1" label="$2" gang="$3" i
	K apply -f "$file" -l '!demo' >/dev/null || return 1
	for ((i = 0; i < 60; i++)); do
		[ -n "$(K -n "$DEMO_NAMESPACE" get gpugang "$gang" -o jsonpath='{.status.podGroupName}' 2>/dev/null)" ] && break
		sleep 1
	done
	K apply -f "$file" -l "demo=$label" >/dev/null
}

# demo_describe_spec FILE: the spec's leading comment, as prose.
demo_describe_spec() {
	awk '/^#/ { sub(/^# ?/, ""); print "   " $0; next } { exit }' "$1"
}

# demo_wait_pods LABEL TIMEOUT: wait until the demo pods with label
# demo=LABEL are Ready.
demo_wait_pods() {
	K -n "$DEMO_NAMESPACE" wait pod -l "demo=$1" --for=condition=Ready --timeout="${2}s" >/dev/null 2>&1
}

# card_memory: "pool/device memory" lines for every published device.
card_memory() {
	K get resourceslices --field-selector "spec.driver=$DRIVER" -o go-template='{{range .items}}{{$pool := .spec.pool.name}}{{range .spec.devices}}{{$pool}}/{{.name}} {{with .capacity}}{{with .memory}}{{.value}}{{end}}{{end}}{{"\n"}}{{end}}{{end}}'
}

# demo_show_pods LABEL: one block per pod: node, each allocated device with
# its memory and compute share, and what the container printed.
demo_show_pods() {
	local label="$1" pods pod node phase claims claim cards
	cards="$(card_memory)"
	pods="$(K -n "$DEMO_NAMESPACE" get pods -l "demo=$label" -o jsonpath='{range .items[*]}{.metadata.name}{"\n"}{end}')"
	for pod in $pods; do
		node="$(K -n "$DEMO_NAMESPACE" get pod "$pod" -o jsonpath='{.spec.nodeName}')"
		phase="$(K -n "$DEMO_NAMESPACE" get pod "$pod" -o jsonpath='{.status.phase}')"
		printf '   %spod %-12s%s node %-20s %s\n' "$B" "$pod" "$R" "${node:-<none>}" "$phase"
		claims="$(K -n "$DEMO_NAMESPACE" get pod "$pod" -o jsonpath='{range .status.resourceClaimStatuses[*]}{.resourceClaimName}{"\n"}{end}')"
		for claim in $claims; do
			K -n "$DEMO_NAMESPACE" get resourceclaim "$claim" -o go-template='{{range .status.allocation.devices.results}}{{.pool}}/{{.device}} {{if .shareID}}share{{else}}whole{{end}} {{with .consumedCapacity}}{{with .memory}}{{.}}{{else}}-{{end}} {{with .compute}}{{.}}{{else}}-{{end}}{{else}}- -{{end}}{{"\n"}}{{end}}' |
				while read -r dev kind mem compute; do
					local total share
					total="$(awk -v d="$dev" '$1 == d { print $2 }' <<<"$cards")"
					if [ "$mem" = "-" ] || [ "$mem" = "$total" ]; then
						share="whole card${total:+ ($total)}"
					else
						share="memory $mem of ${total:-?}"
						case "$compute" in
						- | 0) share+=", compute time-shared" ;;
						*) share+=", compute ${compute}%" ;;
						esac
					fi
					printf '     claim %-28s → %-22s %s\n' "$claim" "${dev#*/}" "$share"
					: "$kind"
				done
		done
		if [ "$phase" = "Running" ]; then
			# The variables that say what the container got; gpu-info prints more.
			K -n "$DEMO_NAMESPACE" logs "$pod" 2>/dev/null |
				grep -E '^(NVIDIA_VISIBLE_DEVICES|CUDA_MPS_PINNED_DEVICE_MEM_LIMIT|CUDA_MPS_ACTIVE_THREAD_PERCENTAGE|TANGRAM_SHARING_BACKEND)=' |
				sed "s/^/     ${DIM}container sees /; s/\$/${R}/"
		fi
	done
}

# demo_claim_devices LABEL: "pod device" lines for the pods with demo=LABEL.
demo_claim_devices() {
	local pod claim
	for pod in $(K -n "$DEMO_NAMESPACE" get pods -l "demo=$1" -o jsonpath='{range .items[*]}{.metadata.name}{"\n"}{end}'); do
		for claim in $(K -n "$DEMO_NAMESPACE" get pod "$pod" -o jsonpath='{range .status.resourceClaimStatuses[*]}{.resourceClaimName}{"\n"}{end}'); do
			K -n "$DEMO_NAMESPACE" get resourceclaim "$claim" \
				-o go-template='{{range .status.allocation.devices.results}}{{.pool}}/{{.device}}{{"\n"}}{{end}}' |
				sed "s|^|$pod |"
		done
	done
}

# demo_pod_warning POD TIMEOUT: wait for a Warning event on the pod and print
# its reason and message.
demo_pod_warning() {
	local pod="$1" timeout="$2" i ev
	for ((i = 0; i < timeout; i++)); do
		ev="$(K -n "$DEMO_NAMESPACE" get events --field-selector "involvedObject.name=$pod,type=Warning" \
			-o go-template='{{range .items}}{{.reason}}: {{.message}}{{"\n"}}{{end}}' 2>/dev/null | tail -n 1)"
		if [ -n "$ev" ]; then
			echo "$ev"
			return 0
		fi
		sleep 1
	done
	return 1
}

# demo_check_slice_policy NODE: as the plugin's service account on NODE (the
# node name its bound token would carry), a dry-run ResourceSlice for NODE is
# admitted and one for another node is refused by the chart's policy.
demo_check_slice_policy() {
	local node="$1" sa="system:serviceaccount:$RELEASE_NAMESPACE:$RELEASE-kubelet-plugin" out
	slice_for() {
		cat <<SLICE
apiVersion: resource.k8s.io/v1
kind: ResourceSlice
metadata:
  name: tangram-demo-policy-check-$1
spec:
  driver: $DRIVER
  nodeName: $1
  pool: {name: $1, generation: 1, resourceSliceCount: 1}
  devices: []
SLICE
	}
	as=(--as="$sa" --as-user-extra="authentication.kubernetes.io/node-name=$node")
	if out="$(slice_for "$node" | K create --dry-run=server "${as[@]}" -f - 2>&1)"; then
		pass "the plugin on $node may write $node's ResourceSlices"
	else
		fail "the plugin on $node may not write its own slices: $out"
	fi
	if out="$(slice_for "not-$node" | K create --dry-run=server "${as[@]}" -f - 2>&1)"; then
		fail "the plugin on $node could write a slice of node not-$node"
	else
		pass "refused for another node: ${out##*denied request: }"
	fi
}
