#!/usr/bin/env bash
# `make test`: every check CI runs, stage by stage, with how long each took.
# Stops at the first failing stage; the summary says which one failed.
#
# The race mode's stage, `make vet-cgo unit` (vet of the files only cgo
# builds, then every unit test under the race detector), runs beside the
# cluster stages (hack/unit-beside.sh): it starts when test-e2e's specs
# start and is collected after the last stage. The cluster stages mostly
# wait on the local cluster (the 2-core VM is 85-93 % idle while the specs
# run), and the race mode shares no compiled package with them, so its
# compile and its tests fill that time instead of taking ten minutes of
# their own (docs/testing.md, "What a cold run compiles"). Its output is
# printed when it is collected; a failure stops the run at the next stage
# boundary. The first stage, verify-static, vets every package in the
# static mode. UNIT_BESIDE=0 runs verify and unit as stages of their own,
# first, as before.
set -o nounset -o pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

MAKE_CMD=${MAKE:-make}
stages=(verify unit unit-nocgo gpu-check-ci test-chart test-tangram-scheduler test-e2e test-demo test-e2e-realpath test-soak)
beside_stages=(verify-static unit-nocgo gpu-check-ci test-chart test-tangram-scheduler test-e2e test-demo test-e2e-realpath test-soak)
summary=()
overall=0
started_all=$(date +%s)

run_stage() { # run_stage STAGE: run one stage, add its line to the summary
	local stage="$1" start result=ok
	echo "==> make test: stage $stage"
	start=$(date +%s)
	"$MAKE_CMD" --no-print-directory "$stage" || { result="FAILED"; overall=1; }
	summary+=("$(printf '%-24s %6ss  %s' "$stage" "$(($(date +%s) - start))" "$result")")
}

marks="" unit_pid="" unit_done=1
if [ "${UNIT_BESIDE:-1}" = 1 ]; then
	marks="$(mktemp -d "${TMPDIR:-/tmp}/tangram-test-all.XXXXXX")"
	# The cluster scripts' stages leave their marks here.
	export TANGRAM_STAGE_MARKS="$marks"
	trap '[ "$unit_done" = 1 ] || [ -z "$unit_pid" ] || kill -- -"$unit_pid" 2>/dev/null; rm -rf "$marks"' EXIT
	# Its own session, so that stopping it stops the go commands under it
	# (started from this non-interactive shell, it is no group leader, so
	# setsid does not fork: its pid is its process group's).
	unit_done=0
	setsid hack/unit-beside.sh "$marks" "$$" &
	unit_pid=$!
	stages=("${beside_stages[@]}")
fi

# collect_unit [wait]: once the background race-mode run ended (with wait:
# after waiting for it), print its output and add its line to the summary;
# with wait, run it here if test-e2e's specs never started it.
collect_unit() {
	[ "$unit_done" = 0 ] || return 0
	if [ "${1:-}" = wait ]; then
		if [ ! -e "$marks/e2e.started" ]; then
			touch "$marks/give-up"
			wait "$unit_pid"
			unit_done=1
			run_stage vet-cgo
			[ "$overall" -ne 0 ] || run_stage unit
			return
		fi
		echo "==> make test: waiting for stage vet-cgo + unit, which runs beside the cluster stages"
		wait "$unit_pid"
		if [ ! -e "$marks/unit.rc" ]; then
			# Killed, or setsid missing: no status is a failure, and
			# what it started goes too.
			kill -- -"$unit_pid" 2>/dev/null
			unit_done=1 overall=1
			echo "==> make test: stage vet-cgo + unit ended without a status (killed?); its output so far:"
			cat "$marks/unit.log" 2>/dev/null
			summary+=("$(printf '%-24s %6s   %s' "vet-cgo + unit (beside)" "?" "FAILED (no status)")")
			return
		fi
	fi
	[ -e "$marks/unit.rc" ] || return 0
	unit_done=1
	local rc seconds result=ok
	rc="$(cat "$marks/unit.rc")" seconds="$(cat "$marks/unit.seconds")"
	echo "==> make test: stage vet-cgo + unit (ran beside the cluster stages for ${seconds}s): its output"
	cat "$marks/unit.log"
	[ "$rc" = 0 ] || { result="FAILED"; overall=1; }
	summary+=("$(printf '%-24s %6ss  %s' "vet-cgo + unit (beside)" "$seconds" "$result")")
}

for stage in "${stages[@]}"; do
	run_stage "$stage"
	# Also after a failed stage: a race-mode run that already ended is
	# reported.
	collect_unit
	[ "$overall" -eq 0 ] || break
done
[ "$overall" -ne 0 ] || collect_unit wait

echo "==> make test: stage durations"
printf '    %s\n' "${summary[@]}"
echo "    total $(($(date +%s) - started_all))s"
if [ "$overall" -ne 0 ]; then
	echo "==> make test FAILED (see the stage above)"
fi
exit "$overall"
