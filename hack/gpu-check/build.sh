#!/usr/bin/env bash
# make gpu-check-bundle: builds the folder gpu-check/ that is carried to a
# bare GPU machine and run there (docs/nvml.md#gpu-check-before-installing):
#
#   <out>/run                          the entry script (hack/gpu-check/run)
#   <out>/bin/dra-kubelet-plugin.gz    cgo build, stripped, gzipped
#   <out>/bin/tangram-cdi-hook.gz      cgo build, stripped, gzipped
#   <out>/bin/nvidia-cdi-hook.gz       NVIDIA's, from the toolkit in go.mod
#   <out>/bin/cuda-alloc               hack/gpu-acceptance/cuda-alloc/cuda-alloc.c
#   <out>/VERSION, <out>/SHA256SUMS
#
# and fails when the folder is larger than GPU_CHECK_MAX_MIB (60). Usage:
# build.sh [OUT] (default bin/gpu-check).
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/../.."
out="${1:-bin/gpu-check}"
max_mib="${GPU_CHECK_MAX_MIB:-60}"
stage="$(mktemp -d)"
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/bin"

start=$SECONDS
# shellcheck source=../gomodes.sh
source hack/gomodes.sh
# The node mode, as the plugin's image builds them (hack/images): the same
# compile serves both, and the binaries need no NSS modules on the GPU node.
echo "==> go build (cgo, tags $NODE_GO_TAGS, stripped) dra-kubelet-plugin, tangram-cdi-hook"
go_node build -ldflags '-s -w' -o "$stage/bin/" ./cmd/dra-kubelet-plugin ./cmd/tangram-cdi-hook
echo "==> nvidia-cdi-hook (hack/nvidia-cdi-hook/build.sh)"
hook="$(hack/nvidia-cdi-hook/build.sh | tail -n 1)"
cp "$hook" "$stage/bin/nvidia-cdi-hook"
echo "==> cuda-alloc (gcc)"
${CC:-gcc} -O2 -Wall -s -o "$stage/bin/cuda-alloc" hack/gpu-acceptance/cuda-alloc/cuda-alloc.c -ldl
# The binaries link the build machine's glibc dynamically: say which
# version the GPU machine needs at least.
glibc="$(for f in "$stage"/bin/*; do objdump -T "$f" 2>/dev/null; done | grep -o 'GLIBC_[0-9.]*' | sort -uV | tail -n 1 | sed 's/GLIBC_//')"
{
	echo "$(git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)$(git diff --quiet HEAD 2>/dev/null || echo ' (modified)') built $(date -u +%Y-%m-%dT%H:%M:%SZ) for $(go env GOOS)/$(go env GOARCH), needs glibc >= ${glibc:-unknown}"
} >"$stage/VERSION"
gzip -9 -n "$stage/bin/dra-kubelet-plugin" "$stage/bin/tangram-cdi-hook" "$stage/bin/nvidia-cdi-hook"
cp hack/gpu-check/run "$stage/run"
chmod 0755 "$stage/run"
(cd "$stage" && find . -type f ! -name SHA256SUMS -print0 | sort -z | xargs -0 sha256sum >SHA256SUMS)

bytes="$(du -sb "$stage" | cut -f1)"
limit=$((max_mib * 1024 * 1024))
if [ "$bytes" -gt "$limit" ]; then
	du -ab "$stage" | sort -n >&2
	echo "gpu-check-bundle: $bytes bytes is over the $max_mib MiB a GPU machine takes" >&2
	exit 1
fi
rm -rf "$out"
mkdir -p "$(dirname "$out")"
cp -a "$stage" "$out"
chmod 0755 "$out"
echo "gpu-check-bundle: $out, $((bytes / 1024 / 1024)) MiB ($bytes bytes) of at most $max_mib MiB, built in $((SECONDS - start)) s"
echo "  copy it to the GPU machine and run: sudo gpu-check/run OUTDIR"
