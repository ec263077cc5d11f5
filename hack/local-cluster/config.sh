#!/usr/bin/env bash
# Writes the cluster's credentials and component configuration into
# $CLUSTER_DIR. Sourced by up.sh after lib.sh.

ETCD_CLIENT_PORT=12379
ETCD_PEER_PORT=12380
APISERVER_URL="https://127.0.0.1:$APISERVER_PORT"
# Workload-aware scheduling (beta) for PodGroup gangs, and its topology
# constraint (alpha) for GpuGangs with a topologyKey.
FEATURE_GATES="GenericWorkload=true,DRAWorkloadResourceClaims=true,TopologyAwareWorkloadScheduling=true"
PAUSE_IMAGE="registry.k8s.io/pause:3.10"

# node_ip: the address the kubelet reports and serves on.
node_ip() {
	local ip
	ip="$(ip -4 route get 1.1.1.1 2>/dev/null | awk '{for (i = 1; i < NF; i++) if ($i == "src") print $(i + 1)}')"
	[ -n "$ip" ] || ip="$(hostname -I 2>/dev/null | awk '{print $1}')"
	[ -n "$ip" ] || die "cannot find this machine's IPv4 address (no default route, hostname -I empty)"
	echo "$ip"
}

# sign NAME SUBJECT EXTFILE: a key and a certificate signed by the local CA.
sign() {
	local pki="$CLUSTER_DIR/pki" name="$1" subj="$2" ext="$3"
	openssl req -new -newkey rsa:2048 -nodes -keyout "$pki/$name.key" -subj "$subj" -out "$pki/$name.csr" 2>/dev/null
	openssl x509 -req -in "$pki/$name.csr" -CA "$pki/ca.crt" -CAkey "$pki/ca.key" -CAcreateserial \
		-days 365 -extfile "$ext" -out "$pki/$name.crt" 2>/dev/null
	rm -f "$pki/$name.csr"
}

write_pki() {
	local pki="$CLUSTER_DIR/pki" ip="$1"
	mkdir -p "$pki"
	openssl req -x509 -newkey rsa:2048 -nodes -keyout "$pki/ca.key" -out "$pki/ca.crt" \
		-days 365 -subj "/CN=tangram-local-ca" 2>/dev/null || die "openssl could not create the cluster CA"
	cat >"$pki/serving.ext" <<EXT
basicConstraints=CA:FALSE
keyUsage=digitalSignature,keyEncipherment
extendedKeyUsage=serverAuth
subjectAltName=IP:127.0.0.1,IP:10.96.0.1,IP:$ip,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local
EXT
	cat >"$pki/client.ext" <<EXT
basicConstraints=CA:FALSE
keyUsage=digitalSignature,keyEncipherment
extendedKeyUsage=clientAuth
EXT
	sign apiserver "/CN=kube-apiserver" "$pki/serving.ext"
	# The API server authenticates to the kubelet (logs, exec) with this.
	sign apiserver-kubelet-client "/O=system:masters/CN=kube-apiserver-kubelet-client" "$pki/client.ext"
	openssl genrsa -out "$pki/sa.key" 2048 2>/dev/null
	openssl rsa -in "$pki/sa.key" -pubout -out "$pki/sa.pub" 2>/dev/null
}

# Static bearer tokens keep the identities simple; each carries the user and
# groups the Node and RBAC authorizers expect.
write_tokens() {
	local tok="$CLUSTER_DIR/pki/tokens.csv" u
	: >"$tok"
	for u in admin kubelet controller-manager scheduler; do
		printf '%s' "$(openssl rand -hex 16)" >"$CLUSTER_DIR/pki/$u.token"
	done
	{
		echo "$(cat "$CLUSTER_DIR/pki/admin.token"),admin,admin,\"system:masters\""
		echo "$(cat "$CLUSTER_DIR/pki/kubelet.token"),system:node:$NODE_NAME,node-$NODE_NAME,\"system:nodes\""
		echo "$(cat "$CLUSTER_DIR/pki/controller-manager.token"),system:kube-controller-manager,kcm"
		echo "$(cat "$CLUSTER_DIR/pki/scheduler.token"),system:kube-scheduler,scheduler"
	} >"$tok"
	chmod 600 "$tok"
}

