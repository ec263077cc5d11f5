#!/usr/bin/env bash
# Starts a one-node Kubernetes cluster on this machine: etcd, the control
# plane on loopback, containerd with CDI, the kubelet and a CNI bridge. Tears
# down whatever a previous (possibly crashed) run left behind first.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
source "$(dirname "${BASH_SOURCE[0]}")/config.sh"

need_root
total_start="$(now_s)"
cluster_lock

log "building or reusing cluster binaries"
"$(dirname "${BASH_SOURCE[0]}")/build-binaries.sh"

log "cleaning up any previous cluster"
"$(dirname "${BASH_SOURCE[0]}")/down.sh" --quiet

mkdir -p "$CLUSTER_DIR" "$LOG_DIR" "$PID_DIR"
rm -f "$LOG_DIR"/*.log
if [ "${TANGRAM_MOCK_DRIVER_ROOT:-}" = 1 ]; then
	log "creating the mock NVIDIA driver root $MOCK_DRIVER_ROOT (profile ${TANGRAM_MOCK_NVML_PROFILE:-dgx-h100}, node $NODE_NAME)"
	TANGRAM_MOCK_NVML_NODE_NAME="$NODE_NAME" "$(dirname "${BASH_SOURCE[0]}")/../mock-driver-root/create.sh" "$MOCK_DRIVER_ROOT" >/dev/null
fi
IP="$(node_ip)"
log "writing credentials and configuration to $CLUSTER_DIR (node $NODE_NAME, $IP)"
write_pki "$IP"
write_tokens
mkdir -p "$CLUSTER_DIR/kubeconfigs"
for u in admin kubelet controller-manager scheduler; do
	write_kubeconfig "$CLUSTER_DIR/kubeconfigs/$u.kubeconfig" "$u"
done
cp "$CLUSTER_DIR/kubeconfigs/admin.kubeconfig" "$KUBECONFIG_FILE"
write_containerd_config
write_kubelet_config
K() { "$KUBECTL" --kubeconfig "$KUBECONFIG_FILE" "$@"; }

log "starting etcd $ETCD_VERSION"
start_proc etcd "$ETCD_BIN/etcd" \
	--name=tangram --data-dir="$CLUSTER_DIR/etcd-data" \
	--listen-client-urls="http://127.0.0.1:$ETCD_CLIENT_PORT" --advertise-client-urls="http://127.0.0.1:$ETCD_CLIENT_PORT" \
	--listen-peer-urls="http://127.0.0.1:$ETCD_PEER_PORT" --initial-advertise-peer-urls="http://127.0.0.1:$ETCD_PEER_PORT" \
	--initial-cluster="tangram=http://127.0.0.1:$ETCD_PEER_PORT" \
	--unsafe-no-fsync --quota-backend-bytes=2147483648 --log-level=warn
wait_until etcd 60 "etcd is healthy" curl -fsS "http://127.0.0.1:$ETCD_CLIENT_PORT/health"

log "starting kube-apiserver $KUBE_VERSION"
# --endpoint-reconciler-type=none: the API server refuses to advertise a
# loopback address in the kubernetes Service otherwise.
# --enable-aggregator-routing: there is no kube-proxy, so Service IPs lead
# nowhere; with this the API server calls admission webhooks (the chart's
# GpuConfig webhook) at their Service's endpoints, the pods themselves.
start_proc kube-apiserver "$KUBE_BIN/kube-apiserver" \
	--etcd-servers="http://127.0.0.1:$ETCD_CLIENT_PORT" \
	--bind-address=127.0.0.1 --advertise-address=127.0.0.1 --secure-port="$APISERVER_PORT" \
	--endpoint-reconciler-type=none --enable-aggregator-routing=true \
	--tls-cert-file="$CLUSTER_DIR/pki/apiserver.crt" --tls-private-key-file="$CLUSTER_DIR/pki/apiserver.key" \
	--client-ca-file="$CLUSTER_DIR/pki/ca.crt" --token-auth-file="$CLUSTER_DIR/pki/tokens.csv" \
	--kubelet-client-certificate="$CLUSTER_DIR/pki/apiserver-kubelet-client.crt" \
	--kubelet-client-key="$CLUSTER_DIR/pki/apiserver-kubelet-client.key" \
	--kubelet-preferred-address-types=InternalIP,Hostname \
	--authorization-mode=Node,RBAC --allow-privileged=true \
	--service-cluster-ip-range="$SERVICE_CIDR" \
	--service-account-issuer=https://kubernetes.default.svc \
	--service-account-key-file="$CLUSTER_DIR/pki/sa.pub" \
	--service-account-signing-key-file="$CLUSTER_DIR/pki/sa.key" \
	--feature-gates="$FEATURE_GATES" \
	--runtime-config=scheduling.k8s.io/v1beta1=true \
	--v=1
wait_until kube-apiserver 180 "kube-apiserver is ready" K get --raw /readyz

log "starting kube-controller-manager and kube-scheduler"
start_proc kube-controller-manager "$KUBE_BIN/kube-controller-manager" \
	--kubeconfig="$CLUSTER_DIR/kubeconfigs/controller-manager.kubeconfig" \
	--authentication-kubeconfig="$CLUSTER_DIR/kubeconfigs/controller-manager.kubeconfig" \
	--authorization-kubeconfig="$CLUSTER_DIR/kubeconfigs/controller-manager.kubeconfig" \
	--bind-address=127.0.0.1 --secure-port=10257 --leader-elect=false \
	--controllers='*' --use-service-account-credentials=true \
	--service-account-private-key-file="$CLUSTER_DIR/pki/sa.key" \
	--root-ca-file="$CLUSTER_DIR/pki/ca.crt" \
	--feature-gates="$FEATURE_GATES" --v=1
start_proc kube-scheduler "$KUBE_BIN/kube-scheduler" \
	--kubeconfig="$CLUSTER_DIR/kubeconfigs/scheduler.kubeconfig" \
	--authentication-kubeconfig="$CLUSTER_DIR/kubeconfigs/scheduler.kubeconfig" \
	--authorization-kubeconfig="$CLUSTER_DIR/kubeconfigs/scheduler.kubeconfig" \
	--bind-address=127.0.0.1 --secure-port=10259 --leader-elect=false \
	--feature-gates="$FEATURE_GATES" --v=2
wait_until kube-controller-manager 120 "kube-controller-manager is healthy" curl -fsSk https://127.0.0.1:10257/healthz
wait_until kube-scheduler 120 "kube-scheduler is healthy" curl -fsSk https://127.0.0.1:10259/healthz

log "starting containerd $CONTAINERD_VERSION"
mkdir -p "$CDI_DIR" /etc/cdi "$CONTAINERD_ROOT" "$CONTAINERD_STATE"
# The shim is found on PATH.
PATH="$CONTAINERD_BIN:$PATH" start_proc containerd "$CONTAINERD_BIN/containerd" \
	--config "$CLUSTER_DIR/config/containerd.toml" --log-level warn
CTR() { "$CONTAINERD_BIN/ctr" --address "$CONTAINERD_SOCK" -n k8s.io "$@"; }
wait_until containerd 60 "containerd is serving" CTR version

log "building and importing images"
"$REPO_ROOT/hack/images/build-images.sh" --import --cmds-best-effort --allow-unpinned-base

log "starting kubelet $KUBE_VERSION"
mkdir -p "$KUBELET_ROOT"
start_proc kubelet "$KUBE_BIN/kubelet" \
	--config="$CLUSTER_DIR/config/kubelet.yaml" \
	--kubeconfig="$CLUSTER_DIR/kubeconfigs/kubelet.kubeconfig" \
	--hostname-override="$NODE_NAME" --node-ip="$IP" --v=3
wait_until kubelet 120 "node $NODE_NAME is registered" K get node "$NODE_NAME"
wait_until kubelet 180 "node $NODE_NAME is Ready" \
	K wait --for=condition=Ready "node/$NODE_NAME" --timeout=1s
wait_until kube-controller-manager 120 "the default service account exists" K get serviceaccount default -n default

log "cluster is up in $(elapsed "$total_start")"
info "kubeconfig: $KUBECONFIG_FILE"
info "logs:       $LOG_DIR"
info "try:        $KUBECTL --kubeconfig $KUBECONFIG_FILE get nodes"
