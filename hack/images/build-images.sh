#!/usr/bin/env bash
# Builds the local cluster's images from this repository's static binaries
# and, with --import, loads them into the cluster's containerd.
#   build-images.sh [--import] [--cmds-best-effort]
# --cmds-best-effort: a ./cmd/* binary that does not build is reported and
# skipped instead of failing the run (cluster-up only needs the test images).
# Images:
#   registry.k8s.io/pause:3.10             sandbox image (test/images/pause)
#   localhost/tangram/gpu-info:dev         e2e workload (test/images/gpu-info)
#   localhost/tangram/<command>:dev        every ./cmd/<command> that exists
source "$(dirname "${BASH_SOURCE[0]}")/../local-cluster/lib.sh"

IMAGE_DIR="$CACHE_ROOT/images"
IMAGE_TAG="${IMAGE_TAG:-dev}"
do_import="" best_effort=""
for arg in "$@"; do
	case "$arg" in
	--import) do_import=1 ;;
	--cmds-best-effort) best_effort=1 ;;
	*) die "unknown argument $arg (usage: build-images.sh [--import] [--cmds-best-effort])" ;;
	esac
done

mkdir -p "$IMAGE_DIR/bin"
# build_image REF GO_PACKAGE
build_image() {
	local ref="$1" pkg="$2" name
	name="$(basename "$pkg")"
	# A command with its own go.mod (a nested module) builds from its directory.
	local dir="$REPO_ROOT" target="$pkg"
	if [ -f "$REPO_ROOT/$pkg/go.mod" ]; then dir="$REPO_ROOT/$pkg" target=.; fi
	info "go build $pkg (static)"
	(cd "$dir" && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$IMAGE_DIR/bin/$name" "$target") \
		|| { printf '    go build %s failed (image %s)\n' "$pkg" "$ref" >&2; return 1; }
	"$REPO_ROOT/hack/images/build-oci.sh" "$ref" "$IMAGE_DIR/bin/$name" "$IMAGE_DIR/$name.tar" || return 1
	IMAGES+=("$ref=$IMAGE_DIR/$name.tar")
}

IMAGES=()
build_image registry.k8s.io/pause:3.10 ./test/images/pause || die "the sandbox image is required"
build_image "localhost/tangram/gpu-info:$IMAGE_TAG" ./test/images/gpu-info || die "the e2e workload image is required"
for cmd in "$REPO_ROOT"/cmd/*/; do
	name="$(basename "$cmd")"
	# A command directory without Go files yet is someone's work in progress.
	compgen -G "$cmd*.go" >/dev/null || continue
	if [ -n "$best_effort" ]; then
		build_image "localhost/tangram/$name:$IMAGE_TAG" "./cmd/$name" \
			|| printf 'WARNING: skipping image localhost/tangram/%s:%s: ./cmd/%s does not build\n' "$name" "$IMAGE_TAG" "$name" >&2
	else
		build_image "localhost/tangram/$name:$IMAGE_TAG" "./cmd/$name" || die "image localhost/tangram/$name:$IMAGE_TAG failed to build"
	fi
done

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