# write_kubeconfig FILE USER: a kubeconfig for one of the token identities.
write_kubeconfig() {
	local file="$1" user="$2"
	cat >"$file" <<KC
apiVersion: v1
kind: Config
clusters:
- name: tangram-local
  cluster:
    server: $APISERVER_URL
    certificate-authority: $CLUSTER_DIR/pki/ca.crt
users:
- name: $user
  user:
    token: $(cat "$CLUSTER_DIR/pki/$user.token")
contexts:
- name: tangram-local
  context:
    cluster: tangram-local
    user: $user
current-context: tangram-local
KC
	chmod 600 "$file"
}

write_containerd_config() {
	local runc; runc="$(command -v runc)"
	mkdir -p "$CLUSTER_DIR/config" "$CLUSTER_DIR/cni/net.d"
	# restrict_oom_score_adj: this VM lacks CAP_SYS_RESOURCE, and without it
	# every sandbox fails with "can't get final child's PID from pipe".
	# SystemdCgroup=false: systemd is not PID 1 here.
	cat >"$CLUSTER_DIR/config/containerd.toml" <<TOML
version = 3
root = "$CONTAINERD_ROOT"
state = "$CONTAINERD_STATE"

[grpc]
  address = "$CONTAINERD_SOCK"

[ttrpc]
  address = "$CONTAINERD_SOCK.ttrpc"

[plugins.'io.containerd.cri.v1.runtime']
  cdi_spec_dirs = ["/etc/cdi", "$CDI_DIR"]
  restrict_oom_score_adj = true
  # Network namespaces under our state dir: teardown finds them there.
  netns_mounts_under_state_dir = true
  [plugins.'io.containerd.cri.v1.runtime'.containerd]
    default_runtime_name = "runc"
    [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
        BinaryName = "$runc"
        Root = "$CONTAINERD_STATE/runc"
        SystemdCgroup = false
  [plugins.'io.containerd.cri.v1.runtime'.cni]
    bin_dirs = ["/usr/lib/cni"]
    conf_dir = "$CLUSTER_DIR/cni/net.d"

[plugins.'io.containerd.cri.v1.images']
  snapshotter = "overlayfs"
  [plugins.'io.containerd.cri.v1.images'.pinned_images]
    sandbox = "$PAUSE_IMAGE"
TOML
	# No masquerading or port mapping: test pods talk to nobody, so the only
	# host network state is the bridge itself.
	cat >"$CLUSTER_DIR/cni/net.d/10-tangram.conflist" <<JSON
{
  "cniVersion": "1.0.0",
  "name": "tangram",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "$CNI_BRIDGE",
      "isGateway": true,
      "ipMasq": false,
      "hairpinMode": true,
      "ipam": {
        "type": "host-local",
        "dataDir": "$CLUSTER_DIR/cni/ipam",
        "ranges": [[{"subnet": "$POD_CIDR"}]],
        "routes": [{"dst": "0.0.0.0/0"}]
      }
    },
    {"type": "loopback"}
  ]
}
JSON
}

write_kubelet_config() {
	cat >"$CLUSTER_DIR/config/kubelet.yaml" <<YAML
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
containerRuntimeEndpoint: unix://$CONTAINERD_SOCK
# The host is cgroup v1 and has no systemd as PID 1.
failCgroupV1: false
cgroupDriver: cgroupfs
failSwapOn: false
featureGates:
  GenericWorkload: true
  DRAWorkloadResourceClaims: true
authentication:
  anonymous:
    enabled: false
  webhook:
    enabled: false
  x509:
    clientCAFile: $CLUSTER_DIR/pki/ca.crt
authorization:
  mode: AlwaysAllow
address: 0.0.0.0
port: 10250
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: 10248
clusterDomain: cluster.local
# Keep imported images: there is no registry to pull them back from.
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard:
  memory.available: 100Mi
  nodefs.available: 1%
  imagefs.available: 1%
serializeImagePulls: false
# How often the kubelet syncs a pod again, also after a failed prepare:
# 10s here, upstream's default is 1m. The kubelet retries a failed prepare
# only when it next syncs the pod, and the node authorizer refuses its first
# fetch of a claim when it sees the pod before the authorizer's graph has the
# pod bound (about one pod in eight when eight start together on this node):
# with 1m such a pod starts 60-90 s late (docs/local-cluster.md).
syncFrequency: ${TANGRAM_KUBELET_SYNC_FREQUENCY:-10s}
# The longest wait before the kubelet restarts a crashed container (its
# default, 300s; the soak, which SIGKILLs the plugin's container every few
# seconds, shortens it so the plugin is back within seconds as a host process
# restarted by a supervisor would be).
crashLoopBackOff:
  maxContainerRestartPeriod: ${TANGRAM_KUBELET_MAX_RESTART_PERIOD:-300s}
YAML
}
