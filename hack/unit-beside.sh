#!/usr/bin/env bash
# `make vet-cgo unit` beside the cluster stages of `make test`
# (hack/test-all.sh): waits until test-e2e's specs start (the mark
# hack/local-cluster/lib.sh's stage leaves in MARKS), then vets the files
# only cgo builds and runs the race tests, leaving their output, exit
# status and duration in MARKS (unit.log, unit.rc, unit.seconds).
# Exits at once, running nothing, when MARKS/give-up appears first.
#   hack/unit-beside.sh MARKS
set -o nounset
marks="$1"
while [ ! -e "$marks/e2e.started" ] && [ ! -e "$marks/give-up" ]; do sleep 2; done
[ -e "$marks/e2e.started" ] || exit 0
start=$(date +%s)
"${MAKE:-make}" --no-print-directory vet-cgo unit >"$marks/unit.log" 2>&1
rc=$?
echo "$(($(date +%s) - start))" >"$marks/unit.seconds"
echo "$rc" >"$marks/unit.rc"
