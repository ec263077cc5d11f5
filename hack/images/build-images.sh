#!/usr/bin/env bash
# Builds every image the chart and the tests use as reproducible OCI archives
# (same sources, Go release and pinned Debian packages -> same digest), with
# no Docker and no registry, and with --import loads them into the local
# cluster's containerd. `make images` and every stage of the Dockerfile run
# this script, so the two cannot build different images.
#   build-images.sh [--import] [--cmds-best-effort] [--allow-unpinned-base]
#                   [--out DIR] [--only NAME]... [--export-rootfs DIR] [--list]
# --cmds-best-effort  an image of ./cmd/* that does not build is reported and
#                     skipped instead of failing the run (cluster-up needs only
#                     the test images and the plugin)
# --allow-unpinned-base  take Debian's current packages for the glibc base when
#                     the pinned ones are gone (debian-base.sh), with a warning
# --out DIR           where the archives go (default ~/.cache/tangram/images)
# --only NAME         build only this image (repeatable)
# --export-rootfs DIR also leave each image's file system in DIR/NAME (the
#                     Dockerfile copies it into its final stages)
# --list              print "NAME REF ENTRYPOINT BASE PATH=..." for every image
# Images (NAME REF SOURCE BASE):
IMAGE_TAG="${IMAGE_TAG:-dev}"
IMAGE_TABLE="
pause              registry.k8s.io/pause:3.10                      ./test/images/pause      static
gpu-info           localhost/tangram/gpu-info:$IMAGE_TAG           ./test/images/gpu-info   static
dra-kubelet-plugin localhost/tangram/dra-kubelet-plugin:$IMAGE_TAG ./cmd/dra-kubelet-plugin glibc
dra-controller     localhost/tangram/dra-controller:$IMAGE_TAG     ./cmd/dra-controller     static
tangram-scheduler  localhost/tangram/tangram-scheduler:$IMAGE_TAG  ./cmd/tangram-scheduler  static
"
# static: a CGO_ENABLED=0 binary alone in the image. glibc: a cgo binary
# (NVML is reached through go-nvml's dlopen) on libc6 and its dependencies
# from debian-base.lock.
source "$(dirname "${BASH_SOURCE[0]}")/../local-cluster/lib.sh"

IMAGE_DIR="$CACHE_ROOT/images"
do_import="" best_effort="" allow_unpinned="" export_rootfs="" list_only="" only=()
while [ $# -gt 0 ]; do
	case "$1" in
	--import) do_import=1 ;;
	--cmds-best-effort) best_effort=1 ;;
	--allow-unpinned-base) allow_unpinned=1 ;;
	--list) list_only=1 ;;
	--out | --only | --export-rootfs)
		[ $# -ge 2 ] || die "$1 needs a value"
		case "$1" in
		--out) IMAGE_DIR="$2" ;;
		--only) only+=("$2") ;;
		--export-rootfs) export_rootfs="$2" ;;
		esac
		shift
		;;
	*) die "unknown argument $1 (usage: build-images.sh [--import] [--cmds-best-effort] [--allow-unpinned-base] [--out DIR] [--only NAME]... [--export-rootfs DIR] [--list])" ;;
	esac
	shift
done

# path_env BASE: the PATH of an image on that base.
path_env() {
	case "$1" in
	static) echo "PATH=/" ;;
	glibc) echo "PATH=/usr/local/bin:/usr/bin:/bin:/" ;;
	*) die "unknown image base $1" ;;
	esac
}

# Every image's entrypoint is its program at the root, /NAME.
if [ -n "$list_only" ]; then
	while read -r name ref _ base; do
		[ -n "$name" ] && printf '%s %s /%s %s %s\n' "$name" "$ref" "$name" "$base" "$(path_env "$base")"
	done <<<"$IMAGE_TABLE"
	exit 0
fi
for want in "${only[@]}"; do
	grep -qE "^$want " <<<"$IMAGE_TABLE" || die "--only $want: no such image (build-images.sh --list names them)"
