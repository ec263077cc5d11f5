#!/usr/bin/env bash
# Builds Tangram's offline kind node image from source, with no registry:
#   hack/kind/build-node-image.sh             prints the image name on stdout
#   hack/kind/build-node-image.sh --is-cached exits 0 when a node image of an
#       earlier run is cached (then a rebuild at most reassembles it, ~1-2 min)
# `kind build node-image` cannot run here (it pulls a base image and
# Kubernetes' build images), so this assembles the same kind of image:
#   1. a Debian rootfs with systemd and kind's package list (debootstrap),
#      plus runc and the CNI plugins from Debian;
#   2. kind's node files (entrypoint, systemd units) from the kind module;
#   3. containerd, crictl, kubelet, kubectl (the local cluster's cached
#      builds) and kubeadm (hack/local-cluster/build-binaries.sh kubeadm);
#   4. the control-plane images, wrapped from the same binaries under the
#      names `kubeadm config images list` gives, as OCI archives that the
#      node's containerd imports when it first starts.
# Each piece is cached under $KIND_CACHE; the image is kept in the private
# Docker engine's data root and as a tarball, keyed by everything it is made
# of, so a second run only checks the key. Needs the private engine running
# (hack/kind/dockerd.sh start) and root.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
need_root

NODE_DIR="$REPO_ROOT/hack/kind/node"
# kind's default pod subnet; the node's bridge/host-local CNI config uses it.
POD_SUBNET=10.244.0.0/16

# --- 1. Debian rootfs --------------------------------------------------------
# kind's base image package list (kind images/base/Dockerfile), plus runc and
# the CNI plugins, which kind builds from source and Debian ships.
NODE_PACKAGES="systemd systemd-sysv dbus conntrack iptables nftables iproute2 ethtool util-linux mount kmod
	libseccomp2 pigz fuse-overlayfs nfs-common e2fsprogs bash ca-certificates curl jq procps
	runc containernetworking-plugins"

build_rootfs() {
	local key dir
	key="$(printf '%s\n' "$KIND_NODE_SUITE" "$KIND_NODE_MIRROR" $NODE_PACKAGES | sha256sum | cut -c1-12)"
	dir="$KIND_CACHE/rootfs-$KIND_NODE_SUITE-$key"
	ROOTFS="$dir/rootfs"
	if [ -f "$dir/.done" ]; then
		info "reusing the cached Debian rootfs ($dir)"
		return 0
	fi
	apt_install debootstrap
	local start; start="$(now_s)"
	log "debootstrap $KIND_NODE_SUITE with systemd and kind's packages (cold, ~5 min; log: $dir/debootstrap.log)"
	rm -rf "$dir"
	mkdir -p "$dir"
	debootstrap --variant=minbase --include="$(echo $NODE_PACKAGES | tr ' ' ',')" \
		"$KIND_NODE_SUITE" "$dir/rootfs" "$KIND_NODE_MIRROR" >"$dir/debootstrap.log" 2>&1 \
		|| { tail -n 20 "$dir/debootstrap.log" >&2; die "debootstrap $KIND_NODE_SUITE from $KIND_NODE_MIRROR failed (log: $dir/debootstrap.log)"; }
	# What kind's Dockerfile does after installing: no services but its own,
	# no kernel-log reading, /sbin/init = systemd; apt caches dropped.
	(
		cd "$dir/rootfs"
		find lib/systemd/system/sysinit.target.wants/ -name systemd-tmpfiles-setup.service -delete
		rm -f lib/systemd/system/multi-user.target.wants/* etc/systemd/system/*.wants/* \
			lib/systemd/system/local-fs.target.wants/* lib/systemd/system/sockets.target.wants/*udev* \
			lib/systemd/system/sockets.target.wants/*initctl* lib/systemd/system/basic.target.wants/*
		echo "ReadKMsg=no" >>etc/systemd/journald.conf
		ln -sf /usr/lib/systemd/systemd sbin/init
		rm -rf var/cache/apt/archives/*.deb var/lib/apt/lists/*
	)
	touch "$dir/.done"
	log "Debian rootfs ready in $(elapsed "$start") ($(du -sh "$dir/rootfs" | cut -f1))"
}

# --- 3/4. binaries and control-plane images -----------------------------------
build_binaries() {
	"$REPO_ROOT/hack/local-cluster/build-binaries.sh" kube kubeadm etcd containerd crictl
	KUBE_BIN="$(component_dir kubernetes "$KUBE_VERSION")/bin"
	KUBEADM_BIN="$(component_dir kubeadm "$KUBE_VERSION")/bin"
	ETCD_BIN_DIR="$(component_dir etcd "$ETCD_VERSION")/bin"
	CONTAINERD_BIN_DIR="$(component_dir containerd "$CONTAINERD_VERSION")/bin"
	CRICTL_BIN_DIR="$(component_dir crictl "$CRICTL_VERSION")/bin"
}

# control_plane_images DIR: one OCI archive per image kubeadm needs (but
# coredns and kube-proxy, which the kind demo skips: see kind-config-offline),
# each a static binary under /usr/local/bin on an empty base.
control_plane_images() {
	local out="$1" ocibuild="$KIND_CACHE/bin/ocibuild" ref name bin
	mkdir -p "$out"
	(cd "$REPO_ROOT" && go_static build -o "$ocibuild" ./hack/images/ocibuild) || die "building hack/images/ocibuild failed"
	for ref in $("$KUBEADM_BIN/kubeadm" config images list --kubernetes-version "$KUBE_VERSION" 2>/dev/null); do
		name="${ref##*/}" name="${name%%:*}"
		case "$name" in
		kube-apiserver | kube-controller-manager | kube-scheduler) bin="$KUBE_BIN/$name" ;;
		etcd) bin="$ETCD_BIN_DIR/etcd" ;;
		pause) bin="" ;;
		coredns | kube-proxy) info "skipping $ref (the offline kind cluster runs without it)"; continue ;;
		*) die "kubeadm lists an image this script does not know how to build: $ref" ;;
		esac
		local root="$out/$name.root"
		rm -rf "$root"
		mkdir -p "$root/usr/local/bin" "$root/etc" "$root/tmp"
		chmod 1777 "$root/tmp"
		echo "root:x:0:0:root:/:/nonexistent" >"$root/etc/passwd"
		echo "root:x:0:" >"$root/etc/group"
		local entry="/usr/local/bin/$name"
		if [ -n "$bin" ]; then
			cp "$bin" "$root/usr/local/bin/$name"
		else
			# The sandbox image: Tangram's own pause (test/images/pause).
			(cd "$REPO_ROOT" && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$root/pause" ./test/images/pause) \
				|| die "building test/images/pause failed"
			entry=/pause
			PAUSE_IMAGE="$ref"
		fi
		"$ocibuild" --ref "$ref" --out "$out/$name.tar" --entrypoint "$entry" \
			--env PATH=/usr/local/bin:/usr/bin:/bin --layer "$root=$name $KUBE_VERSION for the kind node" >/dev/null \
			|| die "writing the image archive of $ref failed"
		rm -rf "$root"
		info "image $ref ($(du -h "$out/$name.tar" | cut -f1))"
	done
	[ -n "${PAUSE_IMAGE:-}" ] || die "kubeadm config images list named no pause image"
}

