#!/usr/bin/env bash
# Assembles the glibc root file system of the kubelet plugin image from the
# Debian packages pinned in debian-base.lock, without Docker or a registry:
# each .deb is fetched with `apt-get download`, checked against its pinned
# sha256, cached under ~/.cache/tangram/debs and unpacked with dpkg-deb.
#   debian-base.sh [--allow-unpinned] ROOTFS_DIR
#   debian-base.sh --update-lock
# TANGRAM_BASE_LOCK names another lock file (tests).
# ROOTFS_DIR gets the packages' files (copyright notices kept, other docs
# dropped) and /var/lib/dpkg/status.d/<package>, so image scanners see which
# glibc the image carries. --allow-unpinned: when a pinned version is no
# longer served, take Debian's current one with a warning (the image is then
# not the one the lock describes). --update-lock pins the current versions.
source "$(dirname "${BASH_SOURCE[0]}")/../local-cluster/lib.sh"

LOCK_FILE="${TANGRAM_BASE_LOCK:-$REPO_ROOT/hack/images/debian-base.lock}"
DEB_CACHE="$CACHE_ROOT/debs"

# apt_lists_refreshed: run `apt-get update` at most once per run.
apt_lists_refreshed=""
refresh_apt_lists() {
	[ -z "$apt_lists_refreshed" ] || return 1
	apt_lists_refreshed=1
	log "apt-get update (a pinned .deb was not found in the package lists)"
	DEBIAN_FRONTEND=noninteractive apt-get update -qq >/dev/null 2>&1 \
		|| die "apt-get update failed; the base image needs Debian's package lists (run as root)"
}

# download SPEC DIR: apt-get download SPEC (name or name=version) into DIR.
download() {
	local spec="$1" dir="$2"
	(cd "$dir" && apt-get download -qq "$spec" >/dev/null 2>&1) && return 0
	refresh_apt_lists || return 1
	(cd "$dir" && apt-get download -qq "$spec" >/dev/null 2>&1)
}

# candidate NAME: the version apt would install now.
candidate() { apt-cache policy "$1" 2>/dev/null | awk '/Candidate:/ {print $2}'; }

lock_entries() { grep -vE '^[[:space:]]*(#|$)' "$LOCK_FILE"; }

update_lock() {
	command -v apt-get >/dev/null || die "apt-get is needed to pin Debian packages"
	refresh_apt_lists || true
	local tmp name version sum
	tmp="$(mktemp)"
	grep -E '^[[:space:]]*#' "$LOCK_FILE" >"$tmp"
	while read -r name _; do
		version="$(candidate "$name")"
		[ -n "$version" ] && [ "$version" != "(none)" ] || die "Debian has no candidate for $name"
		sum="$(apt-cache show "$name=$version" | awk '/^SHA256:/ {print $2; exit}')"
		[ -n "$sum" ] || die "apt-cache show $name=$version gives no SHA256"
		printf '%s %s %s\n' "$name" "$version" "$sum" >>"$tmp"
		info "$name $version"
	done < <(lock_entries)
	mv "$tmp" "$LOCK_FILE"
	log "pinned the current versions in $LOCK_FILE"
}

# fetch NAME VERSION SHA256 ALLOW_UNPINNED: print the path of the cached .deb.
fetch() {
	local name="$1" version="$2" sum="$3" allow_unpinned="$4" cached="$DEB_CACHE/$3.deb"
	if [ -f "$cached" ]; then
		# A cached file is trusted only if it still is what the lock pins.
		[ "$(sha256sum "$cached" | cut -d' ' -f1)" = "$sum" ] && { echo "$cached"; return; }
		printf 'WARNING: %s in the cache does not match its sha256; downloading it again\n' "$cached" >&2
		rm -f "$cached"
	fi
	command -v apt-get >/dev/null || die "$name $version is not in $DEB_CACHE and there is no apt-get to download it"
	local tmp got
	tmp="$(mktemp -d)"
	if download "$name=$version" "$tmp"; then
		got="$(sha256sum "$tmp"/*.deb | cut -d' ' -f1)"
		[ "$got" = "$sum" ] || die "$name $version downloaded with sha256 $got, but debian-base.lock pins $sum; refusing it (check the mirror, or re-pin with hack/images/debian-base.sh --update-lock)"
		mkdir -p "$DEB_CACHE"
		mv "$tmp"/*.deb "$cached"
		rm -rf "$tmp"
		echo "$cached"
		return
	fi
	[ -n "$allow_unpinned" ] || die "Debian no longer serves $name $version pinned in hack/images/debian-base.lock; pin the current versions with hack/images/debian-base.sh --update-lock and commit the lock (or pass --allow-unpinned for a local build)"
	download "$name" "$tmp" || die "apt-get download $name failed"
	printf 'WARNING: %s %s pinned in debian-base.lock is gone from Debian; using %s, so this base is not the pinned one\n' \
		"$name" "$version" "$(basename "$tmp"/*.deb)" >&2
	got="$(sha256sum "$tmp"/*.deb | cut -d' ' -f1)"
	mkdir -p "$DEB_CACHE"
	mv "$tmp"/*.deb "$DEB_CACHE/$got.deb"
	rm -rf "$tmp"
	echo "$DEB_CACHE/$got.deb"
}

assemble() {
	local rootfs="$1" allow_unpinned="$2" name version sum deb
	command -v dpkg-deb >/dev/null || die "dpkg-deb is needed to unpack the base image's packages (Debian package dpkg)"
	[ "$(dpkg --print-architecture 2>/dev/null || echo amd64)" = amd64 ] \
		|| die "the base image is pinned for amd64; build on an amd64 machine"
	mkdir -p "$rootfs/var/lib/dpkg/status.d"
	while read -r name version sum; do
		deb="$(fetch "$name" "$version" "$sum" "$allow_unpinned")"
		dpkg-deb -x "$deb" "$rootfs" || die "unpacking $deb failed"
		# A status.d entry per package, as distroless images have, so image
		# scanners know the glibc version.
		{ dpkg-deb -f "$deb"; echo "Status: install ok installed"; } >"$rootfs/var/lib/dpkg/status.d/$name"
	done < <(lock_entries)
	# Keep the copyright notices (the licences require them), drop the
	# rest of the documentation.
	find "$rootfs/usr/share/doc" -type f ! -name copyright -delete 2>/dev/null || true
	rm -rf "$rootfs/usr/share/lintian" "$rootfs/usr/share/man" "$rootfs/usr/share/info"
	[ -e "$rootfs/lib64/ld-linux-x86-64.so.2" ] || die "the base has no /lib64/ld-linux-x86-64.so.2 after unpacking $LOCK_FILE's packages"
}

allow_unpinned="" rootfs=""
for arg in "$@"; do
	case "$arg" in
	--update-lock) update_lock; exit 0 ;;
	--allow-unpinned) allow_unpinned=1 ;;
	-*) die "unknown flag $arg (usage: debian-base.sh [--allow-unpinned] ROOTFS_DIR | --update-lock)" ;;
	*) rootfs="$arg" ;;
	esac
done
[ -n "$rootfs" ] || die "usage: debian-base.sh [--allow-unpinned] ROOTFS_DIR | --update-lock"
assemble "$rootfs" "$allow_unpinned"
