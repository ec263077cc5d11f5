#!/usr/bin/env bash
# `make test`: every check CI runs, stage by stage, with how long each took.
# Stops at the first failing stage; the summary says which one failed.
set -o nounset -o pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

MAKE_CMD=${MAKE:-make}
stages=(verify unit unit-nocgo gpu-check-ci test-chart test-tangram-scheduler test-e2e test-demo test-e2e-realpath test-soak)
summary=()
overall=0
started_all=$(date +%s)

for stage in "${stages[@]}"; do
	echo "==> make test: stage $stage"
	start=$(date +%s)
	if "$MAKE_CMD" --no-print-directory "$stage"; then
		result=ok
	else
		result="FAILED"
		overall=1
	fi
	summary+=("$(printf '%-24s %6ss  %s' "$stage" "$(($(date +%s) - start))" "$result")")
	[ "$overall" -eq 0 ] || break
done

echo "==> make test: stage durations"
printf '    %s\n' "${summary[@]}"
echo "    total $(($(date +%s) - started_all))s"
if [ "$overall" -ne 0 ]; then
	echo "==> make test FAILED (see the stage above)"
fi
exit "$overall"
