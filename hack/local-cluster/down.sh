#!/usr/bin/env bash
# Stops the local cluster and removes everything it left on the host:
# processes (by recorded PID), containers, mounts, the CNI bridge, iptables
# rules, cgroups and state. Safe to run any number of times, also after a
# crashed or half-started run. Logs are kept for inspection.
#   down.sh [--quiet]
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
set +o errexit # best effort: one stuck piece must not leave the rest behind

quiet=""
[ "${1:-}" = "--quiet" ] && quiet=1
say() { [ -n "$quiet" ] || log "$@"; }
need_root
cluster_lock

say "stopping Prometheus"
"$(dirname "${BASH_SOURCE[0]}")/prometheus.sh" stop >/dev/null 2>&1

# Tangram's pods (chart.sh) go with the pod sandboxes below.
say "stopping kubelet"
stop_proc kubelet 15

# Remove pods through the CRI while containerd still runs, so the CNI plugin
# releases addresses and network namespaces the normal way.
if [ -n "$(proc_pid containerd)" ] && [ -x "$CRICTL_BIN/crictl" ]; then
	say "removing pod sandboxes"
	CRI=("$CRICTL_BIN/crictl" --runtime-endpoint "unix://$CONTAINERD_SOCK" --timeout 20s)
	"${CRI[@]}" stopp $("${CRI[@]}" pods -q 2>/dev/null) >/dev/null 2>&1
	"${CRI[@]}" rmp -f $("${CRI[@]}" pods -q 2>/dev/null) >/dev/null 2>&1
fi
say "stopping containerd"
stop_proc containerd 15

# Shims and containers survive a containerd crash; find the ones that belong
# to this cluster by its unique socket path and runc root.
for p in /proc/[0-9]*; do
	{ tr '\0' ' ' <"$p/cmdline"; } 2>/dev/null | grep -q -- "-address $CONTAINERD_SOCK " || continue
	info "killing leftover shim ${p#/proc/}"
	kill -KILL "${p#/proc/}" 2>/dev/null
done
if [ -d "$CONTAINERD_STATE/runc" ] && command -v runc >/dev/null; then
	for root in "$CONTAINERD_STATE"/runc/*; do
		[ -d "$root" ] || continue
		for id in $(runc --root "$root" list -q 2>/dev/null); do
			info "removing leftover container $id"
			runc --root "$root" delete -f "$id" >/dev/null 2>&1
		done
	done
fi

say "stopping control plane"
stop_proc kube-scheduler 10
stop_proc kube-controller-manager 10
stop_proc kube-apiserver 15
stop_proc etcd 10

say "unmounting"
# Deepest first, so nested mounts come off before their parents.
findmnt -rn -o TARGET 2>/dev/null | awk -v a="$KUBELET_ROOT/" -v b="$CONTAINERD_ROOT" -v c="$CONTAINERD_STATE" -v d="$MPS_RUN_ROOT/" '
	index($0, a) == 1 || $0 == substr(a, 1, length(a) - 1) || index($0, b) == 1 || index($0, c) == 1 || index($0, d) == 1 || $0 ~ "^/(var/)?run/netns/cni-"' |
	sort -r | while read -r m; do
		umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || info "could not unmount $m"
	done
rm -f /run/netns/cni-* /var/run/netns/cni-* 2>/dev/null

say "removing network state"
if ip link show "$CNI_BRIDGE" >/dev/null 2>&1; then
	ip link delete "$CNI_BRIDGE" 2>/dev/null && info "deleted bridge $CNI_BRIDGE"
fi
# The CNI config masquerades nothing, but rules of an older or hand-edited
# config carry the network name in their comment: remove those.
if command -v iptables-save >/dev/null; then
	for table in nat filter; do
		iptables-save -t "$table" 2>/dev/null | grep -- '-A .*tangram' | sed 's/^-A/-D/' |
			while read -r rule; do eval "iptables -t $table $rule" 2>/dev/null && info "removed iptables rule: $rule"; done
	done
fi

say "removing cgroups"
for c in /sys/fs/cgroup/*/kubepods* /sys/fs/cgroup/kubepods*; do
	[ -d "$c" ] && find "$c" -depth -type d -exec rmdir {} \; 2>/dev/null
done

say "removing cluster state"
rm -rf --one-file-system "$CLUSTER_DIR/etcd-data" "$CONTAINERD_ROOT" "$CONTAINERD_STATE" "$CLUSTER_DIR/cni/ipam" "$CLUSTER_DIR/plugin"
# test-e2e-realpath's plugin state, MPS directories and mock NVML state: the
# next run starts as after a reboot (an old control.log would otherwise
# carry earlier runs' MPS commands into the next run's assertions).
rm -rf --one-file-system "$CLUSTER_DIR/realpath" 2>/dev/null || info "could not remove all of $CLUSTER_DIR/realpath"
rm -rf --one-file-system "$MPS_RUN_ROOT" 2>/dev/null || info "could not remove all of $MPS_RUN_ROOT"
rm -rf --one-file-system "$KUBELET_ROOT" 2>/dev/null || info "could not remove all of $KUBELET_ROOT"
rm -f "$CDI_DIR"/k8s.gpu.tangram.dev-* "$CDI_DIR"/tangram-e2e-*.json "$CDI_DIR"/tangram-e2e-*.yaml 2>/dev/null
rm -f "$KUBECONFIG_FILE"
# The mock driver root (TANGRAM_MOCK_DRIVER_ROOT=1), only if create.sh made it.
if [ -f "$MOCK_DRIVER_ROOT/TANGRAM-MOCK-DRIVER-ROOT" ]; then
	mock_state="$(sed -n 's/^state_dir=//p' "$MOCK_DRIVER_ROOT/TANGRAM-MOCK-DRIVER-ROOT")"
	[ -n "$mock_state" ] && rm -rf "$mock_state/calls.log" "$mock_state/events" "$mock_state/compute-mode" "$mock_state/mig-mode" "$mock_state/mig" "$mock_state/mig-busy" "$mock_state/memory-limits" "$mock_state/fail-memory-limits" "$mock_state/processes" "$mock_state/utilization"
	rm -rf --one-file-system "$MOCK_DRIVER_ROOT"
fi
say "cluster is down (logs kept in $LOG_DIR)"
exit 0
