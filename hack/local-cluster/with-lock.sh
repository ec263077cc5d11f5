#!/usr/bin/env bash
# Runs a command while holding the host-wide local-cluster lock, so that a
# whole session (bring the cluster up, install, test, inspect) is not torn
# down halfway by someone else's `make test-e2e` or `make cluster-down`.
#   with-lock.sh COMMAND [ARGS...]     e.g. with-lock.sh demo/run-local.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
[ $# -gt 0 ] || die "usage: $0 COMMAND [ARGS...]"
cluster_lock
exec "$@"
