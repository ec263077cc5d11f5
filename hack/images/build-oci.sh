#!/usr/bin/env bash
# Writes a single-layer OCI image archive from one static binary, with nothing
# but tar and sha256sum, so images can be imported into containerd without a
# registry or a Docker engine.
#   build-oci.sh IMAGE_REF BINARY OUT.tar [ENTRYPOINT_PATH]
# The binary is placed at ENTRYPOINT_PATH (default /<binary name>) and is the
# image's entrypoint. The archive's index names the image so that
# `ctr -n k8s.io images import OUT.tar` tags it as IMAGE_REF.
set -o errexit -o nounset -o pipefail

die() { printf 'ERROR: %s\n' "$*" >&2; exit 1; }

[ $# -ge 3 ] || die "usage: $0 IMAGE_REF BINARY OUT.tar [ENTRYPOINT_PATH]"
ref="$1" binary="$2" out="$3"
entry="${4:-/$(basename "$binary")}"
[ -f "$binary" ] || die "binary $binary does not exist; build it first (CGO_ENABLED=0 go build)"
if command -v file >/dev/null && file "$binary" | grep -q "dynamically linked"; then
	die "$binary is dynamically linked; build it with CGO_ENABLED=0 so it runs in an empty image"
fi
case "$ref" in *:*) tag="${ref##*:}" ;; *) die "image ref $ref needs a tag (name:tag)" ;; esac

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/rootfs$(dirname "$entry")" "$work/rootfs/tmp" "$work/rootfs/etc" "$work/oci/blobs/sha256"
install -m 0755 "$binary" "$work/rootfs$entry"
# Enough of /etc for the runtime to resolve the root user.
echo "root:x:0:0:root:/:/nonexistent" >"$work/rootfs/etc/passwd"
echo "root:x:0:" >"$work/rootfs/etc/group"

# Reproducible layer: fixed order, owners and times, so rebuilding an
# unchanged binary gives the same digest.
tar --sort=name --owner=0 --group=0 --numeric-owner --mtime=@0 -C "$work/rootfs" -cf "$work/layer.tar" .

blob() { # blob FILE: move FILE into the blob store, print "digest size"
	local d s
	d="$(sha256sum "$1" | cut -d' ' -f1)"
	s="$(stat -c %s "$1")"
	mv "$1" "$work/oci/blobs/sha256/$d"
	echo "$d $s"
}

read -r layer_digest layer_size < <(blob "$work/layer.tar")

cat >"$work/config.json" <<JSON
{"architecture":"amd64","os":"linux","config":{"Entrypoint":["$entry"],"Env":["PATH=/"],"WorkingDir":"/"},"rootfs":{"type":"layers","diff_ids":["sha256:$layer_digest"]},"history":[{"created_by":"hack/images/build-oci.sh"}]}
JSON
read -r config_digest config_size < <(blob "$work/config.json")

cat >"$work/manifest.json" <<JSON
{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json","config":{"mediaType":"application/vnd.oci.image.config.v1+json","digest":"sha256:$config_digest","size":$config_size},"layers":[{"mediaType":"application/vnd.oci.image.layer.v1.tar","digest":"sha256:$layer_digest","size":$layer_size}]}
JSON
read -r manifest_digest manifest_size < <(blob "$work/manifest.json")

cat >"$work/oci/index.json" <<JSON
{"schemaVersion":2,"mediaType":"application/vnd.oci.image.index.v1+json","manifests":[{"mediaType":"application/vnd.oci.image.manifest.v1+json","digest":"sha256:$manifest_digest","size":$manifest_size,"platform":{"architecture":"amd64","os":"linux"},"annotations":{"io.containerd.image.name":"$ref","org.opencontainers.image.ref.name":"$tag"}}]}
JSON
echo '{"imageLayoutVersion":"1.0.0"}' >"$work/oci/oci-layout"

mkdir -p "$(dirname "$out")"
tar --sort=name --owner=0 --group=0 --numeric-owner --mtime=@0 -C "$work/oci" -cf "$out.tmp" .
mv "$out.tmp" "$out"
printf '    image %s → %s (sha256:%s)\n' "$ref" "$out" "${manifest_digest:0:12}" >&2
