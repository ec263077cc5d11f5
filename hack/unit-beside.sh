#!/usr/bin/env bash
# `make vet-cgo unit` beside the cluster stages of `make test`
# (hack/test-all.sh): waits until test-e2e's specs start (the mark
# hack/local-cluster/lib.sh's stage leaves in MARKS), then vets the files
# only cgo builds and runs the race tests, leaving their output, exit
# status and duration in MARKS (unit.log, unit.rc, unit.seconds).
# Exits at once, running nothing, when MARKS/give-up appears first, or
# when make test (PARENT) is gone.
#   hack/unit-beside.sh MARKS PARENT
set -o nounset
marks="$1" parent="$2"
while [ ! -e "$marks/e2e.started" ]; do
	[ ! -e "$marks/give-up" ] && [ -d "$marks" ] && kill -0 "$parent" 2>/dev/null || exit 0
	sleep 2
done
start=$(date +%s)
"${MAKE:-make}" --no-print-directory vet-cgo unit >"$marks/unit.log" 2>&1
rc=$?
echo "$(($(date +%s) - start))" >"$marks/unit.seconds"
# unit.rc last, and whole: its presence says the run ended.
echo "$rc" >"$marks/unit.rc.tmp" && mv "$marks/unit.rc.tmp" "$marks/unit.rc"
