#!/usr/bin/env bash
# `make test-cold`: a cold `make test` anyone can reproduce. It clones the
# committed HEAD into a scratch directory and runs .ci/run there with every
# cache the stages use empty and inside that directory, so the developer's
# own caches are neither used nor touched:
#
#   GOCACHE               Go build cache                 <scratch>/cache/go-build
#   GOPATH, GOMODCACHE    modules, and GOPATH/bin where   <scratch>/gopath
#                         controller-gen is installed
#   GOBIN                 unset (go install goes to GOPATH/bin)
#   TANGRAM_CACHE         the local cluster's binaries,   <scratch>/cache/tangram
#                         images, debs, helm, kind, and the cluster's own state
#   XDG_CACHE_HOME        mock NVML and nvidia-cdi-hook   <scratch>/cache
#                         builds, helm's cache
#   XDG_CONFIG_HOME,      helm's and go's config          <scratch>/home/.config, .local/share
#   XDG_DATA_HOME
#   HOME                  anything else under ~           <scratch>/home
#
# Only the machine's installed packages (Go, gcc, Debian packages) are
# shared. The cluster stages still use the host's fixed paths
# (/var/lib/kubelet, /var/run/cdi, /run/tangram-containerd) under the
# one-cluster-per-machine lock, so a cold run waits for any other cluster
# run (docs/local-cluster.md).
#
# Usage: hack/cold-run.sh [--keep] [--dir DIR] [--dry-run]
#   --keep     keep the scratch directory (clone, caches, log) afterwards
#   --dir DIR  the scratch directory (default: a new one under $TMPDIR or /var/tmp);
#              it must not exist or be empty
#   --dry-run  print what would run, with the environment, and stop
# Environment: COLD_RUN_ARGS is how `make test-cold` passes these flags.

set -o errexit -o nounset -o pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

usage() { sed -n '/^# Usage:/,/^# Environment:/p' "$0" | sed 's/^# \{0,1\}//' >&2; }
die() { printf 'ERROR: %s\n' "$*" >&2; exit 1; }
log() { printf '==> cold run: %s\n' "$*" >&2; }

keep=0 dry=0 scratch=""
while [ $# -gt 0 ]; do
	case "$1" in
	--keep) keep=1 ;;
	--dry-run) dry=1 ;;
	--dir)
		[ $# -ge 2 ] || die "--dir needs a directory"
		scratch="$2"
		shift
		;;
	--dir=*) scratch="${1#--dir=}" ;;
	-h | --help) usage; exit 0 ;;
	*) usage; die "unknown argument: $1" ;;
	esac
	shift
done

rev="$(git -C "$REPO_ROOT" rev-parse HEAD)"
if [ -n "$(git -C "$REPO_ROOT" status --porcelain --untracked-files=no)" ]; then
	log "note: the work tree has uncommitted changes; the cold run tests the commit $rev only"
fi

if [ -z "$scratch" ]; then
	base="${TMPDIR:-/var/tmp}"
	if [ "$dry" -eq 1 ]; then
		scratch="$base/tangram-cold.XXXXXX"
	else
		scratch="$(mktemp -d "$base/tangram-cold.XXXXXX")"
	fi
elif [ -e "$scratch" ] && [ -n "$(ls -A "$scratch" 2>/dev/null)" ]; then
	die "--dir $scratch exists and is not empty: a cold run needs empty caches"
fi
scratch="$(realpath -m "$scratch")"
src="$scratch/src"
logfile="$scratch/cold-run.log"
# Where the log is copied when the scratch directory is removed.
saved_log="$(dirname "$scratch")/tangram-cold-run-${rev:0:12}.log"

cold_env=(
	"HOME=$scratch/home"
	"XDG_CACHE_HOME=$scratch/cache"
	"XDG_CONFIG_HOME=$scratch/home/.config"
	"XDG_DATA_HOME=$scratch/home/.local/share"
	"TANGRAM_CACHE=$scratch/cache/tangram"
	"GOCACHE=$scratch/cache/go-build"
	"GOPATH=$scratch/gopath"
	"GOMODCACHE=$scratch/gopath/pkg/mod"
)

if [ "$dry" -eq 1 ]; then
	log "dry run: would clone $REPO_ROOT at $rev into $src and run, logging to $logfile:"
	printf '    env -u GOBIN -u TANGRAM_CLUSTER_DIR -u TANGRAM_CLUSTER_LOCK_HELD -u KUBECONFIG'
	printf ' \\\n        %s' "${cold_env[@]}"
	printf ' \\\n        .ci/run\n'
	if [ "$keep" -eq 1 ]; then
		log "dry run: would keep $scratch afterwards"
	else
		log "dry run: would remove $scratch afterwards, the log copied to $saved_log"
	fi
	[ "$(id -u)" -eq 0 ] || log "dry run: as this user (not root) the real run would stop: see below"
	exit 0
fi

if [ "$(id -u)" -ne 0 ]; then
	[ -z "$(ls -A "$scratch" 2>/dev/null)" ] && rmdir "$scratch" 2>/dev/null || true
	die "a cold run must run as root (sudo make test-cold): its cluster stages start containerd and a kubelet; as another user they re-run themselves through sudo and leave root-owned files in the scratch directory"
fi

cleanup() {
	local rc=$?
	if [ "$keep" -eq 1 ]; then
		log "kept $scratch (clone, caches, log $logfile)"
	else
		[ -f "$logfile" ] && cp "$logfile" "$saved_log" && log "log kept as $saved_log"
		log "removing $scratch (--keep keeps it)"
		# Anything a stage left mounted under the cluster's state.
		grep -F " $scratch/" /proc/mounts | awk '{print $2}' | sort -r | xargs -r -n1 umount -l 2>/dev/null || true
		rm -rf "$scratch" || log "could not remove all of $scratch"
	fi
	exit "$rc"
}
trap cleanup EXIT

mkdir -p "$scratch/home" "$scratch/cache" "$scratch/gopath"
log "cloning $rev into $src"
git clone --quiet --no-local --no-checkout "$REPO_ROOT" "$src"
git -C "$src" checkout --quiet --detach "$rev"

log "running .ci/run in $src with empty caches under $scratch; log: $logfile"
log "(about 52 min on the 2-core VM, measured 2026-11-29; progress: the stage lines below, details in the log)"
start=$(date +%s)
set +o errexit
(
	cd "$src"
	env -u GOBIN -u TANGRAM_CLUSTER_DIR -u TANGRAM_CLUSTER_LOCK_HELD -u KUBECONFIG "${cold_env[@]}" .ci/run
) 2>&1 | tee "$logfile" | grep --line-buffered -E '^==> (make test|skipping|cold run)' >&2
rc=${PIPESTATUS[0]}
set -o errexit
took=$(($(date +%s) - start))

echo
echo "cold run of $rev: exit $rc after ${took}s ($((took / 60)) min); stage table:"
sed -n '/^==> make test: stage durations/,$p' "$logfile" | sed -n '2,/^==>/p' | grep -v '^==>' || true
[ "$rc" -eq 0 ] || echo "the run FAILED: see the log ($([ "$keep" -eq 1 ] && echo "$logfile" || echo "$saved_log"))"
exit "$rc"