done
wanted() {
	[ "${#only[@]}" -eq 0 ] && return 0
	local w
	for w in "${only[@]}"; do [ "$w" = "$1" ] && return 0; done
	return 1
}

# Every time inside an image is the last commit's, unless the caller says.
if [ -z "${SOURCE_DATE_EPOCH:-}" ]; then
	SOURCE_DATE_EPOCH="$(git -C "$REPO_ROOT" log -1 --format=%ct 2>/dev/null || echo 0)"
fi
export SOURCE_DATE_EPOCH
# -trimpath and an empty build ID keep paths and random IDs out of binaries.
GO_FLAGS=(-trimpath -buildvcs=false -ldflags "-s -w -buildid=")

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
mkdir -p "$IMAGE_DIR"
info "go build ./hack/images/ocibuild"
(cd "$REPO_ROOT" && go_static build -o "$work/ocibuild" ./hack/images/ocibuild) || die "building hack/images/ocibuild failed"

# glibc_base: assemble the Debian base into $base_rootfs, once per run.
base_rootfs=""
glibc_base() {
	[ -z "$base_rootfs" ] || return 0
	local flags=()
	[ -z "$allow_unpinned" ] || flags+=(--allow-unpinned)
	"$REPO_ROOT/hack/images/debian-base.sh" "${flags[@]}" "$work/debian-base" || return 1
	base_rootfs="$work/debian-base"
}

# smoke_test_glibc ROOTFS NAME: run the cgo program against the image's own
# loader and libc (no chroot needed), with fake GPUs and with NVML, so a
# missing library or a glibc older than the build machine's fails here and
# not on a GPU node.
smoke_test_glibc() {
	local base="$1" app="$2" name="$3" out
	local run=("$base/lib64/ld-linux-x86-64.so.2" --library-path "$base/lib/x86_64-linux-gnu:$base/usr/lib/x86_64-linux-gnu" "$app/$name")
	out="$("${run[@]}" slices --fake-profile dgx-h100 --node-name smoke-test -o json 2>&1)" \
		|| { printf '%s\n' "$out" >&2; return 1; }
	grep -q '"gpu-7"' <<<"$out" || { printf 'no gpu-7 in:\n%s\n' "$out" >&2; return 1; }
	# Without a fake profile the cgo build looks for libnvidia-ml.so.1 under
	# the driver root (an empty one here, so the answer is the same on a GPU
	# machine); a CGO_ENABLED=0 build says it has no NVML before looking.
	local empty_root
	empty_root="$(mktemp -d)"
	out="$("${run[@]}" slices --node-name smoke-test --driver-root "$empty_root" 2>&1)" || true
	rmdir "$empty_root"
	grep -q "libnvidia-ml.so.1 not found under the NVIDIA driver root" <<<"$out" ||
		{ printf 'want the cgo build to look for NVML under the driver root, got:\n%s\n' "$out" >&2; return 1; }
}