# --- assembling the node image ------------------------------------------------
node_image_key() {
	{
		echo "$KIND_VERSION $KUBE_VERSION $ETCD_VERSION $CONTAINERD_VERSION $CRICTL_VERSION $POD_SUBNET"
		echo "$ROOTFS"
		cat "$NODE_DIR"/* "${BASH_SOURCE[0]}"
		sha256sum "$KUBE_BIN"/* "$KUBEADM_BIN"/kubeadm "$ETCD_BIN_DIR"/etcd "$CONTAINERD_BIN_DIR"/* "$CRICTL_BIN_DIR"/crictl | cut -d' ' -f1
		(cd "$REPO_ROOT" && git rev-parse HEAD:test/images/pause HEAD:hack/images/ocibuild 2>/dev/null || true)
	} | sha256sum | cut -c1-12
}

assemble() {
	local stage="$1" kind_files
	kind_files="$(go mod download -json "sigs.k8s.io/kind@$KIND_VERSION" | jq -r .Dir)/images/base/files"
	[ -d "$kind_files" ] || die "kind's node files are missing from the module cache ($kind_files)"
	log "assembling the node file system (rootfs + kind's node files + binaries + images)"
	cp -a "$ROOTFS/." "$stage/"
	# kind's node files, with the modes of kind's Dockerfile.
	cp -r "$kind_files/." "$stage/"
	chmod -R u+w "$stage/kind" "$stage/etc" "$stage/usr/local/bin" "$stage/LICENSES"
	find "$stage/kind" "$stage/etc/systemd/system" "$stage/etc/containerd" "$stage/etc/default" "$stage/etc/sysctl.d" \
		"$stage/LICENSES" -type f -exec chmod 0644 {} +
	chmod 0755 "$stage/kind" "$stage/kind/bin" "$stage"/kind/bin/* "$stage"/usr/local/bin/*
	# containerd's configuration (containerd 2, CDI, restricted OOM score).
	sed "s|@PAUSE_IMAGE@|$PAUSE_IMAGE|" "$NODE_DIR/containerd-config.toml" >"$stage/etc/containerd/config.toml"
	mkdir -p "$stage/etc/systemd/system/containerd.service.d"
	printf '[Service]\nExecStartPost=/kind/bin/import-images.sh\n' >"$stage/etc/systemd/system/containerd.service.d/20-tangram-images.conf"
	install -m 0755 "$NODE_DIR/import-images.sh" "$stage/kind/bin/import-images.sh"
	# The pod network: one node, a bridge and host-local addresses.
	mkdir -p "$stage/etc/cni/net.d" "$stage/opt/cni/bin"
	sed "s|@POD_SUBNET@|$POD_SUBNET|" "$NODE_DIR/10-tangram-bridge.conflist" >"$stage/etc/cni/net.d/10-tangram-bridge.conflist"
	local p
	for p in bridge host-local loopback portmap; do
		[ -x "$stage/usr/lib/cni/$p" ] || die "CNI plugin $p missing from the rootfs (containernetworking-plugins)"
		ln -sf "/usr/lib/cni/$p" "$stage/opt/cni/bin/$p"
	done
	# Binaries at the paths kind's units and kind itself use.
	install -m 0755 "$CONTAINERD_BIN_DIR"/containerd "$CONTAINERD_BIN_DIR"/containerd-shim-runc-v2 "$CONTAINERD_BIN_DIR"/ctr \
		"$CRICTL_BIN_DIR"/crictl "$stage/usr/local/bin/"
	install -m 0755 "$KUBE_BIN"/kubelet "$KUBE_BIN"/kubectl "$KUBEADM_BIN"/kubeadm "$stage/usr/bin/"
	mkdir -p "$stage/kind/images" "$stage/etc/kubernetes/manifests"
	cp "$IMAGES_DIR"/*.tar "$stage/kind/images/"
	echo "$KUBE_VERSION" >"$stage/kind/version"
	# kind's Dockerfile: enable its services, mask binfmt.
	chroot "$stage" systemctl enable kubelet.service containerd.service undo-mount-hacks.service >/dev/null 2>&1 \
		|| die "systemctl enable in the node rootfs failed"
	chroot "$stage" systemctl mask systemd-binfmt.service >/dev/null 2>&1 || true
}

NODE_STAGE=""
main() {
	mkdir -p "$KIND_CACHE"
	build_rootfs
	build_binaries
	IMAGES_DIR="$KIND_CACHE/control-plane-images-$KUBE_VERSION"
	PAUSE_IMAGE=""
	control_plane_images "$IMAGES_DIR"
	local key image tarball
	key="$(node_image_key)"
	image="tangram.local/kind-node:$KUBE_VERSION-$key"
	tarball="$KIND_CACHE/node-image-$KUBE_VERSION-$key.tar"
	if tdocker image inspect "$image" >/dev/null 2>&1; then
		info "reusing the node image $image"
		echo "$image"
		return 0
	fi
	if [ ! -f "$tarball" ]; then
		local start; start="$(now_s)"
		NODE_STAGE="$(mktemp -d "$KIND_CACHE/node-stage.XXXXXX")"
		trap 'rm -rf "$NODE_STAGE"' EXIT
		assemble "$NODE_STAGE"
		log "packing the node file system ($(du -sh "$NODE_STAGE" | cut -f1))"
		tar -C "$NODE_STAGE" --numeric-owner -cf "$tarball.tmp" . || die "packing $NODE_STAGE failed"
		mv "$tarball.tmp" "$tarball"
		rm -rf "$NODE_STAGE"
		# Older node images (other keys) are not needed any more.
		local old
		for old in "$KIND_CACHE"/node-image-*.tar; do
			[ "$old" = "$tarball" ] || rm -f "$old"
		done
		info "node file system packed in $(elapsed "$start")"
	fi
	# kind's images also set STOPSIGNAL SIGRTMIN+3, which Debian's Docker
	# 20.10 cannot set on import; kind removes nodes with `docker rm -f`.
	log "docker import $image (from $tarball)"
	tdocker import \
		--change 'ENV container=docker' \
		--change 'ENTRYPOINT ["/usr/local/bin/entrypoint", "/sbin/init"]' \
		"$tarball" "$image" >/dev/null || die "docker import of $tarball failed"
	echo "$image"
}

if [ "${1:-}" = --is-cached ]; then
	compgen -G "$KIND_CACHE/rootfs-*/.done" >/dev/null && compgen -G "$KIND_CACHE/node-image-*.tar" >/dev/null &&
		[ -f "$(component_dir kubeadm "$KUBE_VERSION")/.done" ] && [ -x "$KIND_BIN_DIR/kind" ]
	exit
fi
[ $# -eq 0 ] || die "usage: $0 [--is-cached]"
main
