#!/usr/bin/env bash
# Builds every image twice and fails unless both builds give the same
# archives: the second build runs from a copy of the tree in another
# directory, under another umask, after the Go build cache has relinked
# everything (go build always relinks), with the same SOURCE_DATE_EPOCH.
#   check-reproducible.sh [build-images.sh flags, e.g. --only gpu-info]
source "$(dirname "${BASH_SOURCE[0]}")/../local-cluster/lib.sh"

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
export SOURCE_DATE_EPOCH="${SOURCE_DATE_EPOCH:-$(git -C "$REPO_ROOT" log -1 --format=%ct 2>/dev/null || echo 0)}"

log "first build (in $REPO_ROOT)"
"$REPO_ROOT/hack/images/build-images.sh" --out "$work/a" "$@" || die "the first build failed"

log "second build (a copy of the tree in $work/src, umask 0002)"
mkdir -p "$work/src"
(cd "$REPO_ROOT" && git ls-files -co --exclude-standard -z | tar --null -cf - -T -) | tar -xf - -C "$work/src" \
	|| die "copying the tree failed"
(umask 0002 && "$work/src/hack/images/build-images.sh" --out "$work/b" "$@") || die "the second build failed"

failed=0
for a in "$work"/a/*.tar; do
	name="$(basename "$a")" b="$work/b/$(basename "$a")"
	sa="$(sha256sum "$a" | cut -d' ' -f1)" sb="$(sha256sum "$b" 2>/dev/null | cut -d' ' -f1)"
	if [ "$sa" = "$sb" ]; then
		info "same: $name sha256:$sa"
	else
		printf 'DIFFERENT: %s: sha256:%s vs sha256:%s\n' "$name" "$sa" "${sb:-missing}" >&2
		failed=1
	fi
done
[ "$failed" -eq 0 ] || die "two builds of the same tree gave different images"
log "every image is reproducible"