# build_image NAME REF PACKAGE BASE
build_image() {
	local name="$1" ref="$2" pkg="$3" base="$4"
	# A command with its own go.mod (a nested module) builds from its directory.
	local dir="$REPO_ROOT" target="$pkg"
	if [ -f "$REPO_ROOT/$pkg/go.mod" ]; then dir="$REPO_ROOT/$pkg" target=.; fi
	local app="$work/$name/app" cgo=0 tags=() layers=() env_path
	env_path="$(path_env "$base")"
	mkdir -p "$app/etc" "$app/tmp"
	chmod 1777 "$app/tmp"
	# Enough of /etc for the runtime to resolve the root user.
	echo "root:x:0:0:root:/:/nonexistent" >"$app/etc/passwd"
	echo "root:x:0:" >"$app/etc/group"
	case "$base" in
	static) ;;
	glibc)
		cgo=1
		# Pure-Go DNS and user lookups: the image has no NSS modules
		# (the node mode of hack/gomodes.sh).
		tags=(-tags "$NODE_GO_TAGS")
		glibc_base || { printf '    assembling the glibc base failed (image %s)\n' "$ref" >&2; return 1; }
		layers+=(--layer "$base_rootfs=debian bookworm: $(awk '!/^#/ && NF {printf "%s%s=%s", sep, $1, $2; sep=" "}' "$REPO_ROOT/hack/images/debian-base.lock")")
		;;
	esac
	info "go build $pkg (CGO_ENABLED=$cgo)"
	(cd "$dir" && CGO_ENABLED=$cgo go build "${GO_FLAGS[@]}" "${tags[@]}" -o "$app/$name" "$target") \
		|| { printf '    go build %s failed (image %s)\n' "$pkg" "$ref" >&2; return 1; }
	# The kubelet plugin copies tangram-cdi-hook from beside itself to the
	# host, where the container runtime runs it (docs/enforcement.md).
	if [ "$name" = dra-kubelet-plugin ]; then
		info "go build ./cmd/tangram-cdi-hook (CGO_ENABLED=$cgo)"
		(cd "$dir" && CGO_ENABLED=$cgo go build "${GO_FLAGS[@]}" "${tags[@]}" -o "$app/tangram-cdi-hook" ./cmd/tangram-cdi-hook) \
			|| { printf '    go build ./cmd/tangram-cdi-hook failed (image %s)\n' "$ref" >&2; return 1; }
	fi
	if [ "$base" = glibc ]; then
		smoke_test_glibc "$base_rootfs" "$app" "$name" \
			|| { printf '    %s does not run on its glibc base (image %s)\n' "$pkg" "$ref" >&2; return 1; }
	fi
	layers+=(--layer "$app=go build $pkg")
	local digest
	digest="$("$work/ocibuild" --ref "$ref" --out "$IMAGE_DIR/$name.tar" --entrypoint "/$name" --env "$env_path" \
		--label "org.opencontainers.image.title=$name" \
		--label "org.opencontainers.image.source=https://github.com/tangram-gpu/tangram" \
		"${layers[@]}")" || { printf '    writing the archive of %s failed\n' "$ref" >&2; return 1; }
	if [ -n "$export_rootfs" ]; then
		rm -rf "${export_rootfs:?}/$name"
		mkdir -p "$export_rootfs/$name"
		[ "$base" != glibc ] || cp -a "$base_rootfs/." "$export_rootfs/$name/"
		cp -a "$app/." "$export_rootfs/$name/"
	fi
	printf '    image %s → %s (%s, %s)\n' "$ref" "$IMAGE_DIR/$name.tar" "$digest" "$(du -h "$IMAGE_DIR/$name.tar" | cut -f1)" >&2
	IMAGES+=("$ref=$IMAGE_DIR/$name.tar")
}

IMAGES=()
while read -r name ref pkg base; do
	[ -n "$name" ] && wanted "$name" || continue
	case "$pkg" in
	./cmd/*)
		if [ -n "$best_effort" ]; then
			build_image "$name" "$ref" "$pkg" "$base" \
				|| printf 'WARNING: skipping image %s: %s does not build\n' "$ref" "$pkg" >&2
		else
			build_image "$name" "$ref" "$pkg" "$base" || die "image $ref failed to build"
		fi
		;;
	*) build_image "$name" "$ref" "$pkg" "$base" || die "image $ref is required (sandbox or e2e workload)" ;;
	esac
done <<<"$IMAGE_TABLE"

if [ -n "$do_import" ]; then
	for entry in "${IMAGES[@]}"; do
		ref="${entry%%=*}" archive="${entry#*=}"
		# ctr warns about cgroup v1 on every call; show its output only on failure.
		out="$("$CONTAINERD_BIN/ctr" --address "$CONTAINERD_SOCK" -n k8s.io images import --local "$archive" 2>&1)" \
			|| die "importing $archive into containerd failed: $out"
		# Pinned images are never garbage-collected by the kubelet.
		out="$("$CONTAINERD_BIN/ctr" --address "$CONTAINERD_SOCK" -n k8s.io images label "$ref" io.cri-containerd.pinned=pinned 2>&1)" \
			|| die "image $ref is not in containerd after importing $archive (wrong name in the archive?): $out"
		info "imported $ref"
	done
fi
